"""Length-bucketed inference batches: as many batches as possible whose rows all have the same length (no padding,
so the backbone runs without an attention mask and SDPA takes its causal fast path), the rest sorted by length so
a padded batch pads as little as it can. Longest batches first, so an out-of-memory error shows up at once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Batch:
    rows: list[int]  # indices into the encoded rows
    uniform: bool  # every row has the same length: no padding, no mask needed


def plan_batches(lengths: Sequence[int], batch_size: int) -> list[Batch]:
    """Full batches of one exact length first; leftovers (fewer than batch_size rows of a length) go into batches
    sorted by length. Every row is in exactly one batch; the order within a length is the input order."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    by_length: dict[int, list[int]] = defaultdict(list)
    for i, n in enumerate(lengths):
        by_length[n].append(i)
    batches: list[tuple[int, Batch]] = []
    leftover: list[int] = []
    for n in sorted(by_length, reverse=True):
        rows = by_length[n]
        full = len(rows) - len(rows) % batch_size
        batches += [(n, Batch(rows[s : s + batch_size], True)) for s in range(0, full, batch_size)]
        leftover += rows[full:]
    for s in range(0, len(leftover), batch_size):
        rows = leftover[s : s + batch_size]
        widths = {lengths[i] for i in rows}
        batches.append((max(widths), Batch(rows, len(widths) == 1)))
    batches.sort(key=lambda item: -item[0])  # stable: longest first
    return [batch for _, batch in batches]
