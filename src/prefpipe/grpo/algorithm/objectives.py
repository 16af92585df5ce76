"""The policy objective: what each loss token contributes before aggregation (`grpo.policy_objective`), one of
the surrogates the anchors ship. The aggregation over tokens is a separate choice (`grpo.loss_type`,
grpo/algorithm/losses.py), and so is the weight for a sampling engine's mismatch (grpo/rollout/engines/correction.py).

With r_t = pi_theta / pi_old per token (the clamped, masked log-ratio of kl.masked_log_ratio), advantage A of
the sequence and sg[.] a stop-gradient:
  ppo_clip  -min(r_t A, clip(r_t, 1-eps_low, 1+eps_high) A)        (PPO / GRPO / DAPO, per token)
  gspo      the same with the SEQUENCE ratio s = exp(mean_{t in seq} log r_t) in place of r_t (GSPO,
            Zheng et al. 2025; TRL importance_sampling_level="sequence", verl loss_mode gspo). Written in its
            token form s_t = sg[s] * pi_theta(t) / sg[pi_theta(t)]: every token has the value s and is clipped as
            the sequence is, and token t's gradient is s * grad log pi_theta(t). Aggregated by `grpo` (a mean
            per sequence, then over sequences) this is exactly the paper's sequence loss
            -1/B sum_i min(s_i A_i, clip(s_i) A_i) in value and gradient; with all r_t of a sequence equal it is
            the token form. The paper's clip range is tiny (3e-4 / 4e-4): s is a per-token geometric mean.
  cispo     -sg[clip(r_t, 1-eps_low, 1+eps_high)] A log pi_theta(t)    (CISPO, MiniMax-M1; TRL loss_type cispo
            with epsilon_high the cap minus 1, verl loss_mode cispo): the clipped weight carries no gradient,
            so a token whose ratio is clipped still trains through its log-prob. epsilon_low 1 removes the
            lower clip (MiniMax-M1 sets none); TRL and ScaleRL cap the weight at 5 (epsilon_high 4).

The sequence of `gspo` is the row's `ratio_mask`: its policy tokens only. In a multi-turn episode the
environment's tokens never enter a ratio, even under the deliberately wrong mask (mask_mode with_environment),
which trains them but leaves s as the policy's own.

Clip indicators, per loss token: "low" where the weight sits at 1-eps_low with A < 0 and "high" where it sits at
1+eps_high with A > 0 (for ppo_clip and gspo the tokens that get no gradient; for cispo the ones whose weight
was capped).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from prefpipe.common.registry import registrar
from prefpipe.grpo.kl import masked_log_ratio


@dataclass
class ObjectiveInputs:
    logp: torch.Tensor  # (B, T) log pi_theta, with gradient
    old_logp: torch.Tensor  # (B, T) log pi_old (detached)
    advantages: torch.Tensor  # (B,)
    mask: torch.Tensor  # (B, T) tokens that carry loss
    ratio_mask: torch.Tensor  # (B, T) the sequence of a sequence-level ratio: the policy's tokens
    eps_low: float
    eps_high: float
    clamp: float | None  # guard on |log r_t| before exp (None = off)

    def log_ratio(self) -> torch.Tensor:
        """log r_t in fp32, 0 off the loss mask, clamped (kl.masked_log_ratio with pi in the numerator)."""
        return masked_log_ratio(self.old_logp, self.logp, self.mask, self.clamp)

    def masked_logp(self) -> torch.Tensor:
        """log pi_theta in fp32, 0 off the loss mask (with gradient on it)."""
        return torch.where(
            self.mask.bool(), self.logp.float(), torch.zeros_like(self.logp, dtype=torch.float32)
        )


Clip = dict[str, torch.Tensor]
Objective = Callable[[ObjectiveInputs], tuple[torch.Tensor, Clip]]
# grpo.policy_objective -> f(inputs): (per-token loss before aggregation, {"ratio", "low", "high"})
OBJECTIVES: dict[str, Objective] = {}
register_objective = registrar(OBJECTIVES, "policy objective")


def _clip_flags(ratio: torch.Tensor, x: ObjectiveInputs, adv: torch.Tensor) -> Clip:
    on = x.mask.bool()
    low = (ratio < 1.0 - x.eps_low) & (adv < 0) & on
    high = (ratio > 1.0 + x.eps_high) & (adv > 0) & on
    return {"ratio": ratio.detach(), "low": low, "high": high}


def _min_clipped(ratio: torch.Tensor, x: ObjectiveInputs) -> tuple[torch.Tensor, Clip]:
    adv = x.advantages.float()[:, None]
    clipped = ratio.clamp(1.0 - x.eps_low, 1.0 + x.eps_high) * adv
    return -torch.minimum(ratio * adv, clipped), _clip_flags(ratio, x, adv)


@register_objective("ppo_clip")
def ppo_clip(x: ObjectiveInputs) -> tuple[torch.Tensor, Clip]:
    return _min_clipped(torch.exp(x.log_ratio()), x)


def sequence_log_ratio(log_ratio: torch.Tensor, ratio_mask: torch.Tensor) -> torch.Tensor:
    """(B, 1) log s = the mean of log r_t over each row's ratio_mask tokens (0 for a row without any)."""
    m = ratio_mask.to(log_ratio.dtype)
    return (log_ratio * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1.0)


@register_objective("gspo")
def gspo(x: ObjectiveInputs) -> tuple[torch.Tensor, Clip]:
    log_s = sequence_log_ratio(x.log_ratio(), x.ratio_mask).detach()
    logp = x.masked_logp()
    # value s on every token, gradient s * grad log pi_theta(t): the sum last keeps log s exact (verl's order)
    return _min_clipped(torch.exp(logp - logp.detach() + log_s), x)


@register_objective("cispo")
def cispo(x: ObjectiveInputs) -> tuple[torch.Tensor, Clip]:
    ratio = torch.exp(x.log_ratio()).detach()
    weight = ratio.clamp(1.0 - x.eps_low, 1.0 + x.eps_high)
    adv = x.advantages.float()[:, None]
    return -weight * adv * x.masked_logp(), _clip_flags(ratio, x, adv)


def objective_loss(name: str, x: ObjectiveInputs) -> tuple[torch.Tensor, Clip]:
    """The per-token loss of the registered objective `name` and its clip indicators."""
    if name not in OBJECTIVES:
        raise ValueError(f"grpo.policy_objective must be one of {sorted(OBJECTIVES)}, got {name!r}")
    return OBJECTIVES[name](x)
