"""The GRPO loss: the policy objective per token (grpo.policy_objective, grpo/algorithm/objectives.py), an
optional KL penalty, then one of four ways to turn per-token losses into a scalar.

Aggregations (B = sequences, T_i = loss tokens of sequence i; with gradient accumulation the normalisers
cover the WHOLE accumulated batch, so the per-micro-batch losses simply add up):
  grpo     sum_i (sum_t l_it / T_i) / B            (original GRPO; favours short sequences per token)
  bnpo     sum_it l_it / sum_it 1 on the micro-batch, averaged over micro-batches
  dr_grpo  sum_it l_it / (B * max_completion_length)   (Dr. GRPO: constant normaliser, no length bias)
  dapo     sum_it l_it / active tokens of the accumulated batch (TRL default)
With one micro-batch these are exactly the textbook definitions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from prefpipe.common.registry import registrar
from prefpipe.grpo.algorithm.objectives import ObjectiveInputs, objective_loss
from prefpipe.grpo.kl import per_token_kl
from prefpipe.settings.grpo import no_kl_term


@dataclass
class BatchNorms:
    """Normalisers that span the whole accumulated batch (see module docstring)."""

    num_sequences: int
    num_tokens: int
    num_micro_batches: int
    max_completion_length: int


Aggregation = Callable[[torch.Tensor, torch.Tensor, BatchNorms], torch.Tensor]
# grpo.loss_type -> f(per-token loss * mask, float mask, norms): the micro-batch's share of the batch loss
AGGREGATORS: dict[str, Aggregation] = {}


# `@register_aggregation("name")`: `grpo.runs.<run>.loss_type: name` aggregates with the function (the trainer and
# the one-step inspector alike); the config checks refuse a name not registered here.
register_aggregation = registrar(AGGREGATORS, "loss aggregation")


@register_aggregation("grpo")
def _grpo(masked: torch.Tensor, m: torch.Tensor, norms: BatchNorms) -> torch.Tensor:
    per_seq = masked.sum(-1) / m.sum(-1).clamp(min=1.0)
    return per_seq.sum() / norms.num_sequences


@register_aggregation("bnpo")
def _bnpo(masked: torch.Tensor, m: torch.Tensor, norms: BatchNorms) -> torch.Tensor:
    return masked.sum() / m.sum().clamp(min=1.0) / norms.num_micro_batches


@register_aggregation("dr_grpo")
def _dr_grpo(masked: torch.Tensor, m: torch.Tensor, norms: BatchNorms) -> torch.Tensor:
    return masked.sum() / (norms.num_sequences * norms.max_completion_length)


@register_aggregation("dapo")
def _dapo(masked: torch.Tensor, m: torch.Tensor, norms: BatchNorms) -> torch.Tensor:
    return masked.sum() / max(norms.num_tokens, 1)


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, mode: str, norms: BatchNorms) -> torch.Tensor:
    """Scalar loss of one micro-batch; summed over micro-batches it gives the batch loss (see docstring)."""
    if mode not in AGGREGATORS:
        raise ValueError(f"grpo.loss_type must be one of {sorted(AGGREGATORS)}, got {mode!r}")
    m = mask.float()
    return AGGREGATORS[mode](per_token * m, m, norms)


@dataclass
class TokenLoss:
    """A micro-batch's loss per token, before aggregation: l_t = w_t * surrogate_t + beta * KL_t."""

    per_token: torch.Tensor  # l_t (gradient flows)
    surrogate: torch.Tensor  # w_t * surrogate_t
    kl: torch.Tensor | None  # KL_t (before beta); None when beta == 0
    clip: dict[str, torch.Tensor]  # ratio, low, high (objectives.py)
    sampler_weights: torch.Tensor | None  # w_t; None: the policy sampled itself (w_t = 1)


@dataclass
class LossOutput:
    loss: torch.Tensor  # scalar with gradient
    policy_loss: torch.Tensor  # detached aggregated surrogate alone
    kl_loss: torch.Tensor | None  # detached aggregated KL term (before beta); None when beta == 0
    clip_low: torch.Tensor  # (B, T) bool
    clip_high: torch.Tensor  # (B, T) bool
    ratio: torch.Tensor  # (B, T) detached


def per_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    beta: float,
    ref_logp: torch.Tensor | None,
    kl_estimator: str,
    log_ratio_clamp: float | None,
    objective: str,
    ratio_mask: torch.Tensor | None = None,
    sampler_weights: torch.Tensor | None = None,
) -> TokenLoss:
    """The policy objective + beta * per-token KL; ref_logp is required iff beta != 0. `ratio_mask`: the tokens
    of a sequence-level ratio (the policy's own; None: the loss mask). `sampler_weights` (detached, per token)
    weight the objective for a separate sampling engine's mismatch (grpo/rollout/engines/correction.py; the KL
    term is not weighted)."""
    inputs = ObjectiveInputs(
        logp,
        old_logp,
        advantages,
        mask,
        mask if ratio_mask is None else ratio_mask,
        eps_low,
        eps_high,
        log_ratio_clamp,
    )
    surrogate, clip = objective_loss(objective, inputs)
    if sampler_weights is not None:
        surrogate = surrogate * sampler_weights
    per_token, kl = surrogate, None
    if not no_kl_term(beta):
        if ref_logp is None:
            raise ValueError("grpo.beta != 0 needs reference log-probs")
        kl = per_token_kl(logp, ref_logp, mask, kl_estimator, log_ratio_clamp)
        per_token = per_token + beta * kl
    return TokenLoss(per_token, surrogate, kl, clip, sampler_weights)


def aggregate_loss(terms: TokenLoss, mask: torch.Tensor, loss_type: str, norms: BatchNorms) -> LossOutput:
    """The micro-batch's loss (with gradient) and its detached parts, each aggregated by `loss_type`."""
    return LossOutput(
        loss=aggregate(terms.per_token, mask, loss_type, norms),
        policy_loss=aggregate(terms.surrogate, mask, loss_type, norms).detach(),
        kl_loss=None if terms.kl is None else aggregate(terms.kl, mask, loss_type, norms).detach(),
        clip_low=terms.clip["low"],
        clip_high=terms.clip["high"],
        ratio=terms.clip["ratio"],
    )


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    norms: BatchNorms,
    *,
    loss_type: str,
    **terms,
) -> LossOutput:
    """`per_token_loss` (its keyword arguments in `terms`) aggregated by `loss_type`."""
    return aggregate_loss(per_token_loss(logp, old_logp, advantages, mask, **terms), mask, loss_type, norms)
