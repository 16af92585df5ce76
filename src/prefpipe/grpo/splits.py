"""Which prompts a run trains on and which it is evaluated on (`grpo.<run>.validation_prompts`, `eval.split`).

A sweep must never tune on the held-out test prompts, so `validation_prompts: K` holds K training prompts back
from training; `eval.split: validation` then evaluates (the learning curve and the final evaluation) on those
K instead of the held-out file. The K are the training prompts with the smallest SHA-256 of their id: the same
K in every run and every seed whatever the file order, so the runs of a sweep are compared on one set.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from prefpipe.common.config import ConfigError
from prefpipe.generation.rl_prompts import load_rl_prompts

TRAIN_FILE, HELDOUT_FILE = "rl_prompts_train.jsonl", "rl_prompts_heldout.jsonl"
HELDOUT, VALIDATION = "heldout", "validation"


def _rank(row: dict) -> str:
    return hashlib.sha256(str(row["id"]).encode("utf-8")).hexdigest()


def split_validation(rows: list[dict], k: int) -> tuple[list[dict], list[dict]]:
    """(training rows, validation rows): the k rows with the smallest id hash are validation, in file order
    both; k = 0 keeps every row for training. Leaving fewer than one training row is a ConfigError."""
    if k <= 0:
        return list(rows), []
    if k >= len(rows):
        raise ConfigError(
            f"grpo validation_prompts = {k} leaves no training prompt ({len(rows)} training prompts)"
        )
    held = {id(r) for r in sorted(rows, key=_rank)[:k]}
    return [r for r in rows if id(r) not in held], [r for r in rows if id(r) in held]


def training_rows(data: str | Path, validation_prompts: int) -> tuple[list[dict], dict[str, int]]:
    """The rows a run trains on (the training file less its validation prompts) and the skipped-row counts."""
    rows, skipped = load_rl_prompts(Path(data) / TRAIN_FILE)
    return split_validation(rows, validation_prompts)[0], skipped


def evaluation_rows(
    data: str | Path, split: str, validation_prompts: int, limit: int | None
) -> tuple[list[dict], dict[str, int]]:
    """The first `limit` rows (None = all) of the split a run is evaluated on, and the skipped-row counts."""
    if split == HELDOUT:
        return load_rl_prompts(Path(data) / HELDOUT_FILE, limit)
    if validation_prompts <= 0:
        raise ConfigError("grpo eval.split = validation needs validation_prompts > 0 (the prompts held back)")
    rows, skipped = load_rl_prompts(Path(data) / TRAIN_FILE)
    held = split_validation(rows, validation_prompts)[1]
    return held[:limit] if limit is not None else held, skipped
