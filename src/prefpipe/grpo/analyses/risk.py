"""Whether a risk-averse reward's penalty can do anything: GRPO's advantages are group-relative (each reward
minus its prompt group's mean), so a penalty lambda * sd(s) that is the same for every completion of a prompt
cancels out exactly, whatever its size. What reaches the policy is the penalty's spread ACROSS the completions
of one prompt, set against the posterior-mean score's spread there.

Per step, for each reward_model reward with risk_aversion > 0 (both terms per completion, in score units before
any transform, as rewards.RiskParts keeps them):

    penalty_mean      mean over completions of lambda * sd(s)
    penalty_group_sd  mean over prompt groups of the within-group sample sd (n - 1) of the penalty
    score_group_sd    the same for the posterior-mean score
    spread_ratio      penalty_group_sd / score_group_sd (None when the score does not vary within any group)

spread_ratio ~ 0: the penalty is a constant shift (no effect on the update); ~ 1 or more: it reorders the
completions of a prompt as much as the score itself does. The run summary keeps the means over all steps, over
the first and over the last hacking.WINDOW steps (base-like vs trained completions).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from prefpipe.grpo.analyses.hacking import WINDOW
from prefpipe.grpo.metric_names import (
    RISK_PENALTY_GROUP_SD,
    RISK_PENALTY_MEAN,
    RISK_SCORE_GROUP_SD,
    RISK_SPREAD_RATIO,
)
from prefpipe.grpo.rewards import RewardModelReward, WeightedReward

DEFINITION = (
    "per step: penalty_mean = mean of lambda * sd(s); penalty_group_sd / score_group_sd = mean over prompt groups "
    "of the within-group sample sd of the penalty / of the posterior-mean score; spread_ratio = their ratio "
    "(0: a constant shift, cancelled by group-relative advantages)"
)
_KEYS = {
    "penalty_mean": RISK_PENALTY_MEAN,
    "penalty_group_sd": RISK_PENALTY_GROUP_SD,
    "score_group_sd": RISK_SCORE_GROUP_SD,
}


def _mean_group_sd(values: torch.Tensor, group_size: int) -> float:
    return float(values.float().view(-1, group_size).std(dim=1).mean())


def risk_metrics(name: str, score: torch.Tensor, penalty: torch.Tensor, group_size: int) -> dict[str, Any]:
    """The four per-step figures of one risk-averse reward (laid out prompt-major, groups of `group_size`)."""
    penalty_sd, score_sd = _mean_group_sd(penalty, group_size), _mean_group_sd(score, group_size)
    return {
        RISK_PENALTY_MEAN.format(name=name): float(penalty.float().mean()),
        RISK_PENALTY_GROUP_SD.format(name=name): penalty_sd,
        RISK_SCORE_GROUP_SD.format(name=name): score_sd,
        RISK_SPREAD_RATIO.format(name=name): penalty_sd / score_sd if score_sd > 0 else None,
    }


def step_metrics(
    rewards: list[WeightedReward], group_size: int, gather: Callable[[torch.Tensor], torch.Tensor]
) -> dict[str, Any]:
    """risk_metrics of every risk-averse reward-model reward of the step just scored (`gather`: this process's
    rows -> the whole batch's: DataParallel.gather_rows)."""
    out: dict[str, Any] = {}
    for reward in rewards:
        parts = reward.fn.last_risk if isinstance(reward.fn, RewardModelReward) else None
        if parts is not None:
            score, penalty = gather(parts.score.cpu()), gather(parts.penalty.cpu())
            out.update(risk_metrics(reward.name, score, penalty, group_size))
    return out


def _window_means(rows: list[dict[str, Any]], name: str) -> dict[str, float | None]:
    means = {}
    for label, key in _KEYS.items():
        values = [float(r[key.format(name=name)]) for r in rows]
        means[label] = sum(values) / len(values)
    score_sd = means["score_group_sd"]
    means["spread_ratio"] = means["penalty_group_sd"] / score_sd if score_sd > 0 else None
    return means


def risk_summary(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """{reward name: {all_steps, first_steps, last_steps (each the means of the figures and the ratio of the
    two spreads' means), window, definition}}; None when the run has no risk-averse reward."""
    head, tail = RISK_PENALTY_MEAN.split("{name}")
    logged = {k[len(head) : -len(tail)] for r in rows for k in r if k.startswith(head) and k.endswith(tail)}
    names = [n for n in sorted(logged) if all(RISK_PENALTY_MEAN.format(name=n) in r for r in rows)]
    if not names:
        return None
    window = min(WINDOW, len(rows))
    return {
        name: {
            "all_steps": _window_means(rows, name),
            "first_steps": _window_means(rows[:window], name),
            "last_steps": _window_means(rows[-window:], name),
            "window": window,
            "definition": DEFINITION,
        }
        for name in names
    }
