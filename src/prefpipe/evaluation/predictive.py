"""A head's predictive P(chosen > rejected) per pair, with its logit and entropy, and for a Bayesian head the
mutual information and the rest of its posterior measures (docs/findings/UNCERTAINTY.md section 3).

Point heads: P = sigmoid(s / tau). Bayesian heads: P = E[sigmoid(s / tau)] for s ~ N(m, v), integrated
numerically (prefpipe.evaluation.uncertainty.gaussian_preference) rather than by the probit approximation,
which ranks errors worse (0.819 against 0.833 AUROC on the baseline). Where P rounds to exactly 0 or 1 in
float64 (|logit| beyond about 36), its logit is the probit approximation's, which is as saturated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prefpipe.evaluation.calibration import binary_entropy, effective_logit, sigmoid
from prefpipe.evaluation.uncertainty import gaussian_preference


@dataclass
class Predictive:
    logit: np.ndarray  # logit of P (finite)
    prob: np.ndarray  # P(chosen > rejected)
    entropy: np.ndarray  # H(P) in nats: the total uncertainty about the preference
    posterior: dict[str, np.ndarray] | None  # gaussian_preference's measures; None for a point head

    @property
    def mutual_information(self) -> np.ndarray:
        """The posterior's epistemic part (BALD); NaN for a point head, which has no posterior."""
        if self.posterior is None:
            return np.full(len(self.prob), np.nan)
        return self.posterior["mutual_information"]


def predictive(score: np.ndarray, variance: np.ndarray | None, tau: float) -> Predictive:
    """P(chosen > rejected) of every pair as the head's own likelihood gives it (see the module doc)."""
    if variance is None:
        logit = effective_logit(score, tau)
        prob = sigmoid(logit)
        return Predictive(logit, prob, binary_entropy(prob), None)
    posterior = gaussian_preference(score, variance, tau)
    prob = posterior["prob"]
    inside = (prob > 0.0) & (prob < 1.0)
    with np.errstate(divide="ignore"):
        exact = np.log(prob) - np.log1p(-prob)
    logit = np.where(inside, exact, effective_logit(score, tau, variance))
    return Predictive(logit, prob, posterior["predictive_entropy"], posterior)
