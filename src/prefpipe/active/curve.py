"""The accuracy-vs-labels curve of each strategy and the labels each needs to reach random selection's final
accuracy (docs/findings/ACTIVE_LEARNING.md), from the learner's test scores of every round (prefpipe.active.pool_scores).

Labels needed: on one seed's curve (labels_r, accuracy_r), the first round r whose accuracy reaches the target
(random selection's accuracy after its last round, same seed), linearly interpolated between round r - 1 and r:
l = l_{r-1} + (target - a_{r-1}) / (a_r - a_{r-1}) * (l_r - l_{r-1}); round 0 itself when it already reaches it;
None when no round does (the budget was too small). Saved share: 1 - needed / random's final labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from prefpipe.active.layout import round_dir
from prefpipe.active.pool_scores import SCORES, TEST_SPLIT
from prefpipe.active.select import SCORE
from prefpipe.settings.active import ActiveLearningSettings

REFERENCE = "random"  # the strategy whose final accuracy is the target


def labels_to_reach(labels: Sequence[float], accuracy: Sequence[float], target: float) -> float | None:
    """Labels at which the curve first reaches `target` (module docstring); None when it never does."""
    if len(labels) != len(accuracy) or not len(labels):
        raise ValueError(f"labels_to_reach: {len(labels)} label counts, {len(accuracy)} accuracies")
    for i, (count, acc) in enumerate(zip(labels, accuracy, strict=True)):
        if acc >= target:
            if i == 0:
                return float(count)
            l0, a0 = labels[i - 1], accuracy[i - 1]
            return float(l0 + (target - a0) / (acc - a0) * (count - l0))
    return None


def test_accuracy(path: Path) -> float:
    """Share of test pairs with s(chosen > rejected) > 0 (ties wrong, as in the eval)."""
    frame = pd.read_parquet(path)
    test = frame[frame["split"] == TEST_SPLIT]
    return float((test[SCORE] > 0).mean())


def _mean_sd(values: list[float]) -> dict[str, float | None]:
    sd = float(np.std(values, ddof=1)) if len(values) > 1 else None
    return {"mean": float(np.mean(values)), "sd": sd}


def needed_table(
    settings: ActiveLearningSettings, accuracy: dict[str, dict[int, list[float]]]
) -> dict[str, Any]:
    """Per strategy: labels needed per seed to reach random's final accuracy on that seed, their mean and sd
    (null unless every seed reaches it), and the share of random's final labels saved."""
    labels = [settings.labels(r) for r in range(settings.rounds)]
    final = labels[-1]
    table = {}
    for strategy, curves in accuracy.items():
        per_seed = {
            seed: labels_to_reach(labels, curve, accuracy[REFERENCE][seed][-1])
            for seed, curve in curves.items()
        }
        reached = [v for v in per_seed.values() if v is not None]
        row: dict[str, Any] = {"per_seed": per_seed, "reached": len(reached), "seeds": len(per_seed)}
        if len(reached) == len(per_seed):
            row |= {"labels": _mean_sd(reached), "saved_share": _mean_sd([1.0 - v / final for v in reached])}
        table[strategy] = row
    return table


def summarize(settings: ActiveLearningSettings, root: Path) -> dict[str, Any]:
    """summary.json: labels per round, each strategy's test accuracy per seed and round, mean and sd per round,
    and the labels-needed table (when random selection is among the strategies)."""
    accuracy = {
        strategy: {
            seed: [
                test_accuracy(
                    Path(round_dir(str(root), strategy, seed, r)) / "scores" / settings.learner / SCORES
                )
                for r in range(settings.rounds)
            ]
            for seed in settings.seeds
        }
        for strategy in settings.strategies
    }
    curve = {
        strategy: [_mean_sd([c[r] for c in curves.values()]) for r in range(settings.rounds)]
        for strategy, curves in accuracy.items()
    }
    return {
        "learner": settings.learner,
        "strategies": settings.strategies,
        "seeds": settings.seeds,
        "labels": [settings.labels(r) for r in range(settings.rounds)],
        "accuracy": accuracy,
        "curve": curve,
        "reference": REFERENCE,
        "labels_needed": needed_table(settings, accuracy) if REFERENCE in accuracy else None,
    }
