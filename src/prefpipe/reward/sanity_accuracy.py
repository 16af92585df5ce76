"""Sanity accuracy per subset after training (the eval stage does the official RewardBench scoring).

A pair is correct when s(chosen > rejected) > 0; ties count as wrong, as in RewardBench.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from prefpipe.reward.model import RewardModel
from prefpipe.reward.pairs import Pair


@torch.no_grad()
def pair_accuracy(rm: RewardModel, pairs: list[Pair], batch_size: int) -> dict:
    """{"overall": acc, "n": N, "mean_prob": P, "subsets": {subset: {"accuracy", "n"}}}."""
    prompts = [p.prompt for p in pairs]
    enc_c = rm.encode(prompts, [p.chosen for p in pairs], batch_size=batch_size)
    enc_r = rm.encode(prompts, [p.rejected for p in pairs], batch_size=batch_size)
    score, _ = rm.compare(enc_c, enc_r)
    prob = rm.preference_prob(enc_c, enc_r)
    correct = (score > 0).tolist()
    per_subset: dict[str, list[bool]] = defaultdict(list)
    for pair, ok in zip(pairs, correct, strict=True):
        per_subset[pair.subset].append(ok)
    return {
        "overall": sum(correct) / len(correct),
        "n": len(correct),
        "mean_prob": float(prob.mean()),
        "subsets": {
            name: {"accuracy": sum(v) / len(v), "n": len(v)} for name, v in sorted(per_subset.items())
        },
    }
