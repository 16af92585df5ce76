"""One normalisation for every external preference source: RewardBench rows, HH-RLHF transcripts, chat messages.

Every source ends up as {"id", "prompt", "chosen", "rejected", "subset"} strings, so reward training and
RewardBench evaluation never care where a pair came from; a pair whose history is more than one plain user turn
also keeps it as `messages`, a list of {"role", "content"} turns (HH "Human:/Assistant:" transcripts parsed,
message-list sources kept), which chat templates render (prefpipe.common.chat.conversation). A row that cannot become a clean pair raises BadRow
with one reason from BAD_REASONS; `normalize_records` then drops it (counted by reason) or stops with an error
naming the file, the row and the reason. Reading files is not done here (see prefpipe.data.sources).
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prefpipe.common.chat import ROLE_LABELS, Message, plain_history
from prefpipe.common.config import DataError
from prefpipe.data.hh_transcript import ASSISTANT_MARK, TranscriptError, parse_transcript, split_transcript

FORMATS = ("rewardbench", "hh", "messages")
BAD_ROW_MODES = ("drop", "error")
BAD_REASONS = (
    "invalid_json",  # a JSONL line that does not parse
    "unrecognised_shape",  # not an object, wrong field types, no assistant turn, unknown role
    "missing_field",  # a required field is absent or null
    "empty_field",  # a required text is empty or whitespace only
    "empty_message",  # a message before the reply (a middle turn, or a history's last question) has no text
    "prompt_mismatch",  # chosen and rejected continue different conversations
    "chosen_equals_rejected",  # nothing to prefer
)
TEXT_FIELDS = ("prompt", "chosen", "rejected")
Pair = tuple[
    str, list[Message] | None, str, str
]  # prompt, messages (None: the prompt is one user turn), replies


class BadRow(DataError):
    """A row that cannot become a pair; `reason` is one of BAD_REASONS so drops can be counted by cause."""

    def __init__(self, reason: str, detail: str) -> None:
        if reason not in BAD_REASONS:
            raise ValueError(f"unknown bad-row reason {reason!r}")
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class RawRecord:
    """One row as a reader saw it: its 1-based row (or JSONL line) number and value, or why it did not parse."""

    number: int
    value: Any = None
    error: str | None = None


def _require(row: dict, keys: tuple[str, ...]) -> list[Any]:
    """Values of `keys`; absent or null fields are reported before anything else about the row."""
    missing = [key for key in keys if row.get(key) is None]
    if missing:
        raise BadRow("missing_field", f"no {', '.join(repr(k) for k in missing)} field")
    return [row[key] for key in keys]


def _strings(row: dict, keys: tuple[str, ...]) -> list[str]:
    values = _require(row, keys)
    for key, value in zip(keys, values, strict=True):
        if not isinstance(value, str):
            raise BadRow("unrecognised_shape", f"{key!r} is a {type(value).__name__}, expected a string")
    for key, value in zip(keys, values, strict=True):
        if not value.strip():
            raise BadRow("empty_field", f"{key!r} is empty")
    return values


def pair_from_flat(row: dict) -> Pair:
    """RewardBench layout (and already-split HH rows): chosen and rejected are plain strings; the prompt is a
    string (an HH transcript is kept as messages too, parse_transcript) or a message list ending on the user's
    turn (chat files), flattened with plain_history."""
    if isinstance(row.get("prompt"), list):
        messages = message_list(row["prompt"], "prompt", "user")
        chosen, rejected = _strings(row, ("chosen", "rejected"))
        return plain_history(messages), messages, chosen, rejected
    prompt, chosen, rejected = _strings(row, TEXT_FIELDS)
    return prompt, parse_transcript(prompt), chosen, rejected


def pair_from_hh(row: dict) -> Pair:
    """HH-RLHF rows: two whole transcripts sharing every turn but the last; rows with a prompt are flat."""
    if row.get("prompt") is not None:
        return pair_from_flat(row)
    chosen_text, rejected_text = _strings(row, ("chosen", "rejected"))
    try:
        prompt, chosen = split_transcript(chosen_text)
        rejected_prompt, rejected = split_transcript(rejected_text)
    except TranscriptError as err:
        raise BadRow("unrecognised_shape", str(err)) from None
    if prompt != rejected_prompt:
        raise BadRow(
            "prompt_mismatch", "chosen and rejected transcripts differ before the last Assistant turn"
        )
    return prompt, parse_transcript(prompt), chosen, rejected


def message_list(value: Any, key: str, last_role: str) -> list[Message]:
    """`value` as {"role", "content"} text messages with roles from ROLE_LABELS, the last one from `last_role`
    (a conversation ending in its reply: "assistant"; a history before the reply: "user"); else BadRow naming
    `key` and the message."""
    if not isinstance(value, list):
        raise BadRow("unrecognised_shape", f"{key!r} is a {type(value).__name__}, expected a message list")
    if not value:
        raise BadRow("empty_field", f"{key!r} is an empty message list")
    messages = []
    for i, message in enumerate(value):
        if not (isinstance(message, dict) and isinstance(message.get("content"), str)):
            raise BadRow("unrecognised_shape", f"{key}[{i}] is not a {{'role', 'content'}} message with text")
        role = message.get("role")
        if role not in ROLE_LABELS:
            raise BadRow(
                "unrecognised_shape", f"{key}[{i}] has role {role!r}, expected one of {list(ROLE_LABELS)}"
            )
        messages.append({"role": role, "content": message["content"]})
    _check_no_empty_turn(messages, key, last_role)
    if messages[-1]["role"] != last_role:
        raise BadRow(
            "unrecognised_shape",
            f"the last message of {key!r} is from {messages[-1]['role']!r}, not the {last_role}",
        )
    return messages


def _check_no_empty_turn(messages: list[Message], key: str, last_role: str) -> None:
    """An empty message before the reply would read "Assistant: \n\nHuman: ..." in every stage's text: the row
    is dropped and counted (empty_message). A conversation's final reply is the row's own required text, checked
    as such (empty_field)."""
    checked = messages if last_role == "user" else messages[:-1]
    for i, message in enumerate(checked):
        if not message["content"].strip():
            raise BadRow("empty_message", f"{key}[{i}] (a {message['role']} turn) has no text")


def history_to_prompt(history: list[tuple[str, str]]) -> str:
    """One user turn is the prompt itself; longer histories become a "Human: ...\\n\\nAssistant: ..." transcript."""
    return plain_history([{"role": role, "content": content} for role, content in history])


def pair_from_messages(row: dict) -> Pair:
    """Skywork / UltraFeedback rows: chosen and rejected are whole conversations ending in the assistant reply.

    The history is kept as messages, and flattened into the prompt text (plain_history). Lists that hold only
    the reply (no earlier turns) take the prompt from the row's "prompt" field.
    """
    _require(row, ("chosen", "rejected"))
    chosen, rejected = (message_list(row[key], key, "assistant") for key in ("chosen", "rejected"))
    if chosen[:-1] != rejected[:-1]:
        raise BadRow("prompt_mismatch", "chosen and rejected conversations differ before the final reply")
    if chosen[:-1]:
        return plain_history(chosen[:-1]), chosen[:-1], chosen[-1]["content"], rejected[-1]["content"]
    (prompt,) = _strings(row, ("prompt",))
    return prompt, None, chosen[-1]["content"], rejected[-1]["content"]


PAIR_READERS: dict[str, Callable[[dict], Pair]] = {
    "rewardbench": pair_from_flat,
    "hh": pair_from_hh,
    "messages": pair_from_messages,
}


def guess_format(row: Any) -> str | None:
    """The format one row looks like, or None when it looks like none of them."""
    if not isinstance(row, dict):
        return None
    chosen = row.get("chosen")
    if isinstance(chosen, list):
        return "messages"
    if isinstance(chosen, str):
        if "prompt" in row:
            return "rewardbench"
        if ASSISTANT_MARK in chosen:
            return "hh"
    return None


def detect_format(rows: Iterable[Any], where: str) -> str:
    """Majority format of the given (first) rows, ties broken in FORMATS order; one format per source.

    Deciding per source rather than per row lets a broken row be reported as what it lacks (say a
    missing prompt) instead of as a different format.
    """
    votes = Counter(fmt for row in rows if (fmt := guess_format(row)) is not None)
    if not votes:
        raise ValueError(
            f"{where}: cannot tell the row format (rewardbench, hh or messages) from its first rows; "
            "set data.external.format explicitly"
        )
    return max(FORMATS, key=lambda fmt: votes[fmt])


def content_id(prompt: str, chosen: str, rejected: str) -> str:
    """Stable id from the pair's text, for sources without ids (same text, same id, on every machine)."""
    digest = hashlib.sha1(json.dumps([prompt, chosen, rejected]).encode("utf-8")).hexdigest()
    return f"pair-{digest[:16]}"


def _given_id(row: dict) -> str | None:
    value = row.get("id")
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def normalize_row(row: Any, fmt: str, subset_name: str) -> dict[str, Any]:
    """One raw row in `fmt` -> a pair in the project schema (`messages` only where the history is more than
    one plain user turn, so single-turn pairs read as before), or BadRow."""
    if not isinstance(row, dict):
        raise BadRow("unrecognised_shape", f"a row must be an object, got {type(row).__name__}")
    prompt, messages, chosen, rejected = PAIR_READERS[fmt](row)
    for name, text in zip(TEXT_FIELDS, (prompt, chosen, rejected), strict=True):
        if not text.strip():
            raise BadRow("empty_field", f"{name!r} is empty after splitting off the final reply")
    if chosen.strip() == rejected.strip():
        raise BadRow("chosen_equals_rejected", "chosen and rejected are the same text")
    subset = row.get("subset")
    pair: dict[str, Any] = {
        "id": _given_id(row) or content_id(prompt, chosen, rejected),
        "prompt": prompt,
        "chosen": chosen,
        "rejected": rejected,
        "subset": subset if isinstance(subset, str) and subset.strip() else subset_name,
    }
    if messages is not None and messages != [{"role": "user", "content": prompt}]:
        pair["messages"] = messages
    return pair


def make_ids_unique(rows: list[dict]) -> int:
    """Rename repeated ids in place ("x", "x" -> "x", "x-dup1"); first one wins. Returns how many were renamed."""
    taken = {row["id"] for row in rows}
    seen: set[str] = set()
    renamed = 0
    for row in rows:
        base = row["id"]
        if base in seen:
            k = 1
            while f"{base}-dup{k}" in taken:
                k += 1
            row["id"] = f"{base}-dup{k}"
            taken.add(row["id"])
            renamed += 1
        seen.add(row["id"])
    return renamed


_KEPT_MARKS = frozenset("+-*/=<>^%#")  # operators and signs carry meaning: "4 - 2" is not "4 2"


def content_key(text: str) -> str:
    """Text as leakage is judged: Unicode-normalised (NFKC), case-folded, punctuation dropped (except the
    marks above, and a decimal point or comma between digits) and whitespace collapsed, so a copy that only
    differs in case, spacing or punctuation is still a copy."""
    text = unicodedata.normalize("NFKC", text).casefold()
    kept = []
    for i, char in enumerate(text):
        in_number = char in ".," and 0 < i < len(text) - 1 and text[i - 1].isdigit() and text[i + 1].isdigit()
        drop = unicodedata.category(char).startswith("P") and char not in _KEPT_MARKS and not in_number
        kept.append(" " if drop else char)
    return " ".join("".join(kept).split())


def pair_key(row: dict) -> tuple[str, str, str]:
    """A preference pair's content (prompt, chosen, rejected) as content_key sees it."""
    return content_key(row["prompt"]), content_key(row["chosen"]), content_key(row["rejected"])


def train_test_overlap(train: Iterable[dict], test: Iterable[dict]) -> dict[str, int]:
    """Test rows that repeat a training pair's content (`repeated_pairs`), share a prompt (`prompts`) or an
    id (`ids`) with a training row, text compared by content_key: a held-out score is only held out to the
    extent these are 0 (counted in the data summary; repeated pairs are refused above
    data.max_overlap_share, see check_overlap)."""
    train = list(train)
    prompts = {content_key(row["prompt"]) for row in train}
    pairs = {pair_key(row) for row in train}
    ids = {row["id"] for row in train}
    test = list(test)
    return {
        "repeated_pairs": sum(pair_key(row) in pairs for row in test),
        "prompts": sum(content_key(row["prompt"]) in prompts for row in test),
        "ids": sum(row["id"] in ids for row in test),
    }


def prompt_overlap(train: Iterable[dict], heldout: Iterable[dict]) -> int:
    """Held-out rows whose prompt repeats a training prompt (content_key)."""
    prompts = {content_key(row["prompt"]) for row in train}
    return sum(content_key(row["prompt"]) in prompts for row in heldout)


def benchmark_prompt_overlap(train: Iterable[dict], benchmark: Iterable[dict]) -> dict[str, int]:
    """How far a benchmark's prompts repeat training-pair prompts, each way and both exactly (identical prompt
    strings, as the model reads them) and after content_key (case, whitespace and punctuation folded):
    training pairs whose prompt occurs among the benchmark's prompts (`train_pairs_*`) and benchmark rows whose
    prompt occurs among the training prompts (`benchmark_rows_*`, what check_overlap judges)."""
    train, benchmark = list(train), list(benchmark)
    out = {"train_pairs": len(train), "benchmark_rows": len(benchmark)}
    for kind, key in (("exact", str), ("normalised", content_key)):
        train_keys = [key(row["prompt"]) for row in train]
        bench_keys = [key(row["prompt"]) for row in benchmark]
        train_set, bench_set = set(train_keys), set(bench_keys)
        out[f"train_pairs_{kind}"] = sum(k in bench_set for k in train_keys)
        out[f"benchmark_rows_{kind}"] = sum(k in train_set for k in bench_keys)
    return out


def check_overlap(count: int, total: int, max_share: float, what: str, where: str) -> None:
    """DataError when more than `max_share` of `total` held-out items (`what`) repeat training ones: scores
    on them would be training scores reported as held-out ones."""
    if total and count / total > max_share:
        raise DataError(
            f"{where}: {count} of {total} {what} ({count / total:.1%}) repeat training data after case, "
            f"whitespace and punctuation folding, above data.max_overlap_share ({max_share}): a held-out score "
            "would be a training score; use disjoint data or raise data.max_overlap_share"
        )


def subset_counts(rows: Iterable[dict]) -> dict[str, int]:
    return dict(sorted(Counter(row["subset"] for row in rows).items()))


def _id_note(value: Any) -> str:
    row_id = _given_id(value) if isinstance(value, dict) else None
    return f" (id {row_id!r})" if row_id else ""


def normalize_records(
    records: Iterable[RawRecord],
    where: str,
    fmt: str,
    bad_rows: str,
    subset_name: str,
    max_rows: int | None = None,
) -> tuple[list[dict], dict]:
    """Normalise a source's records; bad rows are dropped and counted by reason, or raise (bad_rows="error").

    Reading stops once `max_rows` pairs are kept (None keeps all). The report holds rows_in (rows read),
    kept, dropped ({reason: count} for every reason), truncated and per-subset counts.
    """
    if bad_rows not in BAD_ROW_MODES:
        raise ValueError(f"data.bad_rows must be one of {BAD_ROW_MODES}, got {bad_rows!r}")
    if fmt not in PAIR_READERS:
        raise ValueError(f"data.external.format must be one of {FORMATS} or 'auto', got {fmt!r}")
    rows: list[dict] = []
    dropped: Counter[str] = Counter()
    rows_in = 0
    truncated = False
    for record in records:
        if max_rows is not None and len(rows) >= max_rows:
            truncated = True
            break
        rows_in += 1
        try:
            if record.error is not None:
                raise BadRow("invalid_json", record.error)
            rows.append(normalize_row(record.value, fmt, subset_name))
        except BadRow as bad:
            if bad_rows == "error":
                raise DataError(
                    f"{where}: row {record.number}{_id_note(record.value)}: {bad.reason}: {bad.detail}"
                ) from None
            dropped[bad.reason] += 1
    report = {
        "where": where,
        "format": fmt,
        "rows_in": rows_in,
        "kept": len(rows),
        "dropped": {reason: dropped[reason] for reason in BAD_REASONS},
        "truncated": truncated,
        "subsets": subset_counts(rows),
    }
    return rows, report
