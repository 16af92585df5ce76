"""Paired comparisons of policies (common.stats.paired_difference, grpo/analyses/paired.py) against independent
computations: the exact bootstrap distribution by enumeration, the normal approximation at large n, scipy's
exact binomial test for McNemar, and per-prompt means over seeds computed with plain loops."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import binomtest
from scipy.stats import t as student_t

from prefpipe.common.config import DataError
from prefpipe.common.stats import (
    Z95,
    mcnemar_exact_p,
    paired_difference,
    paired_t_interval,
    t_quantile,
)
from prefpipe.grpo.analyses import paired


def test_bootstrap_interval_matches_the_enumerated_bootstrap_distribution():
    d = np.array([1.0, 0.0, -1.0, 1.0, 1.0])  # trained - base on five prompts
    trained, base = np.clip(d, 0, 1), np.clip(-d, 0, 1)
    means = sorted(sum(c) / 5 for c in itertools.product(d, repeat=5))  # all 5^5 equally likely resamples
    exact_lo, exact_hi = np.quantile(means, [0.025, 0.975])
    got = paired_difference(trained, base, 40_000, 0.95, seed=3)
    assert got["delta"] == pytest.approx(0.4)
    assert got["ci"][0] == pytest.approx(exact_lo, abs=0.05) and got["ci"][1] == pytest.approx(
        exact_hi, abs=0.05
    )


def test_bootstrap_interval_matches_the_normal_approximation_at_large_n():
    rng = np.random.default_rng(0)
    base = (rng.random(600) < 0.3).astype(float)
    trained = np.where(rng.random(600) < 0.8, base, 1 - base)  # 20% of prompts flip
    trained[:60] = 1.0
    d = trained - base
    half = Z95 * d.std(ddof=1) / math.sqrt(d.size)
    got = paired_difference(trained, base, 4000, 0.95, seed=1)
    assert got["ci"][0] == pytest.approx(d.mean() - half, abs=0.006)
    assert got["ci"][1] == pytest.approx(d.mean() + half, abs=0.006)
    # the paired interval is narrower than the unpaired one when outcomes are correlated
    unpaired = Z95 * math.sqrt(trained.var(ddof=1) / 600 + base.var(ddof=1) / 600)
    assert got["ci"][1] - got["ci"][0] < 2 * unpaired


@pytest.mark.parametrize(("b", "c"), [(0, 0), (3, 0), (10, 4), (7, 7), (1, 20), (45, 30)])
def test_mcnemar_exact_p_matches_scipy(b, c):
    expected = 1.0 if b + c == 0 else binomtest(b, b + c, 0.5).pvalue
    assert mcnemar_exact_p(b, c) == pytest.approx(expected, rel=1e-9)


def test_discordant_counts_and_non_binary_outcomes():
    got = paired_difference([1, 1, 0, 0, 1], [0, 1, 1, 0, 0], 500, 0.95, 0)
    assert (got["only_a"], got["only_b"], got["n"]) == (2, 1, 5)
    assert got["mcnemar_p"] == pytest.approx(binomtest(1, 3, 0.5).pvalue)
    assert "mcnemar_p" not in paired_difference([0.5, 1.0], [0.0, 0.5], 500, 0.95, 0)
    with pytest.raises(ValueError, match="equal, non-empty"):
        paired_difference([1, 0], [1], 500, 0.95, 0)


def _rows(base: list[int], trained: list[int], ids: list[str] | None = None) -> list[dict]:
    ids = ids or [f"q{i}" for i in range(len(base))]
    return [
        {"id": i, "base_correct_greedy": bool(b), "trained_correct_greedy": bool(t)}
        for i, b, t in zip(ids, base, trained, strict=True)
    ]


def test_arm_pools_seeds_per_prompt_and_contrast_pairs_prompts():
    base = [0, 0, 1, 0, 1, 0]
    seeds = {"v_s0": [1, 0, 1, 1, 1, 0], "v_s1": [1, 1, 1, 0, 0, 0], "v_s2": [0, 0, 1, 1, 1, 1]}
    arm_a = {name: _rows(base, t) for name, t in seeds.items()}
    got = paired.arm(arm_a, "greedy", 2000, 0.95, 0)
    by_prompt = [sum(seeds[s][i] for s in seeds) / 3 - base[i] for i in range(6)]  # by hand
    assert got["pooled"]["delta"] == pytest.approx(sum(by_prompt) / 6)
    assert (
        got["pooled"]["ci"]
        == paired_difference([sum(seeds[s][i] for s in seeds) / 3 for i in range(6)], base, 2000, 0.95, 0)[
            "ci"
        ]
    )
    own = [(sum(t) - sum(base)) / 6 for t in seeds.values()]
    assert [got["per_run"][s]["delta"] for s in seeds] == pytest.approx(own)
    assert got["across_runs"]["mean"] == pytest.approx(sum(own) / 3)
    assert got["across_runs"]["sd"] == pytest.approx(np.std(own, ddof=1))

    other = {"g_s0": _rows(base, [0, 0, 1, 0, 0, 0]), "g_s1": _rows(base, [1, 0, 0, 0, 0, 0])}
    c = paired.contrast(arm_a, other, "greedy", 2000, 0.95, 0)
    mean_a = [sum(seeds[s][i] for s in seeds) / 3 for i in range(6)]
    mean_b = [(0 + 1) / 2, 0, 0.5, 0, 0, 0]
    assert c["delta"] == pytest.approx(sum(a - b for a, b in zip(mean_a, mean_b, strict=True)) / 6)
    assert c["runs_a"] == list(seeds) and c["n"] == 6


def test_prompts_missing_from_a_run_are_left_out_and_none_in_common_is_an_error():
    a = {"r0": _rows([0, 1, 0], [1, 1, 1], ["x", "y", "z"])}
    b = {"r1": _rows([0, 0], [0, 1], ["y", "z"])}
    assert paired.contrast(a, b, "greedy", 500, 0.95, 0)["n"] == 2
    with pytest.raises(DataError, match="no evaluation prompt graded in every run"):
        paired.contrast(a, {"r2": _rows([0], [0], ["w"])}, "greedy", 500, 0.95, 0)


def test_t_quantile_matches_closed_forms_and_scipy():
    # dof 1 (Cauchy): tan(pi/2 * c); dof 2: c * sqrt(2 / (1 - c^2)); large dof: the normal quantile
    assert t_quantile(0.95, 1) == pytest.approx(math.tan(math.pi / 2 * 0.95), rel=1e-12)
    assert t_quantile(0.95, 2) == pytest.approx(0.95 * math.sqrt(2 / (1 - 0.95**2)), rel=1e-12)
    assert t_quantile(0.95, 100_000) == pytest.approx(Z95, abs=1e-4)
    for dof in range(1, 31):
        for confidence in (0.8, 0.9, 0.95, 0.99):
            want = student_t.ppf(0.5 + confidence / 2, dof)
            assert t_quantile(confidence, dof) == pytest.approx(want, rel=1e-9), (dof, confidence)
    with pytest.raises(ValueError, match="dof >= 1"):
        t_quantile(0.95, 0)


def test_paired_t_interval_by_hand():
    a, b = [0.5, 1.5, 0.1], [0.2, 0.4, 0.6]  # differences 0.3, 1.1, -0.5: mean 0.3, sd 0.8
    got = paired_t_interval(a, b, 0.95)
    assert got["mean"] == pytest.approx(0.3) and got["sd"] == pytest.approx(0.8)
    half = 4.302652729749464 * 0.8 / math.sqrt(3)  # t(0.975, 2) from tables
    assert got["ci"] == pytest.approx([0.3 - half, 0.3 + half]) and got["dof"] == 2 and got["n"] == 3
    assert got["t"] == pytest.approx(4.302652729749464)
    assert paired_t_interval([1.0], [0.5], 0.95)["ci"] is None  # one seed: no interval
    with pytest.raises(ValueError, match="equal series"):
        paired_t_interval([1.0, 2.0], [0.5], 0.95)
