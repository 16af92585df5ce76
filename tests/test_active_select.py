"""Active learning's acquisition (prefpipe.active.select) against independent computations: top-k by
uncertainty with deterministic ties, never a labelled pair, random = a seeded permutation, the Bayesian GPM's
mutual information, the ensemble's score sd and its members' mutual information computed here by brute force;
and the config checks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from support.settings import pipeline

from prefpipe.active.layout import INITIAL, pool_readers, trained
from prefpipe.active.select import check_strategies, random_pick, select, top_k
from prefpipe.common.config import ConfigError

ON = {"enabled": True, "ensemble": "ens", "learner": "bgpm"}


def _settings(**active):
    overlay = {"active_learning": {**ON, **active}, "eval": {"ensembles": {"ens": ["gpm", "bt"]}}}
    return pipeline(overlay).active_learning


def _brute_top_k(u, ids, k):
    """Sort (-u, id) pairs: the largest uncertainty first, the smaller id first among equals."""
    return [i for _, i in sorted(zip((-x for x in u), ids, strict=True))][:k]


def test_top_k_matches_a_brute_force_sort_with_ties():
    rng = np.random.default_rng(0)
    for trial in range(200):
        n = int(rng.integers(1, 40))
        u = rng.integers(0, 5, n).astype(float)  # many ties
        ids = [f"p{int(x):04d}" for x in rng.permutation(1000)[:n]]
        k = int(rng.integers(0, n + 1))
        assert top_k(u, ids, k) == _brute_top_k(u.tolist(), ids, k), trial


def test_top_k_does_not_depend_on_the_pool_order():
    u = np.array([0.3, 0.9, 0.3, 0.3, 0.1])
    ids = ["e", "a", "d", "b", "c"]
    order = [3, 0, 4, 1, 2]
    assert top_k(u, ids, 3) == ["a", "b", "d"]
    assert top_k(u[order], [ids[i] for i in order], 3) == ["a", "b", "d"]


def test_random_is_a_seeded_permutation_of_the_sorted_pool():
    ids = [f"x{i:03d}" for i in range(50)][::-1]
    expected = [sorted(ids)[i] for i in np.random.default_rng((7, 3)).permutation(50)[:10]]
    assert random_pick(ids, 10, seed=7, round_=3) == expected
    assert random_pick(list(reversed(ids)), 10, seed=7, round_=3) == expected
    assert random_pick(ids, 10, seed=8, round_=3) != expected
    assert random_pick(ids, 10, seed=7, round_=4) != expected


def _grid_mutual_information(m, v, tau):
    """BALD by a dense grid over s ~ N(m, v): H(E[sigmoid(s/tau)]) - E[H(sigmoid(s/tau))]."""
    out = []
    for mean, var in zip(m, v, strict=True):
        sd = np.sqrt(var)
        s = np.linspace(mean - 12 * sd, mean + 12 * sd, 200001)
        w = np.exp(-0.5 * ((s - mean) / sd) ** 2)
        w /= w.sum()
        p = 1 / (1 + np.exp(-s / tau))
        pbar = (w * p).sum()
        out.append(_entropy(np.array([pbar]))[0] - (w * _entropy(p)).sum())
    return np.array(out)


def _entropy(p):
    """-p log p - (1 - p) log(1 - p), 0 log 0 = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = [np.where(q > 0, -q * np.log(q), 0.0) for q in (p, 1 - p)]
    return terms[0] + terms[1]


def _frame(ids, score, variance, tau=1.0):
    return pd.DataFrame({"id": ids, "split": "pool", "score": score, "variance": variance, "tau": tau})


def test_bgpm_picks_the_largest_mutual_information_and_never_a_labelled_pair():
    settings = _settings()
    rng = np.random.default_rng(1)
    ids = [f"t{i:02d}" for i in range(30)]
    m, v = rng.normal(0, 2, 30), rng.uniform(0.05, 6.0, 30)
    labelled = set(ids[:10])
    pool = [i for i in ids if i not in labelled]
    scores = {"bgpm": _frame(ids, m, v, tau=0.7)}  # scores of labelled pairs too: they must be ignored
    chosen = select("bgpm", settings, pool, scores, 5, seed=0, round_=1)
    mi = _grid_mutual_information(m, v, 0.7)
    in_pool = [ids.index(i) for i in pool]
    expected = [ids[j] for j in sorted(in_pool, key=lambda j: -mi[j])[:5]]
    assert chosen == expected and not labelled & set(chosen)
    with pytest.raises(Exception, match="only 20 are unlabelled"):
        select("bgpm", settings, pool, scores, 21, seed=0, round_=1)


def test_ensemble_picks_the_largest_member_sd():
    settings = _settings()
    rng = np.random.default_rng(2)
    ids = [f"q{i:02d}" for i in range(12)]
    a, b = rng.normal(0, 1, 12), rng.normal(0, 1, 12)
    scores = {"gpm": _frame(ids, a, np.nan), "bt": _frame(ids[::-1], b[::-1], np.nan)}  # another row order
    sd = np.std(np.stack([a, b]), axis=0, ddof=1)
    expected = [ids[j] for j in np.argsort(-sd, kind="stable")[:4]]
    assert select("ensemble", settings, ids, scores, 4, seed=0, round_=2) == expected


def _members_bald(scores, taus):
    """H(mean_m p_m) - mean_m H(p_m) with p_m = sigmoid(s_m / tau_m), member by member."""
    probs = [1 / (1 + np.exp(-s / t)) for s, t in zip(scores, taus, strict=True)]
    return _entropy(sum(probs) / len(probs)) - sum(_entropy(p) for p in probs) / len(probs)


def test_ensemble_bald_picks_the_largest_members_mutual_information():
    settings = _settings()
    rng = np.random.default_rng(3)
    ids = [f"r{i:02d}" for i in range(40)]
    a, b = rng.normal(0, 3, 40), rng.normal(0, 3, 40)
    scores = {"gpm": _frame(ids, a, np.nan, tau=0.5), "bt": _frame(ids[::-1], b[::-1], np.nan, tau=2.0)}
    pool = ids[3:]
    mi = _members_bald([a, b], [0.5, 2.0])
    expected = [ids[j] for j in sorted(range(3, 40), key=lambda j: (-mi[j], ids[j]))[:7]]
    assert select("ensemble_bald", settings, pool, scores, 7, seed=0, round_=1) == expected
    sd = np.std(np.stack([a, b]), axis=0, ddof=1)
    assert expected != [
        ids[j] for j in sorted(range(3, 40), key=lambda j: -sd[j])[:7]
    ]  # not the sd's ranking


def test_strategies_are_checked_against_the_registry_and_the_heads():
    is_bayesian = {"bgpm": True, "gpm": False, "bt": False}.__getitem__
    check_strategies(_settings(), is_bayesian)
    with pytest.raises(ConfigError, match="unknown strategy 'bald'"):
        check_strategies(_settings(strategies=["bald"]), is_bayesian)
    with pytest.raises(ConfigError, match="'bgpm' reads gpm, which is not a Bayesian head"):
        pipeline({"active_learning": {**ON, "learner": "gpm", "ensemble": None, "strategies": ["bgpm"]}})
    with pytest.raises(ConfigError, match="'ensemble' needs active_learning.ensemble"):
        pipeline({"active_learning": {**ON, "ensemble": None}})
    with pytest.raises(ConfigError, match="'ensemble_bald' needs active_learning.ensemble"):
        pipeline({"active_learning": {**ON, "ensemble": None, "strategies": ["random", "ensemble_bald"]}})
    with pytest.raises(ConfigError, match="'ensemble_bald' reads bgpm, which is not a point head"):
        overlay = {"active_learning": {**ON, "strategies": ["ensemble_bald"]}}
        pipeline({**overlay, "eval": {"ensembles": {"ens": ["bgpm", "gpm"]}}})
    with pytest.raises(ConfigError, match="not an eval.ensembles entry"):
        pipeline({"active_learning": {**ON, "ensemble": "none-such"}})
    with pytest.raises(
        ConfigError, match="'balpm' reads the learner's posterior draws; .*posterior_samples is 0"
    ):
        pipeline(
            {"active_learning": {**ON, "ensemble": None, "strategies": ["balpm"], "posterior_samples": 0}}
        )
    with pytest.raises(ConfigError, match="'batchbald' reads gpm, which is not a Bayesian head"):
        pipeline({"active_learning": {**ON, "learner": "gpm", "ensemble": None, "strategies": ["batchbald"]}})
    assert pipeline({}).active_learning is None  # off in the default run


def test_a_round_trains_the_learner_and_only_the_scorers_the_next_selection_reads():
    settings = _settings(rounds=3)
    assert trained(settings, INITIAL, 0) == ["bgpm", "gpm", "bt"]
    assert trained(settings, "random", 1) == ["bgpm"]
    assert trained(settings, "ensemble", 1) == ["bgpm", "gpm", "bt"]
    assert trained(settings, "ensemble", 2) == ["bgpm"]  # the last round: nothing selects from it
    # whose pool scores a selection reads: the learner's only in the bgpm arm, never after the last round
    assert pool_readers(settings, INITIAL, 0) == ["bgpm", "gpm", "bt"]
    assert pool_readers(settings, "bgpm", 1) == ["bgpm"]
    assert pool_readers(settings, "ensemble", 1) == ["gpm", "bt"]
    assert pool_readers(settings, "random", 1) == [] == pool_readers(settings, "bgpm", 2)
