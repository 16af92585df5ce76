"""What a risk-averse reward-model reward pays per comparison (`grpo.rewards[].risk_measure`, a registry), from
the score's posterior s ~ N(m, v) (a Bayesian GPM's closed-form variance; a deep ensemble's members' mean and
sample variance) and the aversion k:

- sd: value m (score units), penalty k * sqrt(v): m - k * sd, a lower confidence bound of the score. With
  transform sigmoid it is sigmoid((m - k * sd) / tau), the same bound on P(a > b).
- mutual_information: value E[sigmoid(s / tau)], the predictive P(a > b), penalty k * I, I = H(E[sigmoid(s /
  tau)]) - E[H(sigmoid(s / tau))], the information the label of the comparison shares with the posterior
  (BALD): only the epistemic part of the uncertainty, not the likelihood's own noise, which a near-tie has
  however much data it saw (a Bayesian head only: the ensemble's members are no Gaussian posterior).

Both expectations over X = s / tau ~ N(mu, sigma^2) are integrated numerically: Gauss-Hermite while sigma <= 1,
else the trapezoid rule on a fine logit grid, where the Gaussian is the smooth factor (the evaluation's
prefpipe.evaluation.uncertainty does the same in numpy; tests check both against Monte Carlo).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

_NODES = 96
_GRID = torch.linspace(-60.0, 60.0, 12001, dtype=torch.float64)  # H(sigmoid(x)) < 1e-24 beyond |x| = 60


def _entropy_of_logit(z: torch.Tensor) -> torch.Tensor:
    """H(sigmoid(z)) from the logit, finite when saturated."""
    a = z.abs()
    return torch.nn.functional.softplus(-a) + a * torch.sigmoid(-a)


def _hermite(mu: torch.Tensor, sigma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, w = (torch.from_numpy(v) for v in np.polynomial.hermite.hermgauss(_NODES))
    logits = mu[:, None] + math.sqrt(2.0) * sigma[:, None] * x[None, :]
    weights = w / math.sqrt(math.pi)
    return torch.sigmoid(logits) @ weights, _entropy_of_logit(logits) @ weights


def _grid(mu: torch.Tensor, sigma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = _GRID
    density = torch.exp(-0.5 * ((x[None, :] - mu[:, None]) / sigma[:, None]) ** 2) / (
        sigma[:, None] * math.sqrt(2 * math.pi)
    )
    step = float(x[1] - x[0])

    def trapezoid(f: torch.Tensor) -> torch.Tensor:
        return (f[:, 1:] + f[:, :-1]).sum(dim=1) * step / 2.0

    above = 1.0 - torch.special.ndtr((x[-1] - mu) / sigma)  # sigmoid = 1 beyond the grid's right end
    return trapezoid(density * torch.sigmoid(x)[None, :]) + above, trapezoid(
        density * _entropy_of_logit(x)[None, :]
    )


def predictive_information(
    score: torch.Tensor, var: torch.Tensor, tau: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(E[sigmoid(s / tau)], mutual information) per comparison for s ~ N(score, var), float64."""
    mu = score.double().reshape(-1) / tau
    sigma = var.double().reshape(-1).clamp(min=0).sqrt() / tau
    prob, expected = torch.empty_like(mu), torch.empty_like(mu)
    narrow = sigma <= 1.0
    for rows, integrate in ((narrow, _hermite), (~narrow, _grid)):
        if rows.any():
            prob[rows], expected[rows] = integrate(mu[rows], sigma[rows])
    q = prob.clamp(1e-300, 1.0)
    r = (1.0 - prob).clamp(1e-300, 1.0)
    total = -(prob * q.log() + (1.0 - prob) * r.log())
    return prob, (total - expected).clamp(min=0.0)  # >= 0 by Jensen; the clamp only removes rounding


@dataclass(frozen=True)
class RiskMeasure:
    """(score, var, tau, k) -> (value, penalty) per comparison; the reward pays value - penalty."""

    terms: Callable[[torch.Tensor, torch.Tensor, float, float], tuple[torch.Tensor, torch.Tensor]]
    bayesian_only: bool  # reads a Gaussian posterior, which a deep ensemble's members are not
    probability_scale: bool  # its value is already a probability (a sigmoid transform would apply twice)


def _sd(score: torch.Tensor, var: torch.Tensor, tau: float, k: float) -> tuple[torch.Tensor, torch.Tensor]:
    return score.float().reshape(-1), k * var.float().reshape(-1).clamp(min=0).sqrt()


def _information(
    score: torch.Tensor, var: torch.Tensor, tau: float, k: float
) -> tuple[torch.Tensor, torch.Tensor]:
    prob, info = predictive_information(score, var, tau)
    return prob.float(), (k * info).float()


RISK_MEASURES: dict[str, RiskMeasure] = {
    "sd": RiskMeasure(_sd, bayesian_only=False, probability_scale=False),
    "mutual_information": RiskMeasure(_information, bayesian_only=True, probability_scale=True),
}
