"""The length figures of every benchmark summary (prefpipe.evaluation.length_control), each against an
independent computation: scipy's correlations and ranks, a likelihood maximised by scipy.optimize, the closed
form of a logistic fit on two symmetric length differences, and hand-made pairs through the eval stage."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats
from support.eval_args import evaluate
from support.scorers import LengthRuleScorer, PairwiseSignScorer, PlusCountScorer

from prefpipe.common.stats import bootstrap_mean_interval, bootstrap_statistic_interval
from prefpipe.evaluation.length_control import (
    LENGTH_CONTROLLED_KEY,
    MARGIN_CORRELATION_KEY,
    REWARD_CORRELATION_KEY,
    _members,
    average_ranks,
    length_controlled_accuracy,
    logistic_fit,
    margin_length_correlation,
    pearson,
    reward_length_correlation,
    spearman,
)
from prefpipe.evaluation.sections import custom_section_table

RNG = np.random.default_rng(7)


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def _sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-z))


def test_ranks_and_correlations_match_scipy():
    x = RNG.integers(0, 20, 200).astype(float)  # many ties
    y = x + RNG.normal(0, 5, 200)
    assert np.array_equal(average_ranks(x), stats.rankdata(x, method="average"))
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
    assert math.isnan(pearson(np.ones(5), np.arange(5.0)))  # constant side: undefined, not 0


def test_margin_correlation_is_orientation_free_and_uncentred():
    """Both orders of every pair: the means vanish, so Pearson is sum(s d) / sqrt(sum s^2 sum d^2)."""
    s, d = RNG.normal(0.5, 1, 50), RNG.normal(100, 300, 50)
    block = margin_length_correlation(s, d, 0, 0)
    hand = (s * d).sum() / math.sqrt((s * s).sum() * (d * d).sum())
    assert block["pearson"] == pytest.approx(hand, abs=1e-12) and block["n"] == 50
    flip = np.where(RNG.random(50) < 0.5, -1.0, 1.0)  # call the other response "chosen" in some pairs
    again = margin_length_correlation(s * flip, d * flip, 0, 0)
    assert again["pearson"] == pytest.approx(block["pearson"], abs=1e-12)
    assert again["spearman"] == pytest.approx(block["spearman"], abs=1e-12)
    both = stats.spearmanr(np.r_[s, -s], np.r_[d, -d])[0]
    assert block["spearman"] == pytest.approx(both, abs=1e-12)


def test_logistic_fit_maximises_the_likelihood():
    x = RNG.normal(0, 1, 300)
    y = (RNG.random(300) < 1 / (1 + np.exp(-(0.4 + 1.3 * x)))).astype(float)

    def nll(beta):
        z = beta[0] + beta[1] * x
        return np.sum(np.logaddexp(0, z) - y * z)

    reference = optimize.minimize(nll, np.zeros(2), method="BFGS", options={"gtol": 1e-10}).x
    assert logistic_fit(x, y) == pytest.approx(tuple(reference), abs=1e-5)


def test_length_controlled_accuracy_closed_form_on_two_symmetric_differences():
    """With d in {-D, +D} the fit is saturated: sigmoid(a -/+ b D) are the two groups' accuracies, so the
    accuracy at d = 0 is sigmoid((logit p_minus + logit p_plus) / 2)."""
    d = np.r_[np.full(40, -300.0), np.full(60, 300.0)]
    correct = np.r_[np.arange(40) < 10, np.arange(60) < 45]  # 10/40 when chosen shorter, 45/60 when longer
    out = length_controlled_accuracy(correct, d, 200, 0)
    hand = _sigmoid((_logit(10 / 40) + _logit(45 / 60)) / 2)
    assert out["accuracy"] == pytest.approx(hand, abs=1e-9) and out["n"] == 100
    slope = (_logit(45 / 60) - _logit(10 / 40)) / 0.6  # per 1000 characters between -0.3 and +0.3
    assert out["slope_per_1000_chars"] == pytest.approx(slope, abs=1e-8)
    lo, hi = out["ci95"]
    assert lo < hand < hi


def test_length_controlled_accuracy_degenerate_inputs():
    assert length_controlled_accuracy(np.ones(5, bool), np.arange(5.0), 50, 0)["accuracy"] == 1.0
    assert length_controlled_accuracy(np.array([1, 0, 1, 1], bool), np.zeros(4), 50, 0)["accuracy"] == 0.75
    # every pair 200 characters apart: the accuracy at 0 is not identified
    assert length_controlled_accuracy(np.array([1, 0], bool), np.full(2, 200.0), 50, 0)["accuracy"] is None


def test_bootstrap_helper_draws_like_the_mean_interval():
    values = RNG.normal(0, 1, 40)
    generic = bootstrap_statistic_interval(40, lambda pick: values[pick].mean(), 500, 0.95, 3)
    assert generic == pytest.approx(bootstrap_mean_interval(values, 500, 0.95, 3), abs=1e-12)


def test_reward_correlation_resamples_whole_units():
    counts = np.array([2, 4, 1])
    assert _members(counts, np.array([1, 1, 2, 0])).tolist() == [2, 3, 4, 5, 2, 3, 4, 5, 6, 0, 1]
    r, lengths = RNG.normal(size=7), RNG.integers(1, 100, 7).astype(float)
    block = reward_length_correlation(r, lengths, counts, 100, 0)
    assert block["pearson"] == pytest.approx(stats.pearsonr(r, lengths)[0], abs=1e-12)
    assert block["n"] == 7 and block["units"] == 3


PAIRS = [("aaaa+", "bb"), ("aaaaaa", "b+"), ("a+", "bbbbb"), ("a", "bbb+"), ("cc+", "ccc"), ("aaaaaaa+", "b")]


def _rows(pairs):
    return [
        {"id": str(i), "prompt": "p", "chosen": c, "rejected": r, "subset": "s"}
        for i, (c, r) in enumerate(pairs)
    ]


def test_summary_figures_for_a_scalar_head_by_hand():
    _, summary = evaluate(PlusCountScorer(), _rows(PAIRS), custom_section_table({}, "t"), mc_samples=0)
    rewards = np.array([[c.count("+"), r.count("+")] for c, r in PAIRS], float).reshape(-1)
    lengths = np.array([[len(c), len(r)] for c, r in PAIRS], float).reshape(-1)
    block = summary[REWARD_CORRELATION_KEY]
    assert block["pearson"] == pytest.approx(stats.pearsonr(rewards, lengths)[0], abs=1e-12)
    assert block["spearman"] == pytest.approx(stats.spearmanr(rewards, lengths)[0], abs=1e-12)
    assert block["n"] == 12 and block["units"] == 6 and len(block["pearson_ci95"]) == 2
    s = rewards[0::2] - rewards[1::2]
    d = lengths[0::2] - lengths[1::2]
    margin = (s * d).sum() / math.sqrt((s * s).sum() * (d * d).sum())
    assert summary[MARGIN_CORRELATION_KEY]["pearson"] == pytest.approx(margin, abs=1e-12)
    beta = optimize.minimize(
        lambda b: np.sum(np.logaddexp(0, b[0] + b[1] * d / 1000) - (s > 0) * (b[0] + b[1] * d / 1000)),
        np.zeros(2), method="BFGS", options={"gtol": 1e-10},
    ).x  # fmt: skip
    assert summary[LENGTH_CONTROLLED_KEY]["accuracy"] == pytest.approx(_sigmoid(beta[0]), abs=1e-5)
    assert summary["length_bootstrap"]["resamples"] == 200


def test_a_length_scorer_correlates_fully_and_a_pairwise_head_has_no_reward_correlation():
    table = custom_section_table({}, "t")
    _, scalar = evaluate(LengthRuleScorer(), _rows(PAIRS), table, mc_samples=0)
    assert scalar[REWARD_CORRELATION_KEY]["pearson"] == pytest.approx(1.0)
    assert scalar[MARGIN_CORRELATION_KEY]["pearson"] == pytest.approx(1.0)
    _, pairwise = evaluate(PairwiseSignScorer(), _rows(PAIRS), table, mc_samples=0)
    assert pairwise[REWARD_CORRELATION_KEY] is None
    d = np.array([len(c) - len(r) for c, r in PAIRS], float)
    s = np.sign(d)
    hand = stats.spearmanr(np.r_[s, -s], np.r_[d, -d])[0]
    assert pairwise[MARGIN_CORRELATION_KEY]["spearman"] == pytest.approx(hand, abs=1e-12)
