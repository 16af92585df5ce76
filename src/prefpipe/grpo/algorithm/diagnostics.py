"""Per-step numbers that make GRPO failures visible (each names the failure it makes visible):

- rewards: mean/std overall and per function; frac_reward_zero_std (groups with no learning signal)
- advantages: mean |A| and max |A| (division by a tiny std blows these up)
- KL: k1, k2, k3 mean and max side by side, and the max per-token |log pi - log pi_ref| (k3 explodes like
  exp of it: the "KL 1e5" symptom)
- clipping, entropy, grad norm before clipping, completion lengths, truncation of completions and prompts
- a token-boundary audit: for sample completions, which tokens carry loss (prompt, padding and post-EOS
  tokens must not)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from prefpipe.grpo.kl import kl_from_log_ratio, masked_log_ratio
from prefpipe.grpo.metric_names import (
    ADV_ABS_MAX,
    ADV_ABS_MEAN,
    KL_MAX,
    KL_MEAN,
    LENGTH_MAX,
    LENGTH_MEAN,
    LENGTH_MIN,
    MAX_ABS_LOG_RATIO,
    PROMPT_TRUNCATION_RATE,
    REWARD_MEAN,
    REWARD_PART_FRAC_MIXED,
    REWARD_PART_MEAN,
    REWARD_PART_STD,
    REWARD_STD,
    TRUNCATED_RATIO,
    VERIFIER_ACCURACY,
    VERIFIER_SCORE_MEAN,
    VERIFIER_SCORE_STD,
)
from prefpipe.grpo.rollout.completions import Rollout

# a collective over data-parallel processes (DataParallel.sum / .max / .gather_rows); the identity alone
Reduce = Callable[[torch.Tensor], torch.Tensor]


def reward_metrics(total: torch.Tensor, parts: dict[str, torch.Tensor], group_size: int) -> dict[str, float]:
    out = {REWARD_MEAN: float(total.mean()), REWARD_STD: float(total.std()) if total.numel() > 1 else 0.0}
    for name, values in parts.items():
        out[REWARD_PART_MEAN.format(name=name)] = float(values.mean())
        out[REWARD_PART_STD.format(name=name)] = float(values.std()) if values.numel() > 1 else 0.0
        groups = values.reshape(-1, group_size)
        mixed = (groups != groups[:, :1]).any(dim=1)
        out[REWARD_PART_FRAC_MIXED.format(name=name)] = float(mixed.float().mean())
    return out


def verifier_metrics(scores: torch.Tensor) -> dict[str, float]:
    scores = scores.float()
    return {
        VERIFIER_ACCURACY: float((scores >= 1.0).float().mean()),
        VERIFIER_SCORE_MEAN: float(scores.mean()),
        VERIFIER_SCORE_STD: float(scores.std()) if scores.numel() > 1 else 0.0,
    }


def advantage_metrics(advantages: torch.Tensor) -> dict[str, float]:
    return {ADV_ABS_MEAN: float(advantages.abs().mean()), ADV_ABS_MAX: float(advantages.abs().max())}


def _same(values: torch.Tensor) -> torch.Tensor:
    return values


def kl_metrics(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    reduce_sum: Reduce = _same,
    reduce_max: Reduce = _same,
) -> dict[str, float]:
    """Token-level mean and max of each estimator over loss tokens, plus the largest |log-ratio|; under data
    parallelism `reduce_sum` / `reduce_max` (DataParallel.sum / .max) make them over every process's tokens."""
    log_ratio = masked_log_ratio(logp.detach(), ref_logp, mask)
    on = mask.bool()
    m = mask.float()
    names = ("k1", "k2", "k3")
    per_estimator = [kl_from_log_ratio(log_ratio, name).float() for name in names]
    totals = reduce_sum(torch.stack([*[(v * m).sum() for v in per_estimator], m.sum()]).double())
    empty = torch.tensor(float("-inf"))
    maxes = reduce_max(
        torch.stack([v[on].max() if on.any() else empty for v in [log_ratio.abs().float(), *per_estimator]])
    )
    count = float(totals[-1].clamp(min=1.0))
    out: dict[str, float] = {MAX_ABS_LOG_RATIO: _finite_or_zero(maxes[0])}
    for i, name in enumerate(names):
        out[KL_MEAN.format(name=name)] = float(totals[i]) / count
        out[KL_MAX.format(name=name)] = _finite_or_zero(maxes[i + 1])
    return out


def _finite_or_zero(value: torch.Tensor) -> float:
    """A max over no loss tokens (every process empty) reads 0."""
    return float(value) if torch.isfinite(value) else 0.0


def length_metrics(rollout: Rollout, gather: Reduce = _same) -> dict[str, float]:
    """Completion lengths and truncation over the step's rows; under data parallelism `gather`
    (DataParallel.gather_rows) makes them over every process's rows, not this process's share."""
    lengths = gather(rollout.lengths.float())
    return {
        LENGTH_MEAN: float(lengths.mean()),
        LENGTH_MIN: float(lengths.min()),
        LENGTH_MAX: float(lengths.max()),
        TRUNCATED_RATIO: float(gather(rollout.truncated.float()).mean()),
        PROMPT_TRUNCATION_RATE: float(gather(rollout.prompt_truncated.float()).mean()),
    }


def token_roles(rollout: Rollout, row: int) -> list[str]:
    """Role of every position of a rollout row: pad | prompt | trained | post_eos (| env for env tokens)."""
    roles = ["prompt" if int(m) else "pad" for m in rollout.prompt_mask[row]]
    for in_completion, env in zip(rollout.completion_mask[row], rollout.env_mask[row], strict=True):
        if not int(in_completion):
            roles.append("post_eos")
        else:
            roles.append("trained" if int(env) else "env")
    return roles


def token_audit(tokenizer, rollout: Rollout, row: int) -> dict[str, Any]:
    """Which tokens of one sample carry loss: token strings with roles, and the trained span marked [[...]]."""
    ids = rollout.input_ids[row].tolist()
    tokens = [tokenizer.decode([i], skip_special_tokens=False) for i in ids]  # readable, one per position
    roles = token_roles(rollout, row)
    kept = [(t, r) for t, r in zip(tokens, roles, strict=True) if r != "pad"]
    marked = "".join(f"[[{t}]]" if r == "trained" else t for t, r in kept)
    return {
        "tokens": [t for t, _ in kept],
        "roles": [r for _, r in kept],
        "n_trained": roles.count("trained"),
        "n_prompt": roles.count("prompt"),
        "n_pad": roles.count("pad"),
        "n_post_eos": roles.count("post_eos"),
        "marked": marked,
    }
