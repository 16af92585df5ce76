"""Reward over-optimisation (Gao et al. 2023): the reward model's score (the proxy the policy is paid by) against
the verifier's accuracy (the un-optimised "gold" signal, computed on every training batch whose prompts have
answers) step by step, and one number for how far they parted.

The final gap, in standard deviations of each signal's per-completion spread:

    rm_gain_sd       = (mean rm score, last W steps - mean rm score, first W steps) / mean over steps of the
                       per-batch std of the rm score
    verifier_gain_sd = (mean verifier accuracy, last W - first W) / mean over steps of the per-batch std of the
                       verifier score
    gap              = rm_gain_sd - verifier_gain_sd

gap > 0: the reward model's score rose more (in its own spread) than the verifier's accuracy: the policy learnt
what the reward model pays for beyond what makes answers right (reward hacking); gap ~ 0: the two moved together;
gap < 0: the verifier improved more than the reward model saw. Standardising makes BT rewards, GPM preference
scores and risk-adjusted Bayesian scores comparable. W = WINDOW steps (fewer when the run is shorter).

Per step, the same gains as series (signal at step t minus its first-W mean, over the same scale), with the
mean completion length and the truncated share beside them: where the reward model's gain runs ahead of the
verifier's while answers grow and get cut, the policy is being paid for length.
"""

from __future__ import annotations

from typing import Any

from prefpipe.grpo.metric_names import (
    LENGTH_MEAN,
    REWARD_HACKING,  # noqa: F401 (the summary key of this block, read by the report)
    REWARD_PART_MEAN,
    REWARD_PART_STD,
    TRUNCATED_RATIO,
    VERIFIER_ACCURACY,
    VERIFIER_SCORE_STD,
)

WINDOW = 5
RM_SOURCE, VERIFIER_SOURCES = "reward_model", ("verifier", "exact_match", "token_f1")
DEFINITION = (
    "gap = rm_gain_sd - verifier_gain_sd; each gain = mean of the last W steps minus mean of the first W steps, "
    "divided by the mean per-batch std of that signal (rm: the reward-model reward part; verifier: its score); "
    "> 0 means the reward-model score rose more than verifier accuracy (over-optimisation)"
)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _gain(series: list[float], spread: list[float], window: int) -> tuple[float, float, float | None]:
    first, last = _mean(series[:window]), _mean(series[-window:])
    scale = _mean(spread)
    gain = last - first
    return first, last, (gain / scale if scale else None)


def _gain_series(series: list[float], spread: list[float], window: int) -> list[float] | None:
    """(value at each step - mean of the first `window` steps) / mean per-batch std; None without spread."""
    first, scale = _mean(series[:window]), _mean(spread)
    return [(v - first) / scale for v in series] if scale else None


FIXED_MEAN_NOTE = (
    "the reward-model part is a pairwise head's group-relative preference (opponent: group): its batch mean is "
    "fixed by construction (0; 0.5 under sigmoid), so it cannot show a gain; the reward model's win rate of the "
    "trained over the base policy on held-out prompts (eval_policy) measures what it paid for"
)


def mean_fixed_by_construction(spec: dict[str, Any], scalar_reward: bool) -> bool:
    """Whether a reward-model reward's batch mean is the same at every step whatever the policy does: a pairwise
    head's r_i = mean_j s(y_i > y_j) over the group, with s skew-symmetric, sums to 0 over each group (and
    sigmoid(s) + sigmoid(-s) = 1 makes it 0.5 under the sigmoid); a scalar head's r(y) is not relative."""
    return spec.get("opponent") == "group" and not scalar_reward


def without_rm_gain(block: dict[str, Any]) -> dict[str, Any]:
    """`block` with the reward-model gain (and so the gap) left out and the reason given (FIXED_MEAN_NOTE)."""
    return {
        **block,
        "rm_gain_sd": None,
        "rm_gain_sd_by_step": None,
        "gap": None,
        "rm_gain_note": FIXED_MEAN_NOTE,
    }


def overoptimisation(
    rows: list[dict[str, Any]], specs: list[dict[str, Any]], scalar_reward: bool = True
) -> dict[str, Any] | None:
    """The per-step curves and the final gap; None when the run has no reward-model reward or no verifier
    signal (prompts without answers). `scalar_reward`: the reward model's head gives r(x, y) (BT); with a
    pairwise head and group opponents the reward-model gain is left out (FIXED_MEAN_NOTE)."""
    rm = [s for s in specs if s["type"] == RM_SOURCE]
    if not rm or not rows or any(VERIFIER_ACCURACY not in r for r in rows):
        return None
    part = rm[0]["name"] or rm[0]["type"]
    mean_key, std_key = REWARD_PART_MEAN.format(name=part), REWARD_PART_STD.format(name=part)
    steps = [int(r["step"]) for r in rows]
    rm_score = [float(r[mean_key]) for r in rows]
    accuracy = [float(r[VERIFIER_ACCURACY]) for r in rows]
    window = min(WINDOW, len(rows))
    rm_spread = [float(r[std_key]) for r in rows]
    v_spread = [float(r[VERIFIER_SCORE_STD]) for r in rows]
    rm_first, rm_last, rm_gain_sd = _gain(rm_score, rm_spread, window)
    v_first, v_last, v_gain_sd = _gain(accuracy, v_spread, window)
    gap = None if rm_gain_sd is None or v_gain_sd is None else rm_gain_sd - v_gain_sd
    optimised = any(s["type"] in VERIFIER_SOURCES and float(s["weight"]) != 0.0 for s in specs)
    block = {
        "rm_part": part,
        "verifier_optimised": optimised,
        "steps": steps,
        "rm_score": rm_score,
        "verifier_accuracy": accuracy,
        "rm_gain_sd_by_step": _gain_series(rm_score, rm_spread, window),
        "verifier_gain_sd_by_step": _gain_series(accuracy, v_spread, window),
        "completion_length": [float(r[LENGTH_MEAN]) for r in rows],
        "truncated_ratio": [float(r[TRUNCATED_RATIO]) for r in rows],
        "window": window,
        "rm_score_first": rm_first,
        "rm_score_last": rm_last,
        "verifier_accuracy_first": v_first,
        "verifier_accuracy_last": v_last,
        "rm_gain_sd": rm_gain_sd,
        "verifier_gain_sd": v_gain_sd,
        "gap": gap,
        "definition": DEFINITION,
        "rm_gain_note": None,
    }
    return without_rm_gain(block) if mean_fixed_by_construction(rm[0], scalar_reward) else block
