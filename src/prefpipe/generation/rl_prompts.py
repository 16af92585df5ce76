"""RL prompt rows ({"id", "prompt", "answer", "aliases", "kind"}) for GRPO and policy evaluation, checked row by row.

`answer` is null only for prompts without answers (kind "none", reward-model-only GRPO); `aliases` (accepted
alternative answers) may be absent (the synthetic world writes none) and is read as an empty list. A multi-hop
row's `paragraphs` ([{title, text, is_supporting}], what a multi-turn run's search environment reads) and its
`hops` are kept.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from prefpipe.common.chat import is_messages
from prefpipe.common.config import DataError
from prefpipe.common.io import read_jsonl
from prefpipe.settings.data import NO_VERIFIER

REQUIRED = ("id", "prompt", "kind")
NOT_APPLICABLE = "the held-out prompts have no answers (data.prompts.verifier: none): accuracy does not apply"


def load_rl_prompts(path: str | os.PathLike, limit: int | None = None) -> tuple[list[dict], dict[str, int]]:
    """Valid rows (ids as strings) and skip counts by reason; no valid row at all is an error naming the file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"RL prompts not found: {path} (run the prep_data stage first)")
    rows, skipped, seen = [], Counter(), set()
    for row in read_jsonl(path):
        missing = [k for k in REQUIRED if row.get(k) is None]
        if missing:
            skipped[f"missing_{missing[0]}"] += 1
            continue
        if not isinstance(row["prompt"], str) or not row["prompt"].strip():
            skipped["empty_prompt"] += 1
            continue
        if row.get("answer") is None and row["kind"] != NO_VERIFIER:
            skipped["missing_answer"] += 1
            continue
        aliases = row.get("aliases") or []
        if not isinstance(aliases, list):
            skipped["bad_aliases"] += 1
            continue
        paragraphs = row.get("paragraphs")
        if paragraphs is not None and not _paragraphs_ok(paragraphs):
            skipped["bad_paragraphs"] += 1
            continue
        row_id = str(row["id"])
        if row_id in seen:
            skipped["duplicate_id"] += 1
            continue
        seen.add(row_id)
        answer = None if row.get("answer") is None else str(row["answer"])
        rows.append(
            {
                "id": row_id,
                "prompt": row["prompt"],
                **({"messages": row["messages"]} if is_messages(row.get("messages")) else {}),
                "answer": answer,
                "aliases": [str(a) for a in aliases],
                "kind": str(row["kind"]),
                **({"paragraphs": paragraphs} if paragraphs is not None else {}),
                **({"hops": row["hops"]} if isinstance(row.get("hops"), int) else {}),
            }
        )
    if not rows:
        raise DataError(f"{path}: no usable RL prompt rows (skipped: {dict(skipped)})")
    if limit is not None:
        rows = rows[:limit]
    return rows, dict(skipped)


def _paragraphs_ok(paragraphs: object) -> bool:
    """A list of {"text": str, ...} mappings (title and is_supporting optional)."""
    return isinstance(paragraphs, list) and all(
        isinstance(p, dict) and isinstance(p.get("text"), str) for p in paragraphs
    )


def has_answers(rows: list[dict]) -> bool:
    """Whether these prompts can be graded (accuracy applies); prompts without answers have kind "none"."""
    return any(row["answer"] is not None for row in rows)
