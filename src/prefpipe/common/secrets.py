"""Credentials never reach a file: one redaction for everything prefpipe writes, and a config check.

Tokens belong in the environment (HF_TOKEN, WANDB_API_KEY), where the hub and wandb clients read them; nothing
in prefpipe needs one in its config. A config value that looks like a credential is therefore refused at parse
time (`check_config`), so it never becomes a rule param (Snakemake records params in `.snakemake/metadata`) or
a stage's `--config` argument. `redact` / `redact_text` are the one redaction applied to what is written anyway:
resolved configs, the argv in versions.json, summaries, metrics rows and log lines (defence in depth for a
stage started by hand).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from prefpipe.common.config import ConfigError

REDACTED = "<redacted>"
# Keys of a config (or flags of a command line) that hold a credential: the whole key, or its last `_`/`-` part,
# names one ("hub_token", "api_key", "wandb_secret", "password") -- but not "tokenizer", "max_new_tokens",
# "pad_token_fix", "secretbench" or "password-reset". Only configs and command lines are redacted by key, and
# only string values: in results, keys are data (benchmark and subset names) and are never judged by name.
SECRET_KEY = re.compile(
    r"(^|[_-])(token|api[_-]?key|secret|password|passwd|credentials?)$",
    re.IGNORECASE,
)
# Tokenizer fields named like credentials but holding a vocabulary token ("pad_token": "<pad>").
_VOCAB_TOKEN = re.compile(r"(pad|eos|bos|unk|sep|cls|mask|special)_token", re.IGNORECASE)
# Credential-shaped values: Hugging Face (hf_...), OpenAI-style (sk-...), GitHub (ghp_/github_pat_...),
# Slack (xox?-...), AWS access keys, and `key=value` / `key: value` text with a secret-looking key.
SECRET_VALUE = re.compile(
    r"\bhf_[A-Za-z0-9]{16,}"
    r"|\bsk-[A-Za-z0-9_-]{16,}"
    r"|\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
)
# `key=value` / `key: value` text whose key says credential and whose value looks like one: 16 or more
# characters without spaces, letters and digits mixed ("token: the answer" or "password: reset" are prose).
_KEY_VALUE = re.compile(
    r"(?P<key>[\w-]*(?:token|api_?key|secret|password|passwd)[\"']?\s*[=:]\s*[\"']?)"
    r"(?P<value>(?=[^\s\"',}]*[0-9])(?=[^\s\"',}]*[A-Za-z])[^\s\"',}]{16,})",
    re.IGNORECASE,
)


def is_secret_key(key: object) -> bool:
    """Whether a mapping key names a credential (hub_token, api_key, password), not a tokenizer field."""
    return bool(SECRET_KEY.search(str(key))) and not _VOCAB_TOKEN.fullmatch(str(key))


def redact_text(text: str) -> str:
    """`text` with every credential-shaped value replaced by <redacted>."""
    text = SECRET_VALUE.sub(REDACTED, text)
    return _KEY_VALUE.sub(
        lambda m: m.group(0) if _VOCAB_TOKEN.search(m.group("key")) else m.group("key") + REDACTED, text
    )


def redact(config: Any) -> Any:
    """A copy of a config mapping with credential-shaped strings and the string values of credential keys
    (SECRET_KEY) replaced by <redacted>; numbers, booleans and None unchanged."""
    if isinstance(config, dict):
        return {
            k: (REDACTED if is_secret_key(k) and isinstance(v, str) else redact(v)) for k, v in config.items()
        }
    if isinstance(config, list | tuple):
        return [redact(v) for v in config]
    return redact_values(config)


def redact_values(value: Any) -> Any:
    """A copy of `value` (results: summaries, metrics rows) with credential-shaped strings replaced by
    <redacted>. Keys are kept as they are and never judged: a benchmark `secretbench` or a subset `api-key`
    is data."""
    if isinstance(value, dict):
        return {k: redact_values(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_values(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def redact_argv(argv: Iterable[str]) -> list[str]:
    """A command line with credential-shaped values redacted (inline JSON configs included) and the value after
    a secret-named flag (`--hub-token X`) dropped."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag = arg.lstrip("-")
        if arg.startswith("--") and "=" not in arg and is_secret_key(flag.replace("-", "_")):
            hide_next = True
        out.append(redact_text(arg))
    return out


def find_secret(value: Any, key: str) -> str | None:
    """The dotted key of the first credential-shaped string in `value`: a value, or a name the user chose (a
    benchmark, variant, run or model name is a mapping key, and becomes a folder, a rule wildcard and a log
    line). A credential-shaped name is reported by its mapping's key ("eval.benchmarks (a name in it)"),
    never by itself."""
    if isinstance(value, dict):
        for k, v in value.items():
            if redact_text(str(k)) != str(k):
                return f"{key or 'config'} (a name in it)"
            found = find_secret(v, f"{key}.{k}" if key else str(k))
            if found:
                return found
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found = find_secret(v, f"{key}[{i}]")
            if found:
                return found
    elif isinstance(value, str) and redact_text(value) != value:
        return key
    return None


def check_config(config: Any, key: str = "") -> None:
    """Refuse a config holding a credential-shaped value, naming the key (and never the value)."""
    found = find_secret(config, key)
    if found:
        raise ConfigError(
            f"{found}: looks like a credential (token, key or password); configs are written next to every "
            "result and recorded by Snakemake, so put it in the environment instead (HF_TOKEN, WANDB_API_KEY)"
        )
