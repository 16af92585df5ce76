"""Cyclic triples are truly intransitive, and no scalar reward gets more than 2 of a triple's 3 pairs right."""

from __future__ import annotations

import itertools
import random
from collections import defaultdict

from support.settings import world_settings

from prefpipe.data import synthetic_cyclic
from prefpipe.data.synthetic_world import build_world

SYNTH = world_settings(
    pairs=(4, 2), triples=(60, 30), rl_prompts=(8, 8), demonstrations=8, demo_error_rate=0.5
)


def best_scalar_accuracy(pairs: list[tuple[str, str]]) -> float:
    """Brute force: try every assignment of scores (all weak orders of the items) and keep the best accuracy.

    A pair (chosen, rejected) is right when score[chosen] > score[rejected] (ties are wrong, as in RewardBench).
    """
    items = sorted({x for pair in pairs for x in pair})
    best = 0.0
    for scores in itertools.product(range(len(items)), repeat=len(items)):  # covers every ordering with ties
        score = dict(zip(items, scores, strict=True))
        best = max(best, sum(score[c] > score[r] for c, r in pairs) / len(pairs))
    return best


def test_brute_force_checker_is_not_trivially_capped() -> None:
    assert best_scalar_accuracy([("a", "b"), ("b", "c"), ("a", "c")]) == 1.0  # transitive: a scalar fits


def group_triples(rows: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        if row["subset"] == "cyclic-rps":
            groups[row["id"].rsplit("-", 1)[0]].append(row)
    return groups


def test_world_triples_are_intransitive_and_cap_scalars_at_two_thirds() -> None:
    world = build_world(SYNTH, seed=5)
    for split_rows in (world.pairs_train, world.pairs_test):
        groups = group_triples(split_rows)
        assert len(groups) in (SYNTH.cyclic_triples_train, SYNTH.cyclic_triples_test)
        for triple in groups.values():
            assert len(triple) == 3 and len({r["prompt"] for r in triple}) == 1
            pairs = [(r["chosen"], r["rejected"]) for r in triple]
            assert len({x for p in pairs for x in p}) == 3
            beats = dict(pairs)  # each response beats exactly one other: a 3-cycle
            a = pairs[0][0]
            assert beats[beats[beats[a]]] == a and beats[a] != a
            assert best_scalar_accuracy(pairs) == 2 / 3


def test_train_and_test_triples_do_not_overlap() -> None:
    world = build_world(SYNTH, seed=5)
    keys = [
        {(r["prompt"], r["chosen"]) for r in world.pairs_train if r["subset"] == "cyclic-rps"},
        {(r["prompt"], r["chosen"]) for r in world.pairs_test if r["subset"] == "cyclic-rps"},
    ]
    assert not keys[0] & keys[1]


def test_every_combination_makes_a_cycle() -> None:
    combos = synthetic_cyclic.all_combinations()
    for combo in random.Random(0).sample(combos, 20):
        pairs = [(c, r) for _, c, r in synthetic_cyclic.triple_rows(combo)]
        assert best_scalar_accuracy(pairs) == 2 / 3
