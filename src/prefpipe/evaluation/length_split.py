"""Length bias of a reward model on one benchmark: accuracy split by which response is longer, how often the
model prefers the longer response, and the "longer response wins" baseline on the same pairs.

Length is measured in characters of the response text (`response_length`): on the shared HH-RLHF helpful test
file (../shared/data/hh_rlhf_helpful_test.jsonl) "longer wins" by characters reproduces the data README's
0.5965 when the 9 equal-length pairs count half (0.592 with ties wrong); whitespace tokens give 0.5975 / 0.587.
The baseline here counts ties as wrong, like RewardBench (`accuracy`), and also reports the ties-half figure
(`accuracy_ties_half`) the README quotes. Intervals are Wilson 95% intervals.

The summary keys are the constants below and the length groups of prefpipe.data.pair_length (the report
imports them from there):
    length_split: {chosen_longer: {n, accuracy, ci95: [lo, hi]}, chosen_shorter: {...}, equal: {...}}
    longer_pick_rate, longer_pick_n, longer_pick_ci95
    longer_wins_baseline: {accuracy, ci95, accuracy_ties_half, n, by_section: {section: {accuracy,
        accuracy_ties_half, n}}}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from prefpipe.common.stats import wilson_interval
from prefpipe.data.pair_length import (
    CHOSEN_LONGER,
    CHOSEN_SHORTER,
    EQUAL_LENGTH,
    LENGTH_MEASURE,
    response_length,
)

LENGTH_SPLIT_KEY = "length_split"
LONGER_PICK_RATE_KEY = "longer_pick_rate"
LONGER_PICK_N_KEY = "longer_pick_n"
LONGER_PICK_CI_KEY = "longer_pick_ci95"
LONGER_WINS_BASELINE_KEY = "longer_wins_baseline"


def _rate(hits: int, n: int) -> dict[str, Any]:
    return {
        "n": n,
        "accuracy": hits / n if n else None,
        "ci95": list(wilson_interval(hits, n)) if n else None,
    }


def _wins(chosen_longer: np.ndarray, equal: np.ndarray) -> dict[str, Any]:
    """The "longer response wins" baseline on these pairs: ties wrong and ties counting half."""
    n = len(chosen_longer)
    wins = int(chosen_longer.sum())
    return {
        "accuracy": wins / n if n else None,
        "accuracy_ties_half": (wins + 0.5 * int(equal.sum())) / n if n else None,
        "n": n,
    }


def length_report(
    chosen: Sequence[str],
    rejected: Sequence[str],
    score: Sequence[float],
    groups: Sequence[str | None] | None = None,
) -> dict[str, Any]:
    """The length keys of one benchmark summary from the pairs and s(chosen > rejected) (> 0: chosen picked).
    With `groups` (each pair's section, None for none), the baseline is also given per group (`by_section`)."""
    len_c = np.array([response_length(t) for t in chosen])
    len_r = np.array([response_length(t) for t in rejected])
    s = np.asarray(score, dtype=np.float64)
    correct = s > 0
    buckets = {CHOSEN_LONGER: len_c > len_r, CHOSEN_SHORTER: len_c < len_r, EQUAL_LENGTH: len_c == len_r}
    split = {name: _rate(int(correct[mask].sum()), int(mask.sum())) for name, mask in buckets.items()}
    # Preferring the longer response: chosen longer and picked, or chosen shorter and rejected picked (s < 0).
    unequal = int((~buckets[EQUAL_LENGTH]).sum())
    picks = int((buckets[CHOSEN_LONGER] & (s > 0)).sum() + (buckets[CHOSEN_SHORTER] & (s < 0)).sum())
    overall = _wins(buckets[CHOSEN_LONGER], buckets[EQUAL_LENGTH])
    by_section = {}
    for group in dict.fromkeys(g for g in groups or () if g is not None):
        mask = np.array([g == group for g in groups])
        by_section[group] = _wins(buckets[CHOSEN_LONGER][mask], buckets[EQUAL_LENGTH][mask])
    return {
        LENGTH_SPLIT_KEY: split,
        LONGER_PICK_RATE_KEY: picks / unequal if unequal else None,
        LONGER_PICK_N_KEY: unequal,
        LONGER_PICK_CI_KEY: list(wilson_interval(picks, unequal)) if unequal else None,
        LONGER_WINS_BASELINE_KEY: {
            "accuracy": overall["accuracy"],
            "ci95": _rate(int(buckets[CHOSEN_LONGER].sum()), overall["n"])["ci95"],
            "accuracy_ties_half": overall["accuracy_ties_half"],
            "n": overall["n"],
            "by_section": by_section,
        },
        "length_measure": LENGTH_MEASURE,
    }
