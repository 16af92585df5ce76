"""Training losses: preference NLL for every head, the Bayesian KL term and its beta schedule.

`pair_loss` turns the head outputs for the chosen and rejected halves of a batch into the scalar loss plus
the parts the trainer logs (preference_loss, kl_loss, kl_beta, prob, accuracy).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from prefpipe.reward.scores import gpm_score, pair_gate
from prefpipe.settings.reward import BayesSettings, HeadSettings


def preference_nll(score: torch.Tensor, tau: float) -> torch.Tensor:
    """Mean of -log sigmoid(score / tau) (BT: score = r_c - r_r; GPM: score = s(c > r | x))."""
    return -F.logsigmoid(score / tau).mean()


def kl_beta(step: int, warmup_steps: int, max_kl_weight: float) -> float:
    """beta(t) = min(1, t / warmup) * max_kl_weight; warmup 0 means full weight from step 0."""
    if warmup_steps <= 0:
        return float(max_kl_weight)
    return min(1.0, step / warmup_steps) * float(max_kl_weight)


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


def training_score(
    head_type: str, out_c: dict[str, torch.Tensor], out_r: dict[str, torch.Tensor]
) -> torch.Tensor:
    """Score the loss uses: r_c - r_r (BT), s on embeddings (GPM), s on posterior samples (Bayesian GPM)."""
    if head_type == "bt":
        return out_c["reward"] - out_r["reward"]
    gate = pair_gate(out_c.get("gate"), out_r.get("gate"))
    # bgpm: samples in train mode, the posterior mean otherwise
    key = "embedding" if head_type == "gpm" else ("sample" if "sample" in out_c else "mean")
    return gpm_score(out_c[key], out_r[key], gate)


def pair_loss(head: HeadSettings, out_c: dict, out_r: dict, step: int) -> LossParts:
    """Loss for one micro-batch: preference NLL (+ beta(step) * (KL_c + KL_r) for the Bayesian head)."""
    score = training_score(head.type, out_c, out_r)
    pref = preference_nll(score, head.tau)
    zero = pref.new_zeros(())
    if head.type != "bgpm":
        return LossParts(pref, pref, zero, 0.0, score.detach())
    bayes: BayesSettings = head.bayes  # type: ignore[assignment]
    beta = kl_beta(step, bayes.kl_warmup_steps, bayes.max_kl_weight)
    kl = (
        gaussian_kl(kl_mean_term(out_c, bayes.kl_mean), out_c["var"], bayes.prior_variance)
        + gaussian_kl(kl_mean_term(out_r, bayes.kl_mean), out_r["var"], bayes.prior_variance)
    ).mean()
    return LossParts(pref + beta * kl, pref, kl, beta, score.detach())
