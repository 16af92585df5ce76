"""Calibration metrics against hand computations; probit approximation against quadrature and Monte Carlo."""

from __future__ import annotations

import math

import numpy as np
import pytest
from support.eval_args import EVAL

from prefpipe.evaluation.calibration import (
    ENTROPY_CRITERION,
    brier_score,
    calibration_report,
    decision_z,
    effective_logit,
    expected_calibration_error,
    mc_expected_sigmoid,
    negative_log_likelihood,
    reliability_bins,
    selective_accuracy,
    sigmoid,
)


def _logit(p):
    p = np.asarray(p, dtype=np.float64)
    return np.log(p / (1 - p))


def _exact_expected_sigmoid(m, v, tau, order=200):
    """E[sigmoid(s / tau)], s ~ N(m, v), by Gauss-Hermite quadrature (an independent reference)."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(order)
    values = [1 / (1 + math.exp(-(m + math.sqrt(v) * z) / tau)) for z in nodes]
    return float(np.dot(weights, values) / weights.sum())


def test_perfectly_calibrated_bins_have_zero_ece():
    # Bin around 0.75: three pairs say 0.75 for chosen (right), one says 0.25 (confidently wrong) -> 3/4 right.
    # Bin around 0.95: nineteen right at 0.95, one wrong at 0.05 -> 19/20 right.
    prob = np.array([0.75] * 3 + [0.25] + [0.95] * 19 + [0.05])
    correct = prob > 0.5
    assert expected_calibration_error(prob, correct, n_bins=10) == pytest.approx(0.0, abs=1e-12)


def test_ece_brier_nll_match_hand_values():
    prob = np.array([0.92, 0.92, 0.62, 0.27])
    correct = prob > 0.5
    # confidence 0.92, 0.92, 0.62, 0.73; accuracy 1, 1, 1, 0 (three separate bins of width 0.05)
    ece = 2 / 4 * abs(1 - 0.92) + 1 / 4 * abs(1 - 0.62) + 1 / 4 * abs(0 - 0.73)
    assert expected_calibration_error(prob, correct, 10) == pytest.approx(ece, abs=1e-12)
    assert ece == pytest.approx(0.3175)
    brier = ((1 - 0.92) ** 2 * 2 + (1 - 0.62) ** 2 + (1 - 0.27) ** 2) / 4
    assert brier_score(prob) == pytest.approx(brier, abs=1e-12)
    nll = -(2 * math.log(0.92) + math.log(0.62) + math.log(0.27)) / 4
    assert negative_log_likelihood(_logit(prob)) == pytest.approx(nll, abs=1e-12)


def test_nll_stays_finite_for_saturated_logits():
    assert negative_log_likelihood(np.array([-1000.0, 1000.0])) == pytest.approx(500.0)
    assert sigmoid(np.array([-1000.0]))[0] == 0.0


def test_reliability_bins_counts_and_means():
    prob = np.array([0.5, 0.52, 0.48, 0.99, 1.0, 0.0])
    correct = prob > 0.5
    bins = reliability_bins(prob, correct, n_bins=5)
    assert [b["count"] for b in bins] == [3, 0, 0, 0, 3]
    assert bins[0]["confidence"] == pytest.approx((0.5 + 0.52 + 0.52) / 3)
    assert bins[0]["accuracy"] == pytest.approx(1 / 3)
    assert bins[4]["accuracy"] == pytest.approx(2 / 3)
    assert bins[1]["confidence"] is None and bins[1]["accuracy"] is None
    assert bins[0]["lower"] == 0.5 and bins[-1]["upper"] == pytest.approx(1.0)


@pytest.mark.parametrize("tau", [0.1, 1.0])
def test_probit_approximation_against_quadrature_and_monte_carlo(tau):
    mean = np.array([0.3, -0.2, 1.0, 0.0, -2.0]) * tau * 3
    var = np.array([0.05, 0.5, 2.0, 1.0, 0.3]) * tau**2 * 9
    probit = sigmoid(effective_logit(mean, tau, var))
    exact = np.array([_exact_expected_sigmoid(m, v, tau) for m, v in zip(mean, var, strict=True)])
    mc, mc_stderr = mc_expected_sigmoid(mean, var, tau, samples=100_000, seed=1)
    assert np.all(np.abs(mc - exact) < 4 * mc_stderr + 1e-9)  # the Monte Carlo estimator itself is right
    assert np.all(mc_stderr < 0.002)
    assert (
        np.max(np.abs(probit - exact)) < 0.02
    )  # the probit approximation's known accuracy (~0.018 worst case)
    assert np.max(np.abs(probit - mc)) < 0.02
    assert probit[3] == pytest.approx(0.5)  # zero mean stays undecided whatever the variance


def test_probit_without_variance_is_the_point_sigmoid():
    score = np.array([-0.3, 0.0, 0.7])
    assert np.allclose(sigmoid(effective_logit(score, 0.1, np.zeros(3))), 1 / (1 + np.exp(-score / 0.1)))
    assert np.allclose(effective_logit(score, 0.1), score / 0.1)
    with pytest.raises(ValueError, match="non-negative"):
        effective_logit(score, 0.1, np.array([0.1, -0.1, 0.0]))


def test_selective_accuracy_rises_as_uncertain_errors_are_dropped():
    correct = np.array([True] * 6 + [False] * 4)
    variance = np.array([0.1, 0.2, 0.1, 0.3, 0.2, 0.1, 0.9, 0.8, 0.95, 0.7])  # errors are the most uncertain
    rows = selective_accuracy(correct, variance, [1.0, 0.9, 0.8, 0.7, 0.6, 0.3])
    assert [r["n"] for r in rows] == [10, 9, 8, 7, 6, 3]
    assert [r["accuracy"] for r in rows] == pytest.approx([0.6, 6 / 9, 6 / 8, 6 / 7, 1.0, 1.0])
    accs = [r["accuracy"] for r in rows]
    assert all(a <= b for a, b in zip(accs, accs[1:], strict=False))


def test_calibration_report_uses_variance_or_margin():
    logit = np.array([3.0, 0.1, -0.2, 2.0])
    correct = logit > 0
    point = calibration_report(logit, correct, n_bins=EVAL.calibration_bins, coverages=[1.0, 0.5])
    assert point["selective_criterion"].endswith("|P - 0.5|")
    assert point["selective"][1] == {"coverage": 0.5, "n": 2, "accuracy": 1.0}  # keeps the two most confident
    variance = np.array([0.1, 0.1, 5.0, 0.1])
    bayes = calibration_report(
        logit, correct, variance=variance, n_bins=EVAL.calibration_bins, coverages=[1.0, 0.75], score=logit
    )
    assert bayes["selective_criterion"] == ENTROPY_CRITERION
    # the predictive entropy keeps the three largest |logit| (3, 2 and the error's -0.2), dropping 0.1
    assert bayes["selective"][1] == {"coverage": 0.75, "n": 3, "accuracy": pytest.approx(2 / 3)}
    assert bayes["selective_by_flip"][1]["accuracy"] == 1.0  # the error, |m| / sd = 0.09, is dropped first
    assert bayes["selective_by_point_margin"] == bayes["selective"]  # score = logit here: same ranking
    assert "selective_by_variance" in bayes
    with pytest.raises(ValueError, match="score means"):
        calibration_report(
            logit,
            correct,
            variance=variance,
            n_bins=EVAL.calibration_bins,
            coverages=EVAL.selective_coverages,
        )
    assert point["n"] == 4 and point["accuracy"] == 0.75
    assert point["brier"] == pytest.approx(brier_score(sigmoid(logit)))


def test_decision_z_gives_the_monte_carlo_flip_probability():
    """Phi(-|m| / sd) = 0.5 * erfc(z / sqrt 2) against the share of posterior samples whose sign differs."""
    mean = np.array([0.3, -1.2, 2.0, 0.0, 0.5])
    variance = np.array([0.25, 1.0, 0.5, 0.3, 0.0])
    z = decision_z(mean, variance)
    assert z[3] == 0.0 and z[4] == np.inf  # a tie is the most uncertain; no variance, no flip
    samples = mean[:, None] + np.sqrt(variance)[:, None] * np.random.default_rng(0).standard_normal(
        (5, 200_000)
    )
    flipped = (np.sign(samples) != np.sign(mean)[:, None]).mean(axis=1)
    expected = [0.5 * math.erfc(x / math.sqrt(2)) for x in z[:3]]
    assert flipped[:3] == pytest.approx(expected, abs=4e-3)


def test_flip_ranking_keeps_confident_pairs_that_the_raw_variance_drops():
    """A bilinear score's variance grows with |m|: a far-from-zero correct pair can have the largest variance."""
    score = np.array([5.0, 0.1, 3.0, 0.2])
    variance = np.array([4.0, 0.01, 2.0, 0.02])  # z = 2.5, 1.0, 2.1, 1.4
    correct = np.array([True, False, True, False])
    report = calibration_report(
        score, correct, variance=variance, n_bins=EVAL.calibration_bins, coverages=[0.5], score=score
    )
    assert report["selective"] == [{"coverage": 0.5, "n": 2, "accuracy": 1.0}]
    assert report["selective_by_variance"] == [{"coverage": 0.5, "n": 2, "accuracy": 0.0}]
