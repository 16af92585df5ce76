"""Opt-in switches that give a posterior something to find in the synthetic world (docs/findings/UNCERTAINTY.md); both off by default,
and then nothing here runs and the world's bytes are those of a world without them.

- Annotator disagreement (`data.synthetic.label_noise: {subset: rate}`): in each listed subset an exact share
  `rate` of the TRAINING pairs has chosen and rejected swapped (the annotators disagreed and the minority won),
  drawn from the subset's own seeded stream. Test labels stay the majority (true) preference. Every pair of the
  world gets `flip_rate` (the subset's rate, 0.0 for subsets not listed); training pairs also `label_flipped`.
  The base's SFT on chosen replies (base.sft.chosen_from_pairs) reads the flipped labels too, as it would read
  real annotations.
- Unfamiliar inputs (`data.synthetic.unfamiliar_subsets: [subset]`): the listed subsets' training pairs are
  dropped, so their kind of prompt never occurs in training (the base model's SFT on chosen replies included);
  their test pairs are the same as in the world without the switch. Every test pair gets `unfamiliar`.
The per-pair fields are what the uncertainty measures score against (prefpipe.evaluation.uncertainty).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from typing import Any

from prefpipe.common.config import ConfigError

FLIP_RATE, FLIPPED, UNFAMILIAR = "flip_rate", "label_flipped", "unfamiliar"


def check_switches(
    label_noise: dict[str, float], unfamiliar: Iterable[str], subsets: Iterable[str], key: str
) -> None:
    """Known subset names; rates in [0, 0.5) (at 0.5 the majority label is a coin toss); a training set left.
    `key` is the config path the errors name (the settings layer adds its own `data.` prefix)."""
    known = list(subsets)
    for name, rate in label_noise.items():
        if name not in known:
            raise ConfigError(f"{key}.label_noise.{name}: unknown subset; known: {known}")
        if not 0.0 <= rate < 0.5:
            raise ConfigError(f"{key}.label_noise.{name}: rate {rate} must be in [0, 0.5)")
    unfamiliar = list(unfamiliar)
    for name in unfamiliar:
        if name not in known:
            raise ConfigError(f"{key}.unfamiliar_subsets: unknown subset {name!r}; known: {known}")
    if set(known) <= set(unfamiliar):
        raise ConfigError(f"{key}.unfamiliar_subsets: every subset is unfamiliar, no training pairs left")


def _flip(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "chosen": row["rejected"], "rejected": row["chosen"]}


def add_label_noise(
    train: list[dict[str, Any]], test: list[dict[str, Any]], rates: dict[str, float], seed: int
) -> dict[str, int]:
    """Swap an exact share of each listed subset's training pairs (in place) and tag every pair with its
    subset's flip rate; returns the number of swapped training pairs per subset."""
    by_subset: dict[str, list[int]] = {}
    for i, row in enumerate(train):
        by_subset.setdefault(row["subset"], []).append(i)
    flipped: set[int] = set()
    counts: dict[str, int] = {}
    for subset, rate in sorted(rates.items()):
        members = by_subset.get(subset, [])
        chosen = random.Random(f"{seed}:label_noise:{subset}").sample(members, round(len(members) * rate))
        flipped.update(chosen)
        counts[subset] = len(chosen)
    for i, row in enumerate(train):
        base = _flip(row) if i in flipped else row
        train[i] = {**base, FLIP_RATE: float(rates.get(row["subset"], 0.0)), FLIPPED: i in flipped}
    for i, row in enumerate(test):
        test[i] = {**row, FLIP_RATE: float(rates.get(row["subset"], 0.0))}
    return counts


def hold_out_subsets(
    train: list[dict[str, Any]], test: list[dict[str, Any]], unfamiliar: Iterable[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Drop the unfamiliar subsets' training pairs and tag every test pair with `unfamiliar`."""
    names = set(unfamiliar)
    kept = [row for row in train if row["subset"] not in names]
    tagged = [{**row, UNFAMILIAR: row["subset"] in names} for row in test]
    return kept, tagged


def apply_switches(
    train: list[dict[str, Any]],
    test: list[dict[str, Any]],
    label_noise: dict[str, float],
    unfamiliar: list[str],
    seed: int,
    subsets: Iterable[str],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any] | None]:
    """Both switches on the generated pairs; (train, test, stats), stats None and rows untouched when both are
    off. Unfamiliar subsets are dropped before the label noise is drawn, so the noise of the other subsets does
    not depend on which subsets are held out."""
    if not label_noise and not unfamiliar:
        return train, test, None
    check_switches(label_noise, unfamiliar, subsets, "data.synthetic")
    stats: dict[str, Any] = {}
    if unfamiliar:
        train, test = hold_out_subsets(train, test, unfamiliar)
        stats["unfamiliar_subsets"] = sorted(set(unfamiliar))
        stats["unfamiliar_test_pairs"] = sum(row[UNFAMILIAR] for row in test)
    if label_noise:
        train, test = list(train), list(test)
        stats["label_noise"] = dict(sorted(label_noise.items()))
        stats["flipped_train_pairs"] = add_label_noise(train, test, label_noise, seed)
        stats["test_pairs_by_flip_rate"] = {
            str(rate): n for rate, n in sorted(Counter(row[FLIP_RATE] for row in test).items())
        }
    return train, test, stats
