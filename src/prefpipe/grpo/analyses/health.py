"""Health checks of a training run: flag unhealthy GRPO (and reward-training) signs and the step where each
first appears. The report renders the flags and the grpo_hypotheses stage lists those that fired; both read
the checks from here, with GRPO's metric names (grpo/metric_names.py), no torch needed.

Every check compares one logged metric per step with a threshold from `report.diagnostics`:

| check | metric | fires when |
|---|---|---|
| non-finite | any metric | a recorded value is NaN or infinite |
| KL above limit | kl_k3_mean (else k2) | value > kl_mean_max |
| KL spike | kl_k3_mean (else k2) | value > kl_spike_factor * max(median of the previous baseline_window steps, kl_spike_floor), with at least 3 earlier steps |
| log-ratio blow-up | max_abs_log_ratio | abs(value) > log_ratio_abs_max nats (k3 grows like exp of it) |
| zero-std groups | frac_reward_zero_std | value >= zero_std_frac_max (that share of groups gives no gradient) |
| grad norm above limit | grad_norm | value > grad_norm_max |
| grad norm spike | grad_norm | value > grad_norm_spike_factor * median of the previous baseline_window steps (>= 3 steps) |
| truncation | truncated_ratio | value > truncated_ratio_max (completions hit max_new_tokens without EOS) |
| entropy collapse | entropy | value < entropy_min |
| prompt loss | prompt_loss_share | value > prompt_loss_share_max (loss on prompt tokens: a wrong loss mask, H02) |
| environment loss | episode/env_trained_share (else env_loss_share) | value > env_loss_share_max (loss on tokens no policy segment of a multi-turn episode holds, H02; checked against the episodes' segments where logged) |
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from prefpipe.grpo.metric_names import (
    ENTROPY,
    ENV_LOSS_SHARE,
    EPISODE_ENV_TRAINED_SHARE,
    FRAC_REWARD_ZERO_STD,
    GRAD_NORM,
    KL_MEAN,
    MAX_ABS_LOG_RATIO,
    PROMPT_LOSS_SHARE,
    TRUNCATED_RATIO,
)
from prefpipe.settings.grpo import no_kl_term
from prefpipe.settings.report import Thresholds

MIN_HISTORY = 3


@dataclass(frozen=True)
class Flag:
    run: str
    check: str
    metric: str
    status: str  # "flagged" | "ok" | "not recorded"
    first_step: int | None = None
    value: float | None = None
    rule: str = ""
    n_steps: int = 0


def _steps(frame: pd.DataFrame) -> pd.Series:
    if "step" in frame and frame["step"].notna().any():
        return frame["step"]
    return pd.Series(range(len(frame)), index=frame.index, dtype=float)


def _first(
    frame: pd.DataFrame, metric: str, bad: Callable[[int, float, pd.Series], bool]
) -> tuple[int | None, float | None, int]:
    """(first bad step, its value, number of bad steps) scanning rows in step order."""
    if metric not in frame:
        return None, None, 0
    values = frame[metric]
    steps = _steps(frame)
    first_step, first_value, count = None, None, 0
    for position, (step, value) in enumerate(zip(steps, values, strict=True)):
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        if bad(position, float(value), values.iloc[:position]):
            count += 1
            if first_step is None:
                first_step, first_value = int(step), float(value)
    return first_step, first_value, count


def first_above(frame: pd.DataFrame, metric: str, limit: float) -> int | None:
    """The first step, in step order, whose value exceeds `limit`: the threshold checks' rule, for a table
    that shows where one would fire (the report's episode diagnostics)."""
    frame = frame.sort_values("step", kind="stable") if "step" in frame else frame
    return _first(frame, metric, lambda _i, v, _h: v > limit)[0]


def _median_before(history: pd.Series, window: int) -> float | None:
    recent = history.dropna().iloc[-window:]
    recent = recent[recent.map(math.isfinite)]
    return float(recent.median()) if len(recent) >= MIN_HISTORY else None


def _kl_metric(frame: pd.DataFrame) -> str:
    for name in (KL_MEAN.format(name="k3"), KL_MEAN.format(name="k2")):
        if name in frame and frame[name].notna().any():
            return name
    return KL_MEAN.format(name="k3")


def _recorded(frame: pd.DataFrame, metric: str) -> bool:
    return metric in frame and frame[metric].notna().any()


def _env_metric(frame: pd.DataFrame) -> str:
    """What trained against the episodes' segments where a multi-turn run logged it, else the loss mask's share."""
    return EPISODE_ENV_TRAINED_SHARE if _recorded(frame, EPISODE_ENV_TRAINED_SHARE) else ENV_LOSS_SHARE


Check = tuple[
    str, str, str, Callable[[int, float, pd.Series], bool]
]  # name, metric, rule text, bad(i, v, history)


def _checks(t: Thresholds, kl: str, env: str = ENV_LOSS_SHARE) -> list[Check]:
    """Every threshold check, in the order the report lists them (`kl`: the KL column the run recorded; `env`:
    the environment-loss column it recorded)."""
    w = t.baseline_window

    def kl_spike(_: int, value: float, history: pd.Series) -> bool:
        base = _median_before(history, w)
        return base is not None and value > t.kl_spike_factor * max(base, t.kl_spike_floor)

    def grad_spike(_: int, value: float, history: pd.Series) -> bool:
        base = _median_before(history, w)
        return base is not None and base > 0 and value > t.grad_norm_spike_factor * base

    return [
        ("KL above limit", kl, f"> {t.kl_mean_max:g}", lambda _i, v, _h: v > t.kl_mean_max),
        (
            "KL spike",
            kl,
            f"> {t.kl_spike_factor:g} x median of previous {w} steps (floor {t.kl_spike_floor:g})",
            kl_spike,
        ),
        (
            "log-ratio blow-up",
            MAX_ABS_LOG_RATIO,
            f"|x| > {t.log_ratio_abs_max:g} nats",
            lambda _i, v, _h: abs(v) > t.log_ratio_abs_max,
        ),
        (
            "zero-std groups",
            FRAC_REWARD_ZERO_STD,
            f">= {t.zero_std_frac_max:g}",
            lambda _i, v, _h: v >= t.zero_std_frac_max,
        ),
        (
            "grad norm above limit",
            GRAD_NORM,
            f"> {t.grad_norm_max:g}",
            lambda _i, v, _h: v > t.grad_norm_max,
        ),
        (
            "grad norm spike",
            GRAD_NORM,
            f"> {t.grad_norm_spike_factor:g} x median of previous {w} steps",
            grad_spike,
        ),
        (
            "truncation",
            TRUNCATED_RATIO,
            f"> {t.truncated_ratio_max:g}",
            lambda _i, v, _h: v > t.truncated_ratio_max,
        ),
        ("entropy collapse", ENTROPY, f"< {t.entropy_min:g}", lambda _i, v, _h: v < t.entropy_min),
        *_mask_checks(t, env),
    ]


def _mask_checks(t: Thresholds, env: str) -> list[Check]:
    """Loss on tokens the policy did not write (H02): the prompt's, or a multi-turn episode's environment's."""
    return [
        (
            "prompt loss",
            PROMPT_LOSS_SHARE,
            f"> {t.prompt_loss_share_max:g} of loss tokens in the prompt",
            lambda _i, v, _h: v > t.prompt_loss_share_max,
        ),
        (
            "environment loss",
            env,
            f"> {t.env_loss_share_max:g} of loss tokens written by the environment",
            lambda _i, v, _h: v > t.env_loss_share_max,
        ),
    ]


def check_run(
    run: str, frame: pd.DataFrame, t: Thresholds, only: tuple[str, ...] | None = None
) -> list[Flag]:
    """The checks (all, or those named in `only`) for one run's metrics (canonical columns)."""
    frame = frame.sort_values("step", kind="stable") if "step" in frame else frame
    flags = [nonfinite_flag(run, frame)] if only is None or "non-finite" in only else []
    for name, metric, rule, bad in _checks(t, _kl_metric(frame), _env_metric(frame)):
        if only is not None and name not in only:
            continue
        if not _recorded(frame, metric):
            flags.append(Flag(run, name, metric, "not recorded", rule=rule))
            continue
        step, value, count = _first(frame, metric, bad)
        status = "flagged" if step is not None else "ok"
        flags.append(Flag(run, name, metric, status, step, value, rule, count))
    return flags


def nonfinite_flag(run: str, frame: pd.DataFrame) -> Flag:
    """First step with a recorded NaN/inf in any metric (the `nonfinite` column written by frames.metrics)."""
    rule = "NaN or inf in a recorded metric"
    if "nonfinite" not in frame:
        return Flag(run, "non-finite", "any", "not recorded", rule=rule)
    bad = frame[frame["nonfinite"].fillna("").astype(str) != ""]
    if bad.empty:
        return Flag(run, "non-finite", "any", "ok", rule=rule)
    steps = _steps(frame).loc[bad.index]
    first = bad.index[0]
    return Flag(
        run,
        "non-finite",
        str(bad.loc[first, "nonfinite"]),
        "flagged",
        int(steps.loc[first]),
        None,
        rule,
        len(bad),
    )


# Reward-model training logs no KL estimators, entropy or completions: only these checks apply there.
REWARD_CHECKS = ("non-finite", "grad norm above limit", "grad norm spike")


def diagnose(
    metrics: pd.DataFrame, key: str, thresholds: Thresholds, only: tuple[str, ...] | None = None
) -> list[Flag]:
    """Flags for every run (key = "run") or variant (key = "variant") in a metrics table."""
    if metrics.empty or key not in metrics:
        return []
    return [
        flag
        for name, frame in metrics.groupby(key, sort=True)
        for flag in check_run(str(name), frame, thresholds, only)
    ]


KL_CHECKS = ("KL above limit", "KL spike", "log-ratio blow-up")


def explain_unrecorded(flags: list[Flag], betas: dict[str, float | None]) -> list[Flag]:
    """Without a KL term (settings.grpo.no_kl_term) KL metrics are absent by design, not missing."""
    out = []
    for flag in flags:
        if flag.status == "not recorded" and flag.check in KL_CHECKS and no_kl_term(betas.get(flag.run)):
            flag = dataclasses.replace(flag, status="n/a (beta = 0, no reference)")
        out.append(flag)
    return out
