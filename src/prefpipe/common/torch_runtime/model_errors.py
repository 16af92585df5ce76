"""One clear line when a model does not load: which setting, which path, and what is wrong with it.

transformers reports a bad model path as a hub lookup (a relative folder that does not exist looks like a hub
id, and offline that becomes a long connection error), and a truncated weights file as a low-level
deserialisation error. `model_load(source, key)` wraps the loading calls of one model; any failure becomes
ModelLoadError (a ConfigError: exit 2, no traceback) whose reason is found by looking at the folder itself.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from prefpipe.common.config import ConfigError, UserError
from prefpipe.common.interrupts import StageInterrupted

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "adapter_model.safetensors",
)


class ModelLoadError(ConfigError):
    """A model named by a setting or an argument does not load; the message says why."""


def _short(err: BaseException) -> str:
    return " ".join(f"{type(err).__name__}: {err}".split())[:240]


def _unreadable_safetensors(folder: Path) -> str | None:
    from safetensors import safe_open

    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt") as handle:
                for key in handle.keys():  # noqa: SIM118 (safe_open has no __iter__)
                    handle.get_tensor(key)
        except Exception as err:  # whatever the library says, the file does not read back
            return f"{path.name} is truncated or corrupt ({_short(err)})"
    return None


def diagnose(source: str, err: BaseException) -> str:
    """What is wrong with model `source`, judged from the path itself (err is the fallback)."""
    path = Path(os.path.expanduser(source))
    if not path.exists():
        if path.is_absolute() or source.startswith((".", "~")) or source.count("/") > 1:
            return "no such folder"
        if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
            return (
                "no such local folder, and as a hub id it cannot be fetched: the hub is offline "
                "(HF_HUB_OFFLINE=1); give a model folder, or download the model first"
            )
        return f"no such local folder, and the hub could not provide it ({_short(err)})"
    if path.is_file():
        return "is a file; a model folder (with config.json and weights) is expected"
    config = path / "config.json"
    if not config.is_file() and not (path / "adapter_config.json").is_file():
        return "no config.json in the folder (not a transformers model folder)"
    if config.is_file():
        try:
            json.loads(config.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as bad:
            return f"config.json does not parse ({_short(bad)})"
    broken = _unreadable_safetensors(path)
    if broken:
        return broken
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        return f"no weights in the folder (none of {', '.join(WEIGHT_FILES)})"
    return f"could not be loaded ({_short(err)})"


@contextlib.contextmanager
def model_load(source: str | os.PathLike, key: str) -> Iterator[None]:
    """Around the loading of one model: a failure becomes ModelLoadError "<key> <source>: <reason>".
    User errors raised inside (a missing pad token...) and interrupts pass through unchanged."""
    try:
        yield
    except (UserError, StageInterrupted):
        raise
    except Exception as err:
        raise ModelLoadError(f"{key} {source}: {diagnose(str(source), err)}") from err
