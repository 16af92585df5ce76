"""Read preference pairs (RewardBench schema) for reward training; bad rows are errors that name file:line.

The data stage has already cleaned the data, so a malformed row here means a wrong or damaged file, not
something to skip quietly. Pairs with an empty side or with chosen equal to rejected carry no usable signal:
they are skipped and counted by reason.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from prefpipe.common.chat import Conversation, conversation, is_messages
from prefpipe.common.checkpoint import content_digest
from prefpipe.common.config import DataError
from prefpipe.common.io import iter_jsonl

REQUIRED = ("prompt", "chosen", "rejected")


@dataclass(frozen=True)
class Pair:
    id: str
    prompt: Conversation  # the row's messages where it has them, else its prompt (common.chat.conversation)
    chosen: str
    rejected: str
    subset: str


def read_pairs(path: str | os.PathLike, default_subset: str = "all") -> tuple[list[Pair], Counter[str]]:
    """Pairs from a JSONL file and the count of skipped rows by reason."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"preference pairs not found: {path}")
    pairs: list[Pair] = []
    skipped: Counter[str] = Counter()
    for line_no, row in iter_jsonl(path, DataError):
        where = f"{path}:{line_no}"
        for key in REQUIRED:
            if key not in row:
                raise DataError(f"{where}: missing field {key!r} (needs {', '.join(REQUIRED)})")
            if not isinstance(row[key], str):
                raise DataError(f"{where}: field {key!r} must be a string, got {type(row[key]).__name__}")
        if row.get("messages") is not None and not is_messages(row["messages"]):
            raise DataError(
                f"{where}: field 'messages' must be a list of role/content turns ending with the user's"
            )
        if not row["chosen"].strip() or not row["rejected"].strip():
            skipped["empty_response"] += 1
            continue
        if row["chosen"] == row["rejected"]:
            skipped["chosen_equals_rejected"] += 1
            continue
        pairs.append(
            Pair(
                str(row.get("id", f"{path.stem}-{line_no}")),
                conversation(row),
                row["chosen"],
                row["rejected"],
                str(row.get("subset") or default_subset),
            )
        )
    if not pairs:
        raise DataError(f"{path}: no usable preference pairs")
    return pairs, skipped


def pairs_digest(pairs: list[Pair]) -> str:
    """Content hash of the training pairs in order: a checkpoint is only resumed on the same data."""
    return content_digest([p.id, p.prompt, p.chosen, p.rejected] for p in pairs)
