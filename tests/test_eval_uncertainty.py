"""Uncertainty measures (prefpipe.evaluation.uncertainty) against brute-force computations."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from prefpipe.evaluation.calibration import expected_calibration_error, sigmoid
from prefpipe.evaluation.uncertainty import (
    aurc,
    aurc_comparison,
    auroc,
    auroc_interval,
    binary_entropy,
    bootstrap,
    ece_difference,
    ensemble_preference,
    flip_probability,
    gaussian_preference,
    risk_coverage,
    sample_preference,
)


def _auroc_pairs(u, y):
    pos, neg = u[y], u[~y]
    return np.mean([1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg])


def test_auroc_matches_all_pairs_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(5, 40))
        u = rng.integers(0, 6, n).astype(float)  # many ties
        y = rng.random(n) < 0.4
        if y.all() or not y.any():
            continue
        assert auroc(u, y) == pytest.approx(_auroc_pairs(u, y), abs=1e-12)
    assert auroc([0.1, 0.9], [False, True]) == 1.0
    assert auroc([0.9, 0.1], [False, True]) == 0.0
    with pytest.raises(ValueError, match="both classes"):
        auroc([0.1, 0.2], [True, True])


def _risk_by_permutations(correct, u):
    """Mean risk curve over every order of the tied pairs (an exhaustive random tie-break)."""
    groups = [[i for i in range(len(u)) if u[i] == value] for value in sorted(set(u))]
    curves = []
    for orders in itertools.product(*(itertools.permutations(g) for g in groups)):
        ranked = [i for group in orders for i in group]
        wrong = np.cumsum([not correct[i] for i in ranked])
        curves.append(wrong / np.arange(1, len(u) + 1))
    return np.mean(curves, axis=0)


def test_risk_coverage_is_the_expectation_over_tie_breaks():
    correct = np.array([True, False, True, True, False, True, False])
    u = np.array([0.2, 0.2, 0.5, 0.1, 0.5, 0.5, 0.9])
    coverage, risk = risk_coverage(correct, u)
    np.testing.assert_allclose(coverage, np.arange(1, 8) / 7)
    np.testing.assert_allclose(risk, _risk_by_permutations(correct, u), atol=1e-12)
    assert aurc(correct, u) == pytest.approx(risk.mean())
    # no ties: the plain cumulative error rate of the sorted decisions
    u2 = np.arange(7.0)[::-1]
    expected = np.cumsum(~correct[np.argsort(u2)]) / np.arange(1, 8)
    np.testing.assert_allclose(risk_coverage(correct, u2)[1], expected)


def test_perfect_ranking_has_the_smallest_area():
    correct = np.array([True] * 8 + [False] * 2)
    perfect = np.r_[np.zeros(8), np.ones(2)]
    worst = 1 - perfect
    assert aurc(correct, perfect) < aurc(correct, np.zeros(10)) < aurc(correct, worst)
    assert aurc(correct, np.zeros(10)) == pytest.approx(0.2)  # all tied: the overall risk at every coverage


def test_gaussian_preference_matches_monte_carlo():
    rng = np.random.default_rng(1)
    # narrow and wide posteriors on the logit scale (sd / tau from 0.2 to 185: a Bayesian head whose KL pushed
    # the variance to its clamp), incl. saturated ones
    m = np.array([-0.3, 0.0, 0.05, 0.2, 1.0, 2.0, 0.5, -0.9, 0.3, 3.0])
    v = np.array([0.01, 0.2, 0.0004, 0.05, 0.3, 1.0, 342.0, 342.0, 1e-6, 0.0])
    tau = 0.1
    got = gaussian_preference(m, v, tau)
    s = m[:, None] + np.sqrt(v)[:, None] * rng.standard_normal((len(m), 1_000_000))
    p = sigmoid(s / tau)
    h = binary_entropy(p)
    for key, samples in (("prob", p), ("expected_entropy", h)):
        se = samples.std(axis=1) / math.sqrt(s.shape[1])
        assert np.all(np.abs(got[key] - samples.mean(axis=1)) <= 5 * se + 1e-4), key
    # H(P) (from the smaller side of P, so exact to the digits 1 - P keeps when P is saturated)
    np.testing.assert_allclose(got["predictive_entropy"], binary_entropy(got["prob"]), atol=1e-12)
    np.testing.assert_allclose(
        got["mutual_information"], binary_entropy(got["prob"]) - got["expected_entropy"], atol=1e-4
    )
    flips = (np.sign(s) != np.sign(m)[:, None]).mean(axis=1)
    np.testing.assert_allclose(got["flip_probability"][m != 0], flips[m != 0], atol=3e-3)
    assert got["flip_probability"][1] == 0.5
    assert got["prob"][6] > 0.5 > got["prob"][7]  # the wide posteriors still lean the mean's way


def test_flip_probability_edges():
    np.testing.assert_allclose(flip_probability([1.0, -1.0, 0.0], [0.0, 1.0, 0.0]), [0.0, 0.1586552539, 0.5])
    with pytest.raises(ValueError, match="negative"):
        flip_probability([1.0], [-1.0])


def test_sample_preference_matches_loops():
    rng = np.random.default_rng(2)
    s = rng.normal(0.1, 0.3, size=(5, 50))
    m = np.array([0.2, -0.1, 0.0, 0.3, -0.4])
    got = sample_preference(s, m, tau=0.2)
    for i in range(5):
        p = [1 / (1 + math.exp(-x / 0.2)) for x in s[i]]
        pbar = sum(p) / len(p)
        total = -(pbar * math.log(pbar) + (1 - pbar) * math.log(1 - pbar))
        expected = sum(-(q * math.log(q) + (1 - q) * math.log(1 - q)) for q in p) / len(p)
        assert got["prob"][i] == pytest.approx(pbar)
        assert got["predictive_entropy"][i] == pytest.approx(total)
        assert got["mutual_information"][i] == pytest.approx(total - expected, abs=1e-12)
        flips = 0.5 if m[i] == 0 else sum(math.copysign(1, x) != math.copysign(1, m[i]) for x in s[i]) / 50
        assert got["flip_probability"][i] == pytest.approx(flips)


def test_bootstrap_is_stratified_and_reproducible():
    y = np.array([True] * 3 + [False] * 17)
    counts = []

    def positives(idx):
        counts.append(int(y[idx].sum()))
        return float(y[idx].mean())

    out = bootstrap(positives, y, resamples=50, confidence=0.95, seed=3)
    assert set(counts) == {3}  # every resample keeps the class counts (and the full-data call too)
    assert out == {"value": 0.15, "low": 0.15, "high": 0.15}


def _redrawn(statistic, strata, resamples: int, confidence: float, seed: int) -> list[float]:
    """The percentile interval over the same resamples, drawn here with numpy: default_rng(seed), per stratum
    in first-seen order an (resamples, n_stratum) integers draw of positions within it, the strata side by side."""
    rng, strata = np.random.default_rng(seed), [str(s) for s in strata]
    blocks = []
    for stratum in dict.fromkeys(strata):
        members = np.array([i for i, s in enumerate(strata) if s == stratum])
        blocks.append(members[rng.integers(0, len(members), size=(resamples, len(members)))])
    rows = np.hstack(blocks)
    values = [statistic(r) for r in rows]
    tail = (1 - confidence) / 2
    return list(np.quantile(values, [tail, 1 - tail]))


def _aurc_by_hand(correct, u) -> float:
    """Mean error rate among the k least uncertain pairs over k = 1..N (no tied uncertainties)."""
    wrong = ~np.asarray(correct)[np.argsort(u)]
    return float(np.mean([wrong[:k].mean() for k in range(1, len(u) + 1)]))


def test_auroc_interval_is_the_percentile_interval_of_the_same_resamples():
    rng = np.random.default_rng(4)
    y = rng.random(40) < 0.3  # the classes interleaved: the stratum order is first-seen
    u = rng.random(40) + 0.3 * y
    got = auroc_interval(u, y, resamples=300, confidence=0.9, seed=5)
    assert got["value"] == pytest.approx(_auroc_pairs(u, y))
    want = _redrawn(lambda i: _auroc_pairs(u[i], y[i]), y, 300, 0.9, 5)
    assert [got["low"], got["high"]] == pytest.approx(want, abs=1e-12)
    assert (got["positives"], got["negatives"]) == (int(y.sum()), int((~y).sum()))
    assert auroc_interval(u, y, resamples=300, confidence=0.9, seed=6) != got  # the seed is used


def test_paired_comparisons():
    rng = np.random.default_rng(6)
    n = 60
    correct = rng.random(n) < 0.8
    u, margin = rng.random(n), rng.random(n)
    strata = ["s1", "s2", "s3"] * 20
    same = aurc_comparison(correct, u, u, strata, resamples=100, confidence=0.95, seed=0)
    assert same["difference"] == {"value": 0.0, "low": 0.0, "high": 0.0}
    # the paired interval: both AURCs on the same resampled rows, redrawn here
    got = aurc_comparison(correct, u, margin, strata, resamples=200, confidence=0.95, seed=1)
    assert got["uncertainty"] == pytest.approx(_aurc_by_hand(correct, u))
    diff = lambda i: _aurc_by_hand(correct[i], u[i]) - _aurc_by_hand(correct[i], margin[i])  # noqa: E731
    want = _redrawn(diff, strata, 200, 0.95, 1)
    assert [got["difference"]["low"], got["difference"]["high"]] == pytest.approx(want, abs=1e-12)
    prob_a, prob_b = rng.random(n), rng.random(n)
    out = ece_difference(
        prob_a, correct, prob_b, correct, strata, n_bins=5, resamples=100, confidence=0.9, seed=0
    )
    assert out["a"] == expected_calibration_error(prob_a, correct, 5)
    assert out["difference"]["value"] == pytest.approx(out["a"] - out["b"])
    ece = expected_calibration_error
    want = _redrawn(
        lambda i: ece(prob_a[i], correct[i], 5) - ece(prob_b[i], correct[i], 5), strata, 100, 0.9, 0
    )
    assert [out["difference"]["low"], out["difference"]["high"]] == pytest.approx(want, abs=1e-12)


def test_ensemble_preference_treats_members_as_samples():
    scores = np.array([[0.3, 0.5, -0.1], [-0.2, -0.4, -0.3], [0.0, 0.2, -0.2]])
    got = ensemble_preference(scores, tau=0.1)
    np.testing.assert_allclose(got["score"], [0.7 / 3, -0.3, 0.0])
    np.testing.assert_allclose(got["score_sd"], [np.std(r, ddof=1) for r in scores])
    np.testing.assert_allclose(
        got["flip_probability"], [1 / 3, 0.0, 0.5]
    )  # share of members against the mean
    p = sigmoid(scores / 0.1)
    np.testing.assert_allclose(got["prob"], p.mean(axis=1))
    np.testing.assert_allclose(
        got["mutual_information"], binary_entropy(p.mean(axis=1)) - binary_entropy(p).mean(axis=1), atol=1e-12
    )
    with pytest.raises(ValueError, match="K >= 2"):
        ensemble_preference(scores[:, :1], tau=0.1)


def test_entropy_decomposition_matches_monte_carlo_for_gaussian_and_ensemble():
    """total = aleatoric + epistemic: the predictive entropy H(E[p]), the expected entropy E[H(p)] and their
    difference, p = sigmoid(s / tau), against brute force over many draws s ~ N(m, v); the ensemble form takes
    the draws as its members, so it must give the sample means themselves and approach the Gaussian form."""
    rng = np.random.default_rng(7)
    m = np.array([0.0, 0.05, -0.2, 0.4, 1.5, 0.3, -0.6])
    v = np.array([0.01, 0.002, 0.09, 0.25, 0.04, 4.0, 1e-6])
    tau, n = 0.1, 200_000
    s = m[:, None] + np.sqrt(v)[:, None] * rng.standard_normal((len(m), n))
    p, z = sigmoid(s / tau), np.abs(s / tau)
    # H(sigmoid(z)) = log(1 + e^-|z|) + |z| sigmoid(-|z|): -p log p - (1-p) log(1-p) with log p = -log(1 + e^-z),
    # log(1 - p) = -z - log(1 + e^-z) (z > 0; H is even); exact where 1 - p rounds to 0 (m / tau = 15 here)
    h = np.log1p(np.exp(-z)) + z / (1 + np.exp(z))
    p_bar, aleatoric = p.mean(axis=1), h.mean(axis=1)
    flipped = sigmoid(-s / tau)  # 1 - p, so that 1 - p_bar ~ 1e-6 (row 4) is summed without cancellation
    smaller = np.where(m < 0, p_bar, flipped.mean(axis=1))
    se_smaller = np.where(m < 0, p.std(axis=1), flipped.std(axis=1)) / math.sqrt(n)
    total = binary_entropy(smaller)
    # standard errors of the sample means, and of H(p_bar) by the delta method (|H'(p)| = |log((1 - p) / p)|)
    se_p, se_h = p.std(axis=1) / math.sqrt(n), h.std(axis=1) / math.sqrt(n)
    slope = np.abs(np.log((1 - p_bar) / p_bar))
    gauss = gaussian_preference(m, v, tau)
    got_smaller = np.minimum(gauss["prob"], 1 - gauss["prob"])
    assert np.all(np.abs(got_smaller - smaller) <= 5 * se_smaller), "1 - P of a saturated pair, to its digits"
    assert np.all(np.abs(gauss["expected_entropy"] - aleatoric) <= 5 * se_h + 1e-4)
    assert np.all(np.abs(gauss["predictive_entropy"] - total) <= 5 * slope * se_p + 1e-4)
    bound = 5 * (slope * se_p + se_h) + 2e-4
    assert np.all(np.abs(gauss["mutual_information"] - (total - aleatoric)) <= bound)
    assert (
        gauss["mutual_information"][5] > 0.3 > gauss["mutual_information"][6]
    )  # wide vs point-like posterior
    ens = ensemble_preference(s, tau)
    np.testing.assert_allclose(ens["expected_entropy"], aleatoric, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ens["predictive_entropy"], total, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ens["mutual_information"], np.maximum(total - aleatoric, 0.0), atol=1e-12)
    for got in (gauss, ens):  # the parts add up to the total
        np.testing.assert_allclose(
            got["expected_entropy"] + got["mutual_information"], got["predictive_entropy"]
        )


def test_ensemble_expected_entropy_is_the_mean_of_the_members_entropies():
    scores = np.array([[0.3, 0.5, -0.1], [-0.2, -0.4, -0.3], [2.0, -2.0, 0.0]])
    got = ensemble_preference(scores, tau=0.2)
    for i, row in enumerate(scores):
        p = [1 / (1 + math.exp(-x / 0.2)) for x in row]
        entropies = [-(q * math.log(q) + (1 - q) * math.log(1 - q)) for q in p]
        assert got["expected_entropy"][i] == pytest.approx(sum(entropies) / 3, rel=1e-12)
