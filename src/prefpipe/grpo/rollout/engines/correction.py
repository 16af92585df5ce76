"""The sampler/trainer mismatch: an engine samples with its own kernels (and precision), so its log-probs of the
tokens it drew differ from the trainer's. The gradient is an expectation under the trainer's policy pi_theta but
the samples come from the engine's pi_engine; truncated importance sampling (TIS, TRL's default correction for
vLLM rollouts) weights each token's surrogate by w = min(pi_theta_old / pi_engine, C), detached, so a token the
engine over-sampled counts less and no weight exceeds C. `none` trains as if the engine were the trainer.

pi_theta_old is the trainer's log-prob at the rollout weights: the stored old log-probs when num_iterations > 1,
else the current pass's log-probs detached (the same weights on the first pass).
"""

from __future__ import annotations

import torch

from prefpipe.grpo.data_parallel import DataParallel

CORRECTIONS = ("none", "token_truncate")
GAP_MEAN, GAP_MAX = "engine_logprob_gap_mean", "engine_logprob_gap_max"
IS_WEIGHT_MEAN, IS_TRUNCATED = "is_weight_mean", "is_truncated_ratio"


def span_sampler_logprobs(mb, sampler: torch.Tensor, trainer: torch.Tensor) -> torch.Tensor:
    """The engine's log-probs in the micro-batch's scored layout (k, n_scored): completion token j of row r
    at column n_scored - n_completion + j; prompt positions (mask_mode with_prompt) take the trainer's own
    value, so their weight is 1."""
    out = trainer.detach().clone()
    c = mb.span.n_completion
    if c:
        out[:, -c:] = sampler[mb.rows, :c].to(out.dtype)
    return out


def importance_weights(
    old_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor, mode: str, cap: float
) -> torch.Tensor | None:
    """Per-token weights of the surrogate (None = no correction); 1 off the mask (never exp of padding)."""
    if mode == "none":
        return None
    if mode != "token_truncate":
        raise ValueError(f"grpo.rollout.importance_correction must be one of {CORRECTIONS}, got {mode!r}")
    log_ratio = torch.where(mask.bool(), old_logp.detach() - sampler_logp, torch.zeros_like(old_logp))
    return torch.exp(log_ratio).clamp(max=cap)


def gap_metrics(
    trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor, cap: float, dp: DataParallel
) -> dict[str, float]:
    """|log pi_trainer - log pi_engine| over loss tokens (mean, max), the mean untruncated-then-capped weight
    and the share of tokens the cap bites, over every process's rows."""
    on = mask.bool()
    gap = torch.where(on, (trainer_logp - sampler_logp.to(trainer_logp.dtype)).abs(), 0.0)
    raw = torch.exp(torch.where(on, trainer_logp - sampler_logp.to(trainer_logp.dtype), 0.0))
    sums = dp.sum(
        torch.stack([gap.sum(), (raw.clamp(max=cap) * on).sum(), ((raw > cap) & on).sum(), on.sum()]).double()
    )
    tokens = float(sums[3].clamp(min=1.0))
    return {
        GAP_MEAN: float(sums[0]) / tokens,
        GAP_MAX: float(dp.max(gap.max().detach().cpu() if gap.numel() else torch.tensor(0.0))),
        IS_WEIGHT_MEAN: float(sums[1]) / tokens,
        IS_TRUNCATED: float(sums[2]) / tokens,
    }
