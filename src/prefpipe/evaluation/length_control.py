"""How much a reward model's scores follow response length, measured the way the length-bias literature does
(ODIN, Chen et al. 2024; Singhal et al. 2023), each figure with a bootstrap 95% interval. Length is characters
of the response text (prefpipe.data.pair_length.response_length), as in the length split.

- Reward-length correlation (heads with a scalar reward r(x, y) only, e.g. BT): Pearson and Spearman
  correlation of r with len(y) over every scored response (both responses of each pair; every option of a
  RewardBench 2 row). A pairwise head (GPM, Bayesian GPM) has no reward per response: null, and its
  correlation is the margin one below.
- Margin-length correlation (every head): Pearson and Spearman correlation of the pair's score s(a > b) with
  the length difference len(a) - len(b), each pair counted in both orders ((s, d) and (-s, -d)), so the figure
  does not depend on which response is called chosen; for a scalar head s(a > b) = r(a) - r(b).
- Length-controlled accuracy: the logistic regression P(correct | d) = sigmoid(a + b d) of "the head picked the
  chosen response" (s(chosen > rejected) > 0; a tie is wrong) on d = len(chosen) - len(rejected), fitted by
  maximum likelihood, read at d = 0: sigmoid(a), the accuracy a pair of equal-length responses is predicted
  to get. `slope_per_1000_chars` is b for d in thousands of characters (> 0: the head is right more often when
  the chosen response is the longer one).
Intervals: percentile bootstrap over the benchmark's units (pairs; RewardBench 2 rows for the reward
correlation), `resamples` draws from default_rng(seed). A resample where a figure is undefined is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from prefpipe.common.stats import bootstrap_statistic_interval

CONFIDENCE = 0.95
REWARD_CORRELATION_KEY = "reward_length_correlation"
MARGIN_CORRELATION_KEY = "margin_length_correlation"
LENGTH_CONTROLLED_KEY = "length_controlled_accuracy"
_MAX_NEWTON_STEPS = 100


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n with tied values given the mean of their ranks (what Spearman's correlation uses)."""
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    first = np.r_[True, sorted_x[1:] != sorted_x[:-1]]
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    ends = np.r_[starts[1:], len(x)]
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = ((starts + 1 + ends) / 2.0)[group]
    return ranks


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's correlation; NaN when either side is constant."""
    dx, dy = x - x.mean(), y - y.mean()
    denom = np.sqrt((dx * dx).sum() * (dy * dy).sum())
    return float((dx * dy).sum() / denom) if denom > 0 else float("nan")


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's correlation: Pearson's on average ranks."""
    return pearson(average_ranks(x), average_ranks(y))


def _members(counts: np.ndarray, picked: np.ndarray) -> np.ndarray:
    """Indices of the items of the picked units, items stored unit by unit (`counts` items per unit)."""
    starts = np.cumsum(counts) - counts
    n = counts[picked]
    return np.repeat(starts[picked] - np.cumsum(n) + n, n) + np.arange(n.sum())


def _interval(value: float | None, ci: tuple[float, float] | None) -> list[float] | None:
    return list(ci) if ci is not None and value is not None else None


def _finite(value: float) -> float | None:
    return value if np.isfinite(value) else None


def correlation_block(
    x: np.ndarray, y: np.ndarray, counts: np.ndarray, resamples: int, seed: int
) -> dict[str, Any]:
    """{pearson, pearson_ci95, spearman, spearman_ci95, n, units} of x against y, resampling units (`counts`
    items each, stored unit by unit)."""
    out: dict[str, Any] = {"n": len(x), "units": len(counts)}
    for name, fn in (("pearson", pearson), ("spearman", spearman)):
        value = _finite(fn(x, y)) if len(x) > 1 else None
        ci = bootstrap_statistic_interval(
            len(counts), lambda pick, f=fn: f(x[_members(counts, pick)], y[_members(counts, pick)]),
            resamples, CONFIDENCE, seed,
        ) if value is not None else None  # fmt: skip
        out[name], out[f"{name}_ci95"] = value, _interval(value, ci)
    return out


def reward_length_correlation(
    rewards: np.ndarray, lengths: np.ndarray, counts: np.ndarray, resamples: int, seed: int
) -> dict[str, Any]:
    """Correlation of each scored response's reward with its length; `counts`: responses per unit."""
    return correlation_block(
        np.asarray(rewards, np.float64), np.asarray(lengths, np.float64), counts, resamples, seed
    )


def margin_length_correlation(
    score: np.ndarray, length_diff: np.ndarray, resamples: int, seed: int
) -> dict[str, Any]:
    """Correlation of s(a > b) with len(a) - len(b), every pair in both orders (resampled by pair)."""
    s, d = np.asarray(score, np.float64), np.asarray(length_diff, np.float64)
    both_s = np.column_stack([s, -s]).reshape(-1)  # pair i's two orders stay next to each other
    both_d = np.column_stack([d, -d]).reshape(-1)
    block = correlation_block(both_s, both_d, np.full(len(s), 2), resamples, seed)
    return {**block, "n": len(s)}


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # no overflow for large |z|


def logistic_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Maximum-likelihood (a, b) of P(y = 1 | x) = sigmoid(a + b x) by Newton's method. Separable data has no
    finite maximum: the steps stop after _MAX_NEWTON_STEPS, where the fitted probabilities are within float
    rounding of 0 or 1."""
    X = np.column_stack([np.ones_like(x), x])
    beta = np.zeros(2)
    for _ in range(_MAX_NEWTON_STEPS):
        p = _sigmoid(X @ beta)
        hessian = X.T @ (X * (p * (1.0 - p))[:, None])
        try:
            step = np.linalg.solve(hessian, X.T @ (y - p))
        except np.linalg.LinAlgError:  # every fitted probability is 0 or 1 in float: nothing left to fit
            break
        if not np.all(np.isfinite(step)):
            break
        beta = beta + step
        if np.max(np.abs(step)) < 1e-10:
            break
    return float(beta[0]), float(beta[1])


def _accuracy_at_zero(x: np.ndarray, y: np.ndarray) -> float:
    """sigmoid(a) of the fit; without spread in x the plain accuracy when every x is 0, else NaN."""
    if np.all(y == y[0]):
        return float(y[0])
    if np.all(x == x[0]):
        return float(y.mean()) if x[0] == 0 else float("nan")
    a, _ = logistic_fit(x, y)
    return float(_sigmoid(np.array(a)))


def length_controlled_accuracy(
    correct: np.ndarray, length_diff: np.ndarray, resamples: int, seed: int
) -> dict[str, Any]:
    """{accuracy, ci95, slope_per_1000_chars, n}: the fitted accuracy at zero length difference."""
    y = np.asarray(correct, dtype=np.float64)
    x = np.asarray(length_diff, dtype=np.float64) / 1000.0  # thousands of characters: a well-scaled fit
    if len(y) == 0:
        return {"accuracy": None, "ci95": None, "slope_per_1000_chars": None, "n": 0}
    value = _finite(_accuracy_at_zero(x, y))
    slope = None
    if value is not None and not np.all(y == y[0]) and not np.all(x == x[0]):
        slope = logistic_fit(x, y)[1]
    ci = bootstrap_statistic_interval(
        len(y), lambda pick: _accuracy_at_zero(x[pick], y[pick]), resamples, CONFIDENCE, seed
    )
    return {"accuracy": value, "ci95": _interval(value, ci), "slope_per_1000_chars": slope, "n": len(y)}


def length_control_report(
    score: Sequence[float],
    length_diff: Sequence[float],
    rewards: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    """The summary keys: reward (None for pairwise heads) and margin correlations, the length-controlled
    accuracy, and how the intervals were drawn. `rewards`: (reward, length, responses per unit) or None."""
    s, d = np.asarray(score, np.float64), np.asarray(length_diff, np.float64)
    return {
        REWARD_CORRELATION_KEY: reward_length_correlation(*rewards, resamples, seed) if rewards else None,
        MARGIN_CORRELATION_KEY: margin_length_correlation(s, d, resamples, seed),
        LENGTH_CONTROLLED_KEY: length_controlled_accuracy(s > 0, d, resamples, seed),
        "length_bootstrap": {"resamples": resamples, "confidence": CONFIDENCE, "seed": seed},
    }
