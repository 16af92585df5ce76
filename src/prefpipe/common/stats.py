"""Interval estimates shared by every stage that reports an accuracy or an effect (evaluation, ablation,
policy evaluation, GRPO hypotheses, report): Wilson and bootstrap intervals, mean ± sd, and where an interval
lies against zero."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Z95 = 1.959963984540054  # two-sided 95% normal quantile


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (sane at 0 and n, unlike the normal interval)."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if successes == 0 else max(0.0, centre - half)  # exact ends at 0 and n (no rounding residue)
    hi = 1.0 if successes == n else min(1.0, centre + half)
    return (lo, hi)


# Where an interval lies against zero: the one rule behind every verdict (the ablation's matters / neutral /
# hurts, the GRPO hypotheses' helps / no measurable effect / hurts, the report's "beyond its interval"). Each
# stage keeps its own words for its output files and maps these three onto them.
ABOVE_ZERO, STRADDLES_ZERO, BELOW_ZERO = "above", "straddles", "below"


def interval_side(interval: Sequence[float]) -> str:
    """ABOVE_ZERO when the whole interval is above 0, BELOW_ZERO when below, else STRADDLES_ZERO."""
    lo, hi = interval
    if lo > 0:
        return ABOVE_ZERO
    if hi < 0:
        return BELOW_ZERO
    return STRADDLES_ZERO


def mean_sd(values: Sequence[float]) -> dict[str, Any]:
    """{mean, sd (sample, None below two values), n, values}; mean None without values."""
    n = len(values)
    mean = sum(values) / n if n else None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 and mean is not None else None
    return {"mean": mean, "sd": sd, "n": n, "values": list(values)}


def percentile_interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """The two-sided percentile interval of a bootstrap distribution."""
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(values, [tail, 1.0 - tail])
    return float(lo), float(hi)


def bootstrap_mean_interval(
    values: np.ndarray, samples: int, confidence: float, seed: int
) -> tuple[float, float]:
    """Percentile interval of the mean of `values` (resampled with replacement; numpy default_rng(seed))."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(samples, len(values)))
    return percentile_interval(values[idx].mean(axis=1), confidence)


def bootstrap_diff_interval(
    a: np.ndarray, b: np.ndarray, samples: int, confidence: float, seed: int
) -> tuple[float, float]:
    """Percentile interval of mean(a) - mean(b), each resampled independently (one default_rng(seed))."""
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, len(a), size=(samples, len(a)))
    ib = rng.integers(0, len(b), size=(samples, len(b)))
    return percentile_interval(a[ia].mean(axis=1) - b[ib].mean(axis=1), confidence)


def bootstrap_statistic_interval(
    n: int, statistic: Callable[[np.ndarray], float], samples: int, confidence: float, seed: int
) -> tuple[float, float] | None:
    """Percentile interval of `statistic(indices)` over `samples` resamples of 0..n-1 with replacement (numpy
    default_rng(seed), the draw bootstrap_mean_interval makes); resamples where the statistic is undefined
    (NaN, e.g. a correlation of a constant) are left out; None when every one is."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(samples, n))
    values = np.array([statistic(row) for row in idx], dtype=np.float64)
    values = values[np.isfinite(values)]
    return percentile_interval(values, confidence) if len(values) else None


def mcnemar_exact_p(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value: of the n = only_a + only_b discordant pairs, how unlikely a split at
    least this uneven is when each falls either way with probability 1/2 (binomial; 1.0 without any)."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2.0 * tail)


PAIRED_METHOD = "percentile bootstrap over prompts of the mean per-prompt difference"


def paired_difference(
    a: Sequence[float], b: Sequence[float], samples: int, confidence: float, seed: int
) -> dict[str, Any]:
    """mean(a_i - b_i) over prompts answered by both, its bootstrap interval (prompts resampled with
    replacement, numpy default_rng(seed)) and, for 0/1 outcomes, the discordant counts with McNemar's exact p."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.size == 0:
        raise ValueError(f"paired_difference: need two equal, non-empty series (got {x.size} and {y.size})")
    d = x - y
    out: dict[str, Any] = {
        "delta": float(d.mean()),
        "ci": list(bootstrap_mean_interval(d, samples, confidence, seed)),
        "confidence": confidence,
        "samples": samples,
        "seed": seed,
        "n": int(d.size),
        "method": PAIRED_METHOD,
    }
    if set(np.unique(np.concatenate([x, y]))) <= {0.0, 1.0}:
        only_a, only_b = int((d > 0).sum()), int((d < 0).sum())
        out |= {"only_a": only_a, "only_b": only_b, "mcnemar_p": mcnemar_exact_p(only_a, only_b)}
    return out


def t_coverage(t: float, dof: int) -> float:
    """P(|T| <= t) for Student's t with an integer `dof` >= 1: the finite sums of Abramowitz & Stegun 26.7.3-4
    in theta = atan(t / sqrt(dof)), exact for every integer dof (no special-function library needed)."""
    theta = math.atan(t / math.sqrt(dof))
    c2, term, total = math.cos(theta) ** 2, 1.0, 1.0
    if dof % 2 == 0:  # sin(theta) * (1 + 1/2 c^2 + 1*3/(2*4) c^4 + ... up to c^(dof-2))
        for k in range(2, dof, 2):
            term *= c2 * (k - 1) / k
            total += term
        return math.sin(theta) * total
    if dof == 1:
        return 2.0 * theta / math.pi
    for k in range(3, dof, 2):  # (2/pi)(theta + sin cos (1 + 2/3 c^2 + 2*4/(3*5) c^4 + ... up to c^(dof-3)))
        term *= c2 * (k - 1) / k
        total += term
    return 2.0 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)


def t_quantile(confidence: float, dof: int) -> float:
    """The two-sided Student t critical value: t with P(|T| <= t) = confidence (bisection on t_coverage)."""
    if not 0.0 < confidence < 1.0 or dof < 1:
        raise ValueError(f"t_quantile: need 0 < confidence < 1 and dof >= 1, got {confidence}, {dof}")
    lo, hi = 0.0, 1.0
    while t_coverage(hi, dof) < confidence:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if t_coverage(mid, dof) < confidence else (lo, mid)
    return (lo + hi) / 2.0


PAIRED_T_METHOD = "paired t interval over seeds: mean difference ± t(n-1) * sd / sqrt(n)"


def paired_t_interval(a: Sequence[float], b: Sequence[float], confidence: float) -> dict[str, Any]:
    """mean(a_i - b_i) over paired values (one per seed) with its t interval on n - 1 degrees of freedom; the
    interval is None below two pairs. With few pairs it is wide by design (t = 4.30 at n = 3, 95%)."""
    if len(a) != len(b):
        raise ValueError(f"paired_t_interval: need two equal series (got {len(a)} and {len(b)})")
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    stat = mean_sd(diffs)
    t = ci = None
    if stat["sd"] is not None:
        t = t_quantile(confidence, stat["n"] - 1)
        half = t * stat["sd"] / math.sqrt(stat["n"])
        ci = [stat["mean"] - half, stat["mean"] + half]
    dof = stat["n"] - 1
    return {**stat, "ci": ci, "t": t, "confidence": confidence, "dof": dof, "method": PAIRED_T_METHOD}
