"""Training-loss math: preference NLL for every head, the Bayesian KL term and its beta schedule.

Each head's `loss` (prefpipe.reward.heads) combines these into `LossParts`: the scalar loss plus the parts the
trainer logs (preference_loss, kl_loss, kl_beta, prob, and accuracy from the score).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


def preference_nll(score: torch.Tensor, tau: float) -> torch.Tensor:
    """Mean of -log sigmoid(score / tau) (BT: score = r_c - r_r; GPM: score = s(c > r | x))."""
    return -F.logsigmoid(score / tau).mean()


def linear_warmup(step: int, warmup_steps: int) -> float:
    """min(1, t / warmup): a weight's linear ramp from 0 at step 0; warmup 0 means 1 from step 0."""
    if warmup_steps <= 0:
        return 1.0
    return min(1.0, step / warmup_steps)


def kl_beta(step: int, warmup_steps: int, max_kl_weight: float) -> float:
    """beta(t) = min(1, t / warmup) * max_kl_weight; warmup 0 means full weight from step 0."""
    return linear_warmup(step, warmup_steps) * float(max_kl_weight)


def gaussian_kl(mean_term: torch.Tensor | None, var: torch.Tensor, prior_variance: float) -> torch.Tensor:
    """KL(N(m, var) || N(0, prior_variance I)) per row, summed over dimensions.

    0.5 * sum[(var + m^2) / p - 1 - log(var / p)]; mean_term None is the variance-only KL (m = 0).
    """
    ratio = var / prior_variance
    quad = ratio if mean_term is None else ratio + mean_term.pow(2) / prior_variance
    return 0.5 * (quad - 1.0 - torch.log(ratio)).sum(-1)


def kl_mean_term(out: dict[str, torch.Tensor], kl_mean: str) -> torch.Tensor | None:
    """Which mean enters the KL: the normalised mean (score space), the raw head output, or none."""
    if kl_mean == "normalized":
        return out["mean"]
    if kl_mean == "raw":
        return out["raw_mean"]
    if kl_mean == "variance_only":
        return None
    raise ValueError(f"unknown kl_mean {kl_mean!r}")


@dataclass
class LossParts:
    loss: torch.Tensor
    preference_loss: torch.Tensor
    kl_loss: torch.Tensor
    kl_beta: float
    score: torch.Tensor  # training score s(c > r), detached
    prob: torch.Tensor  # sigmoid(score / tau) per pair, detached
