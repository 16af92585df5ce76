"""How informative a head's uncertainty is, measured as the field measures it (docs/findings/UNCERTAINTY.md).

- What a Bayesian head says about a *preference*, from its score posterior s ~ N(m, v) (the closed-form variance)
  or from posterior samples of s: the probability that the decision flips, Phi(-|m| / sd); the predictive
  P(a > b) = E[sigmoid(s / tau)] and its binary entropy (total uncertainty; for two outcomes it ranks pairs exactly
  like -|P - 0.5|); the expected entropy E[H(sigmoid(s / tau))] (the likelihood's own noise) and their difference,
  the mutual information between the label and the posterior (BALD, the epistemic part). docs/findings/UNCERTAINTY.md
  says why the raw variance is none of these.
- AUROC of an uncertainty for a binary target (the head's own errors, high-disagreement pairs, unfamiliar pairs),
  with a bootstrap interval stratified by the target (every resample keeps both classes' counts).
- The risk-coverage curve (risk among the k most certain pairs, ties broken at random in expectation) and its
  area (AURC), compared with the same curve from the point margin by a paired bootstrap.
- ECE of one head with a bootstrap interval, and of two heads on the same pairs with a paired bootstrap interval
  on their difference.
Bootstraps reuse the evaluation's stratified draw (prefpipe.evaluation.paired_bootstrap).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from prefpipe.common.expected_sigmoid import entropy_of_logit, expected_sigmoid, normal_cdf
from prefpipe.common.stats import percentile_interval
from prefpipe.evaluation.calibration import binary_entropy, expected_calibration_error, sigmoid
from prefpipe.evaluation.paired_bootstrap import draw


def _vector(x: Any, name: str) -> np.ndarray:
    out = np.asarray(x, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{name}: non-finite values")
    return out


def flip_probability(score: np.ndarray, variance: np.ndarray) -> np.ndarray:
    """P(sign s != sign m) for s ~ N(m, v): Phi(-|m| / sd); 0.5 at m = 0, 0 when v = 0 and m != 0."""
    m, v = _vector(score, "score"), _vector(variance, "variance")
    if np.any(v < 0):
        raise ValueError("variance: negative values")
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(v > 0, np.abs(m) / np.sqrt(v), np.where(m != 0, np.inf, 0.0))
    return normal_cdf(-z)


def gaussian_preference(score: np.ndarray, variance: np.ndarray, tau: float) -> dict[str, np.ndarray]:
    """Predictive P(a > b) = E[sigmoid(s / tau)], its entropy, the expected entropy and the mutual information
    for s ~ N(m, v) (numerical integration: prefpipe.common.expected_sigmoid), plus the flip probability."""
    m, v = _vector(score, "score"), _vector(variance, "variance")
    if np.any(v < 0):
        raise ValueError("variance: negative values")
    prob, smaller, expected = expected_sigmoid(m / tau, np.sqrt(v) / tau)
    return _measures(prob, smaller, expected, flip_probability(m, v))


def sample_preference(sample_scores: np.ndarray, score: np.ndarray, tau: float) -> dict[str, np.ndarray]:
    """The same measures from posterior samples of s, shape (pairs, samples); the flip is counted against the
    sign of the posterior-mean score `score` (what the head decides)."""
    s = np.asarray(sample_scores, dtype=np.float64)
    m = _vector(score, "score")
    if s.ndim != 2 or s.shape[0] != len(m):
        raise ValueError(f"sample_scores: expected shape ({len(m)}, samples), got {s.shape}")
    flip = np.where(m == 0, 0.5, (np.sign(s) != np.sign(m)[:, None]).mean(axis=1))
    prob = sigmoid(s / tau).mean(axis=1)
    smaller = np.minimum(prob, sigmoid(-s / tau).mean(axis=1))  # 1 - prob, summed without cancellation
    return _measures(prob, smaller, entropy_of_logit(s / tau).mean(axis=1), flip)


def ensemble_preference(member_scores: np.ndarray, tau: float) -> dict[str, np.ndarray]:
    """A deep ensemble's view of each pair from its members' scores, shape (pairs, K): the members are the
    posterior samples (sample_preference against the mean score, so `flip_probability` is the share of members
    that disagree with the ensemble's decision and `expected_entropy` the mean of the members' entropies), plus
    the ensemble's mean score and the members' sd."""
    s = np.asarray(member_scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[1] < 2:
        raise ValueError(f"member_scores: expected (pairs, K >= 2), got shape {s.shape}")
    mean = s.mean(axis=1)
    return {"score": mean, "score_sd": s.std(axis=1, ddof=1), **sample_preference(s, mean, tau)}


def _measures(
    prob: np.ndarray, smaller: np.ndarray, expected_entropy: np.ndarray, flip: np.ndarray
) -> dict[str, np.ndarray]:
    """The measures from P, min(P, 1 - P) computed without cancellation (from P alone, a saturated pair's
    entropies, ~1e-5, need not obey Jensen's H(P) >= E[H]), the expected entropy and the flip probability."""
    total = binary_entropy(smaller)  # H(P) = H(1 - P)
    return {
        "prob": prob,
        "flip_probability": flip,
        "predictive_entropy": total,
        "expected_entropy": expected_entropy,
        # total - aleatoric; clipped at 0 against quadrature/rounding residue (it is >= 0 by Jensen)
        "mutual_information": np.maximum(total - expected_entropy, 0.0),
    }


def auroc(uncertainty: np.ndarray, positive: np.ndarray) -> float:
    """P(u of a random positive > u of a random negative), ties counting 1/2 (Mann-Whitney, average ranks)."""
    u = _vector(uncertainty, "uncertainty")
    y = np.asarray(positive, dtype=bool).reshape(-1)
    if len(u) != len(y):
        raise ValueError(f"auroc: {len(u)} uncertainties but {len(y)} labels")
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"auroc needs both classes (positives {n_pos}, negatives {n_neg})")
    return float((_average_ranks(u)[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def _average_ranks(u: np.ndarray) -> np.ndarray:
    """1-based ranks, tied values sharing the mean of their ranks."""
    order = np.argsort(u, kind="stable")
    sorted_u = u[order]
    starts = np.flatnonzero(np.r_[True, sorted_u[1:] != sorted_u[:-1]])
    ends = np.r_[starts[1:], len(u)]
    mean_rank = (starts + ends + 1) / 2.0  # mean of starts+1 .. ends
    ranks = np.empty(len(u))
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


def bootstrap(
    statistic: Callable[[np.ndarray], float],
    strata: Sequence[Any],
    resamples: int,
    confidence: float,
    seed: int,
) -> dict[str, float]:
    """statistic(all rows) and its percentile interval over `resamples` draws with replacement within each
    stratum (statistic receives an array of row indices)."""
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    labels = [str(s) for s in strata]
    draws = draw(labels, resamples, np.random.default_rng(seed))
    rows = np.concatenate(list(draws.values()), axis=1)
    values = np.array([statistic(rows[i]) for i in range(resamples)])
    lo, hi = percentile_interval(values, confidence)
    return {"value": float(statistic(np.arange(len(labels)))), "low": lo, "high": hi}


def auroc_interval(
    uncertainty: np.ndarray, positive: np.ndarray, *, resamples: int, confidence: float, seed: int
) -> dict[str, float]:
    """AUROC with a bootstrap interval stratified by the target, and the class counts."""
    u, y = _vector(uncertainty, "uncertainty"), np.asarray(positive, dtype=bool).reshape(-1)
    out = bootstrap(lambda idx: auroc(u[idx], y[idx]), y, resamples, confidence, seed)
    return {**out, "positives": int(y.sum()), "negatives": int((~y).sum())}


def risk_coverage(correct: np.ndarray, uncertainty: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(coverage k/N, risk among the k least uncertain pairs) for k = 1..N. Within a run of tied uncertainties
    the errors are spread evenly: the expected risk over random tie-breaking, so the curve does not depend on
    the input order."""
    u = _vector(uncertainty, "uncertainty")
    wrong = ~np.asarray(correct, dtype=bool).reshape(-1)
    if len(u) != len(wrong) or len(u) == 0:
        raise ValueError(f"risk_coverage: {len(u)} uncertainties, {len(wrong)} decisions (need equal, > 0)")
    order = np.argsort(u, kind="stable")
    sorted_u, sorted_wrong = u[order], wrong[order].astype(np.float64)
    starts = np.flatnonzero(np.r_[True, sorted_u[1:] != sorted_u[:-1]])
    sizes = np.diff(np.r_[starts, len(u)])
    group_rate = np.add.reduceat(sorted_wrong, starts) / sizes
    spread = np.repeat(group_rate, sizes)  # each position carries its tie group's error rate
    k = np.arange(1, len(u) + 1)
    return k / len(u), np.cumsum(spread) / k


def aurc(correct: np.ndarray, uncertainty: np.ndarray) -> float:
    """Area under the risk-coverage curve: the mean risk over coverages 1/N .. 1 (lower is better)."""
    return float(risk_coverage(correct, uncertainty)[1].mean())


def aurc_comparison(
    correct: np.ndarray,
    uncertainty: np.ndarray,
    margin_uncertainty: np.ndarray,
    strata: Sequence[Any],
    *,
    resamples: int,
    confidence: float,
    seed: int,
) -> dict[str, Any]:
    """AURC of the uncertainty and of the point margin's ranking (e.g. -|m|) on the same decisions, and a
    paired bootstrap interval on uncertainty - margin (< 0: the uncertainty abstains better)."""
    ok = np.asarray(correct, dtype=bool).reshape(-1)
    u, mu = _vector(uncertainty, "uncertainty"), _vector(margin_uncertainty, "margin_uncertainty")
    diff = bootstrap(lambda i: aurc(ok[i], u[i]) - aurc(ok[i], mu[i]), strata, resamples, confidence, seed)
    return {"uncertainty": aurc(ok, u), "margin": aurc(ok, mu), "difference": diff}


def ece_difference(
    prob_a: np.ndarray,
    correct_a: np.ndarray,
    prob_b: np.ndarray,
    correct_b: np.ndarray,
    strata: Sequence[Any],
    *,
    n_bins: int,
    resamples: int,
    confidence: float,
    seed: int,
) -> dict[str, Any]:
    """ECE of heads a and b on the same pairs (calibration.expected_calibration_error) and a paired bootstrap
    interval on ECE_a - ECE_b (the same drawn rows for both heads)."""
    pa, pb = _vector(prob_a, "prob_a"), _vector(prob_b, "prob_b")
    ca, cb = np.asarray(correct_a, dtype=bool), np.asarray(correct_b, dtype=bool)
    if not len(pa) == len(pb) == len(ca) == len(cb) == len(strata):
        raise ValueError("ece_difference: both heads need one probability and one decision per pair")

    def delta(i: np.ndarray) -> float:
        return expected_calibration_error(pa[i], ca[i], n_bins) - expected_calibration_error(
            pb[i], cb[i], n_bins
        )

    diff = bootstrap(delta, strata, resamples, confidence, seed)
    return {
        "a": expected_calibration_error(pa, ca, n_bins),
        "b": expected_calibration_error(pb, cb, n_bins),
        "difference": diff,
    }


def ece_interval(
    prob: np.ndarray,
    correct: np.ndarray,
    strata: Sequence[Any],
    *,
    n_bins: int,
    resamples: int,
    confidence: float,
    seed: int,
) -> dict[str, float]:
    """ECE of one head (calibration.expected_calibration_error) and its percentile interval over resamples of
    the pairs within each stratum (the subsets), drawn as ece_difference draws them."""
    p, c = _vector(prob, "prob"), np.asarray(correct, dtype=bool).reshape(-1)
    if not len(p) == len(c) == len(strata):
        raise ValueError("ece_interval: one probability, one decision and one stratum per pair")
    return bootstrap(
        lambda i: expected_calibration_error(p[i], c[i], n_bins), strata, resamples, confidence, seed
    )
