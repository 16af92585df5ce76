"""Intervals and number formatting for the report (the only place numbers become text).

95% intervals: read from a summary where the stage recorded one (`*_ci95`, `ci95`); else a Wilson score
interval from a count and n (accuracies), or estimate ± 1.96 standard errors where only a standard error was
recorded (section means and the overall score, which are means of several accuracies; a zero standard error,
at 0% or 100%, falls back to Wilson from the section's n).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from prefpipe.common.stats import Z95, wilson_interval

NA = "–"


def as_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def finite(value: Any) -> bool:
    v = as_float(value)
    return v is not None and math.isfinite(v)


def wilson(successes: float, n: float) -> tuple[float, float] | None:
    """95% Wilson score interval for successes out of n (None without pairs)."""
    return wilson_interval(int(successes), int(n)) if n and n > 0 else None


def normal(estimate: float, stderr: float) -> tuple[float, float]:
    """estimate ± 1.96 standard errors, clipped to [0, 1] (accuracies)."""
    return max(0.0, estimate - Z95 * stderr), min(1.0, estimate + Z95 * stderr)


def interval(
    block: dict[str, Any], value_key: str, stderr_key: str | None = None
) -> tuple[float, float] | None:
    """The 95% interval of block[value_key]: recorded, else Wilson from n, else ± 1.96 recorded stderr."""
    for key in (f"{value_key}_ci95", "ci95"):
        ci = block.get(key)
        if isinstance(ci, list | tuple) and len(ci) == 2 and all(finite(c) for c in ci):
            return float(ci[0]), float(ci[1])
    value = as_float(block.get(value_key))
    if value is None:
        return None
    se = as_float(block.get(stderr_key)) if stderr_key else None
    n = as_float(block.get("n"))
    if se is not None and math.isfinite(se) and (se > 0 or not n):
        return normal(value, se)
    return wilson(value * n, n) if n else None  # a zero standard error (0% or 100%) says nothing: Wilson


def diff_interval(a: float, a_ci: Sequence[float], b: float, b_ci: Sequence[float]) -> tuple[float, float]:
    """95% interval of a - b for independent estimates, each half-width taken as 1.96 standard errors."""
    se_a, se_b = (a_ci[1] - a_ci[0]) / (2 * Z95), (b_ci[1] - b_ci[0]) / (2 * Z95)
    half = Z95 * math.hypot(se_a, se_b)
    return a - b - half, a - b + half


def pct(value: Any, ci: Sequence[float] | None = None) -> str:
    """0.785, (0.75, 0.81) -> '78.5% [75.0, 81.0]'."""
    if not finite(value):
        return NA
    text = f"{100 * float(value):.1f}%"
    return text + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else "")


def pts(delta: float, ci: Sequence[float] | None = None) -> str:
    """A difference of accuracies in percentage points: '+4.5 pts [1.2, 7.8]'."""
    text = f"{100 * delta:+.1f} pts"
    return text + (f" [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]" if ci else "")


def corr(value: Any, ci: Sequence[float] | None = None) -> str:
    """A correlation coefficient with its interval: 0.4512, (0.40, 0.50) -> '+0.45 [+0.40, +0.50]'."""
    if not finite(value):
        return NA
    text = f"{float(value):+.2f}"
    return text + (f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "")


def num(value: Any, digits: int = 4) -> str:
    v = as_float(value)
    if v is None or math.isnan(v):
        return NA
    if math.isinf(v) or (v.is_integer() and abs(v) < 1e12):
        return str(int(v)) if math.isfinite(v) else str(v)
    if abs(v) >= 1e6 or abs(v) < 1e-3:
        return f"{v:.{digits - 2}e}"
    return f"{v:.{digits}g}"
