"""The accuracy-vs-labels curve of each strategy and the labels each needs to reach a target accuracy
(docs/findings/ACTIVE_LEARNING.md), from the learner's test scores of every round (prefpipe.active.pool_scores).

Two targets, both per seed:
- random selection's accuracy after its last round (`labels_needed`; saved share: 1 - needed / final labels);
- the anchors' measure (`full_data`): `target_fraction` times the accuracy of the last round, which is the
  full-data accuracy when that round labelled every training pair (its selection.json says how many stayed
  unlabelled; every arm then trains the same set with the same seed, so random's last round stands for all).
  Per strategy the labels needed, and the share fewer than random needs for the same target on the same seed.

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

from prefpipe.active.labelled import SELECTION, training_rows
from prefpipe.active.layout import round_dir
from prefpipe.active.picks import REFERENCE, pair_facts, picks_table
from prefpipe.active.pool_scores import SCORES, TEST_SPLIT
from prefpipe.active.select import SCORE
from prefpipe.common.io import read_json
from prefpipe.settings.active import ActiveLearningSettings


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


def fraction_table(
    settings: ActiveLearningSettings, accuracy: dict[str, dict[int, list[float]]]
) -> dict[str, Any]:
    """Per strategy: labels needed per seed to reach target_fraction x the last round's accuracy of the
    reference on that seed, their mean and sd (null unless every seed reaches it), and per seed the share fewer
    than the reference needs for the same target (mean and sd when every seed of both reaches it)."""
    labels = [settings.labels(r) for r in range(settings.rounds)]
    targets = {seed: settings.target_fraction * c[-1] for seed, c in accuracy[REFERENCE].items()}
    needed = {
        strategy: {seed: labels_to_reach(labels, c, targets[seed]) for seed, c in curves.items()}
        for strategy, curves in accuracy.items()
    }
    table: dict[str, Any] = {}
    for strategy, per_seed in needed.items():
        row: dict[str, Any] = {"per_seed": per_seed, "reached": sum(v is not None for v in per_seed.values())}
        if row["reached"] == len(per_seed):
            row["labels"] = _mean_sd(list(per_seed.values()))
            base = needed[REFERENCE]
            if all(base[seed] is not None for seed in per_seed):
                fewer = [1.0 - v / base[seed] for seed, v in per_seed.items()]
                row["fewer_than_reference"] = _mean_sd(fewer)
        table[strategy] = row
    return {"fraction": settings.target_fraction, "target": targets, "strategies": table}


def unlabelled_left(settings: ActiveLearningSettings, root: Path) -> dict[int, int | None]:
    """Per seed: training pairs the reference's last round left unlabelled (None: not recorded)."""
    last, left = settings.rounds - 1, {}
    for seed in settings.seeds:
        path = Path(round_dir(str(root), REFERENCE, seed, last)) / "data" / SELECTION
        left[seed] = read_json(path).get("unlabelled") if path.exists() else None
    return left


def summarize(settings: ActiveLearningSettings, root: Path, data: Path | None = None) -> dict[str, Any]:
    """summary.json: labels per round, each strategy's test accuracy per seed and round, mean and sd per round,
    the labels-needed table (when random selection is among the strategies) and, given the experiment's data
    folder, what each strategy's rounds selected (prefpipe.active.picks)."""
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
        "full_data": _full_data(settings, root, accuracy),
        "picks": None if data is None else _picks(settings, root, data),
    }


def _picks(settings: ActiveLearningSettings, root: Path, data: Path) -> dict[str, Any]:
    facts = pair_facts(data, training_rows(data))
    return picks_table(root, facts, settings.strategies, settings.seeds, settings.rounds)


def _full_data(
    settings: ActiveLearningSettings, root: Path, accuracy: dict[str, dict[int, list[float]]]
) -> dict[str, Any] | None:
    """fraction_table, marked whether the last round labelled every training pair (then its target is the
    anchors' "fraction of full-data accuracy"; else a fraction of the last round's accuracy)."""
    if REFERENCE not in accuracy:
        return None
    left = unlabelled_left(settings, root)
    return {"whole_pool": all(v == 0 for v in left.values()), "unlabelled_left": left} | fraction_table(
        settings, accuracy
    )
