"""The sampler/trainer mismatch: an engine samples with its own kernels (and precision), so its log-probs of the
tokens it drew differ from the trainer's. The gradient is an expectation under the trainer's policy pi_theta but
the samples come from the engine's pi_engine; importance sampling weights each token's objective by a detached
weight built from rho_t = pi_theta_old / pi_engine, so what the engine over-sampled counts less
(`grpo.rollout.importance_correction`, C = `importance_cap`; TRL's vllm_importance_sampling_mode, verl's rollout
correction):
  none               w = 1: trains as if the engine were the trainer
  token_truncate     w_t = min(rho_t, C)                                    (TIS, TRL's token default)
  token_mask         w_t = rho_t if rho_t <= C else 0                       (token-level masked IS)
  sequence_truncate  w = min(prod_t rho_t, C) on every token of the row     (sequence-level TIS)
  sequence_mask      w = prod_t rho_t if it is <= C else 0: a sequence whose ratio exceeds C drops out
                     whole (sequence-level MIS)
The product runs over the row's policy tokens (the ratio mask): in a multi-turn episode the environment's tokens,
which the engine did not sample, never enter it, and off those tokens w_t = 1.

pi_theta_old is the trainer's log-prob at the rollout weights: the stored old log-probs when num_iterations > 1,
else the current pass's log-probs detached (the same weights on the first pass).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from prefpipe.common.registry import registrar
from prefpipe.grpo.data_parallel import DataParallel

# grpo.rollout.importance_correction -> f(log rho (0 off the ratio mask), C): (B, T) weights (the caller sets 1
# off the ratio mask), or None (w = 1)
Correction = Callable[[torch.Tensor, float], torch.Tensor | None]
CORRECTIONS: dict[str, Correction] = {}
register_correction = registrar(CORRECTIONS, "importance correction")
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


@register_correction("none")
def _none(log_rho: torch.Tensor, cap: float) -> None:
    return None


@register_correction("token_truncate")
def _token_truncate(log_rho: torch.Tensor, cap: float) -> torch.Tensor:
    return torch.exp(log_rho).clamp(max=cap)


@register_correction("token_mask")
def _token_mask(log_rho: torch.Tensor, cap: float) -> torch.Tensor:
    rho = torch.exp(log_rho)
    return torch.where(rho > cap, torch.zeros_like(rho), rho)


def _sequence_rho(log_rho: torch.Tensor) -> torch.Tensor:
    """prod_t rho_t over each row's ratio-mask tokens (log rho is 0 off them), on every column of the row."""
    return torch.exp(log_rho.sum(-1, keepdim=True)).expand_as(log_rho)


@register_correction("sequence_truncate")
def _sequence_truncate(log_rho: torch.Tensor, cap: float) -> torch.Tensor:
    return _sequence_rho(log_rho).clamp(max=cap)


@register_correction("sequence_mask")
def _sequence_mask(log_rho: torch.Tensor, cap: float) -> torch.Tensor:
    rho = _sequence_rho(log_rho)
    return torch.where(rho > cap, torch.zeros_like(rho), rho)


def importance_weights(
    old_logp: torch.Tensor, sampler_logp: torch.Tensor, ratio_mask: torch.Tensor, mode: str, cap: float
) -> torch.Tensor | None:
    """Per-token weights of the objective (None = no correction) from rho_t over `ratio_mask` (the policy's
    tokens); 1 off it (never exp of padding or of an environment token)."""
    if mode not in CORRECTIONS:
        raise ValueError(
            f"grpo.rollout.importance_correction must be one of {sorted(CORRECTIONS)}, got {mode!r}"
        )
    on = ratio_mask.bool()
    log_rho = torch.where(
        on, old_logp.detach().float() - sampler_logp.float(), torch.zeros_like(old_logp, dtype=torch.float32)
    )
    w = CORRECTIONS[mode](log_rho, cap)
    return None if w is None else torch.where(on, w, torch.ones_like(w))


def gap_metrics(
    trainer_logp: torch.Tensor,
    sampler_logp: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    cap: float,
    dp: DataParallel,
) -> dict[str, float]:
    """|log pi_trainer - log pi_engine| over the policy's loss tokens `mask` (mean, max), the mean weight the
    correction `mode` gives them (`none`: what token_truncate would give) and the share of them whose weight the
    cap changed (capped, or masked to 0), over every process's rows."""
    on = mask.bool()
    mode = "token_truncate" if mode == "none" else mode
    gap = torch.where(on, (trainer_logp - sampler_logp.to(trainer_logp.dtype)).abs(), 0.0)
    w = importance_weights(trainer_logp, sampler_logp, mask, mode, cap)
    raw = importance_weights(trainer_logp, sampler_logp, mask, mode, math.inf)
    sums = dp.sum(torch.stack([gap.sum(), (w * on).sum(), ((w != raw) & on).sum(), on.sum()]).double())
    tokens = float(sums[3].clamp(min=1.0))
    return {
        GAP_MEAN: float(sums[0]) / tokens,
        GAP_MAX: float(dp.max(gap.max().detach().cpu() if gap.numel() else torch.tensor(0.0))),
        IS_WEIGHT_MEAN: float(sums[1]) / tokens,
        IS_TRUNCATED: float(sums[2]) / tokens,
    }
