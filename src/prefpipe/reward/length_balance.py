"""Length-balanced training pairs: an option against the length bias a reward model picks up from its data.

In HH-RLHF helpful the chosen response is the longer one in 54.5% of training pairs, and a reward model
fine-tuned there prefers the longer response far more often than that. Balancing removes length as a training
signal: the larger of the two groups (chosen longer / chosen shorter) is subsampled, seeded, to the size of the
smaller one; equal-length pairs are all kept and the original order is preserved. It works for every head (it
changes the data, not the loss). Length is measured as the evaluation's length split measures it
(prefpipe.data.pair_length).
"""

from __future__ import annotations

import random
from typing import Any

from prefpipe.data import pair_length
from prefpipe.data.pair_length import CHOSEN_LONGER, CHOSEN_SHORTER, EQUAL_LENGTH
from prefpipe.reward.pairs import Pair


def length_group(pair: Pair) -> str:
    return pair_length.length_group(pair.chosen, pair.rejected)


def balance_by_length(pairs: list[Pair], seed: int) -> tuple[list[Pair], dict[str, Any]]:
    """Pairs with as many chosen-longer as chosen-shorter ones, and what was dropped (for the summary)."""
    groups: dict[str, list[int]] = {CHOSEN_LONGER: [], CHOSEN_SHORTER: [], EQUAL_LENGTH: []}
    for i, pair in enumerate(pairs):
        groups[length_group(pair)].append(i)
    size = min(len(groups[CHOSEN_LONGER]), len(groups[CHOSEN_SHORTER]))
    rng = random.Random(seed)
    keep = set(groups[EQUAL_LENGTH])
    for name in (CHOSEN_LONGER, CHOSEN_SHORTER):
        keep.update(rng.sample(groups[name], size) if len(groups[name]) > size else groups[name])
    kept = [pair for i, pair in enumerate(pairs) if i in keep]
    report = {
        "before": {name: len(ids) for name, ids in groups.items()},
        "after": {CHOSEN_LONGER: size, CHOSEN_SHORTER: size, EQUAL_LENGTH: len(groups[EQUAL_LENGTH])},
        "dropped": len(pairs) - len(kept),
    }
    return kept, report
