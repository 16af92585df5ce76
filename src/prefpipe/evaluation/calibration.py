"""How far P(chosen > rejected) can be trusted: probabilities, ECE, Brier, NLL, reliability, selective accuracy.

Every head's probability is sigmoid(z) for an effective logit z:
- point heads (BT, GPM): z = s / tau, the model's own training likelihood;
- Bayesian GPM: the predictive P = E[sigmoid(s / tau)] with s ~ N(m, v), integrated numerically
  (prefpipe.evaluation.uncertainty.gaussian_preference; z = logit P), checked against Monte Carlo by
  `mc_expected_sigmoid`. The probit approximation sigmoid(m / sqrt(tau^2 + pi * v / 8)) (MacKay 1992,
  `effective_logit`) is kept as the fallback where P rounds to 0 or 1.
The benchmark's label is always "chosen wins", so calibration uses the top-label view: confidence
max(p, 1 - p) against whether the decision (s > 0) was right; Brier = mean (1 - p)^2, NLL = mean -log p.
Selective accuracy abstains first on the largest predictive entropy H(P) (for point heads the same ranking as
the smallest |P - 0.5|). For Bayesian heads the rankings by the point margin |m|, by the posterior's flip
probability Phi(-|m| / sd) and by the raw variance are kept beside it; docs/findings/UNCERTAINTY.md says why neither
of the last two is an uncertainty about the preference (the variance of a bilinear score grows with |m|).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from prefpipe.common.expected_sigmoid import sigmoid  # the evaluation's sigmoid: one definition

PROBIT_METHOD = "probit approximation: E[sigmoid(s/tau)], s ~ N(m, v) ~= sigmoid(m / sqrt(tau^2 + pi*v/8))"
PREDICTIVE_METHOD = "predictive E[sigmoid(s/tau)], s ~ N(m, v), by numerical integration"
POINT_METHOD = "sigmoid(s/tau) of the point score"
# Keys of the `calibration` block (the report imports them).
ECE, RELIABILITY, SELECTIVE = "ece", "reliability", "selective"
ENTROPY_CRITERION = (
    "abstain on the largest predictive entropy H(P), P = E[sigmoid(s / tau)] under the posterior"
)
POINT_CRITERION = "abstain on the smallest |P - 0.5|"


def effective_logit(score: np.ndarray, tau: float, variance: np.ndarray | None = None) -> np.ndarray:
    """z with P(chosen > rejected) = sigmoid(z): s/tau, or the probit-approximated logit when var is known."""
    if tau <= 0:
        raise ValueError(f"tau must be positive, got {tau}")
    score = np.asarray(score, dtype=np.float64)
    if variance is None:
        return score / tau
    return score / np.sqrt(tau**2 + math.pi * _checked_variance(variance) / 8.0)


def _checked_variance(variance: np.ndarray) -> np.ndarray:
    variance = np.asarray(variance, dtype=np.float64)
    if np.any(variance < 0):
        raise ValueError("score variance must be non-negative")
    return variance


def mc_expected_sigmoid(
    mean: np.ndarray, variance: np.ndarray, tau: float, samples: int, seed: int, chunk: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """Monte Carlo E[sigmoid(s / tau)], s ~ N(mean, variance), per row, and its standard error.

    Used to check the probit approximation; the standard error says how much of a difference is MC noise.
    """
    mean = np.asarray(mean, dtype=np.float64)
    std = np.sqrt(np.asarray(variance, dtype=np.float64))
    rng = np.random.default_rng(seed)
    estimate = np.empty_like(mean)
    stderr = np.empty_like(mean)
    for start in range(0, len(mean), chunk):
        m, sd = mean[start : start + chunk, None], std[start : start + chunk, None]
        values = sigmoid((m + sd * rng.standard_normal((len(m), samples))) / tau)
        estimate[start : start + chunk] = values.mean(axis=1)
        stderr[start : start + chunk] = values.std(axis=1) / math.sqrt(samples)
    return estimate, stderr


def decision_z(score: np.ndarray, variance: np.ndarray) -> np.ndarray:
    """|m| / sd of the score s ~ N(m, v): how many standard deviations the decision s > 0 is from flipping.

    The posterior probability of a flipped decision is Phi(-z), so ranking by -z ranks by that probability
    without its underflow for large z. sd = 0 gives inf (certain) unless m = 0 too, which gives 0 (a tie).
    """
    m = np.abs(np.asarray(score, dtype=np.float64))
    sd = np.sqrt(_checked_variance(variance))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sd > 0, m / sd, np.where(m > 0, np.inf, 0.0))


def binary_entropy(p: np.ndarray) -> np.ndarray:
    """H(p) = -p log p - (1 - p) log(1 - p) in nats (0 at p = 0 or 1)."""
    p = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = -(p * np.log(p)) - (1 - p) * np.log1p(-p)
    return np.nan_to_num(terms, nan=0.0)


def _confidence(prob: np.ndarray) -> np.ndarray:
    return np.maximum(prob, 1.0 - prob)


def reliability_bins(prob: np.ndarray, correct: np.ndarray, n_bins: int = 10) -> list[dict[str, Any]]:
    """Equal-width confidence bins on [0.5, 1]: mean confidence, accuracy and count per bin (empty bins kept)."""
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    conf = _confidence(np.asarray(prob, dtype=np.float64))
    correct = np.asarray(correct, dtype=bool)
    width = 0.5 / n_bins
    index = np.clip(np.floor((conf - 0.5) / width).astype(int), 0, n_bins - 1)
    bins = []
    for b in range(n_bins):
        mask = index == b
        count = int(mask.sum())
        bins.append(
            {
                "lower": 0.5 + b * width,
                "upper": 0.5 + (b + 1) * width,
                "confidence": float(conf[mask].mean()) if count else None,
                "accuracy": float(correct[mask].mean()) if count else None,
                "count": count,
            }
        )
    return bins


def expected_calibration_error(prob: np.ndarray, correct: np.ndarray, n_bins: int = 10) -> float:
    """ECE = sum_b (n_b / N) |accuracy_b - confidence_b| over equal-width confidence bins."""
    bins = reliability_bins(prob, correct, n_bins)
    total = sum(b["count"] for b in bins)
    return float(sum(b["count"] / total * abs(b["accuracy"] - b["confidence"]) for b in bins if b["count"]))


def brier_score(prob: np.ndarray) -> float:
    """Mean squared error of P(chosen > rejected) against the label 1 (chosen is always the preferred one)."""
    return float(np.mean((1.0 - np.asarray(prob, dtype=np.float64)) ** 2))


def negative_log_likelihood(logit: np.ndarray) -> float:
    """Mean -log sigmoid(z), computed from the logit so saturated probabilities stay finite."""
    return float(np.mean(np.logaddexp(0.0, -np.asarray(logit, dtype=np.float64))))


def selective_accuracy(
    correct: np.ndarray, uncertainty: np.ndarray, coverages: Sequence[float]
) -> list[dict[str, Any]]:
    """Accuracy on the ceil(c * N) least uncertain pairs for each coverage c (abstain on the rest).

    Ties in uncertainty keep input order (stable sort), so results are deterministic.
    """
    correct = np.asarray(correct, dtype=bool)
    order = np.argsort(np.asarray(uncertainty, dtype=np.float64), kind="stable")
    ranked = correct[order]
    rows = []
    for coverage in coverages:
        if not 0 < coverage <= 1:
            raise ValueError(f"coverage must be in (0, 1], got {coverage}")
        keep = max(1, math.ceil(coverage * len(ranked) - 1e-9))
        rows.append({"coverage": float(coverage), "n": keep, "accuracy": float(ranked[:keep].mean())})
    return rows


def calibration_report(
    logit: np.ndarray,
    correct: np.ndarray,
    variance: np.ndarray | None = None,
    *,
    n_bins: int,
    coverages: Sequence[float],
    score: np.ndarray | None = None,
) -> dict[str, Any]:
    """ECE, Brier, NLL, reliability bins and selective accuracy for one set of pairs.

    Selective accuracy abstains first on the largest predictive entropy of P = sigmoid(logit); given a variance
    (and the score means it belongs to), the rankings by the point margin -|m| (`selective_by_point_margin`),
    by the flip probability (`selective_by_flip`) and by the raw variance (`selective_by_variance`) are
    reported beside it.
    """
    logit = np.asarray(logit, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    if len(logit) == 0:
        return {"n": 0}
    prob = sigmoid(logit)
    report: dict[str, Any] = {
        "n": int(len(logit)),
        "accuracy": float(correct.mean()),
        "mean_confidence": float(_confidence(prob).mean()),
        ECE: expected_calibration_error(prob, correct, n_bins),
        "ece_bins": n_bins,
        "brier": brier_score(prob),
        "nll": negative_log_likelihood(logit),
        RELIABILITY: reliability_bins(prob, correct, n_bins),
    }
    if variance is not None:
        if score is None:
            raise ValueError("calibration_report: a score variance needs the score means (score=...)")
        report["selective_criterion"] = ENTROPY_CRITERION
        report[SELECTIVE] = selective_accuracy(correct, binary_entropy(prob), coverages)
        point = -np.abs(np.asarray(score, dtype=np.float64))
        report["selective_by_point_margin"] = selective_accuracy(correct, point, coverages)
        report["selective_by_flip"] = selective_accuracy(correct, -decision_z(score, variance), coverages)
        report["selective_by_variance"] = selective_accuracy(correct, np.asarray(variance, float), coverages)
    else:
        report["selective_criterion"] = POINT_CRITERION
        report[SELECTIVE] = selective_accuracy(correct, -np.abs(prob - 0.5), coverages)
    return report
