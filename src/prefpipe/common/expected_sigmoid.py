"""E[sigmoid(X)] for X ~ N(mu, s^2), integrated numerically: a Bayesian head's P(a > b) = E[sigmoid(s / tau)] for
its score posterior s ~ N(m, v). One implementation for the evaluation (prefpipe.evaluation.uncertainty) and for
exported models: the export copies this file beside its standalone loader, so an exported Bayesian head gives the
very probabilities the evaluation reports. It imports numpy (and torch on use) only, never prefpipe.

On the logit scale (mu = m / tau, s = sd / tau) the integrals are Gauss-Hermite when the Gaussian is at most as
wide as the sigmoid's features (s <= 1); wider, the nodes step over the sigmoid's rise (at s = 185 every symmetric
node pair averages to exactly 0.5), so the wide regime integrates on a fine grid of the logit, where the density
is the smooth factor (tests check both against Monte Carlo). Both integrate the smaller side of P,
E[sigmoid(-|X|)] for mean |mu| (X -> -X), so that a saturated pair's 1 - P ~ 1e-6 keeps its relative precision,
which its entropies need (1 - P from a sum near 1 keeps a few digits).
"""

from __future__ import annotations

import math

import numpy as np

HERMITE_NODES = 96
ENTROPY_GRID = np.linspace(-60.0, 60.0, 12001)  # H(sigmoid(x)) < 1e-24 beyond |x| = 60
CHUNK = 128  # rows integrated at once (the wide regime holds rows x grid points)


def sigmoid(z: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-z)) in float64 without overflow."""
    z = np.asarray(z, dtype=np.float64)
    return np.exp(-np.logaddexp(0.0, -z))


def entropy_of_logit(z: np.ndarray) -> np.ndarray:
    """H(sigmoid(z)) computed from the logit, finite for saturated z."""
    p = sigmoid(z)
    return np.logaddexp(0.0, -np.abs(z)) + np.abs(z) * np.minimum(p, 1.0 - p)


def normal_cdf(x: np.ndarray) -> np.ndarray:
    """Standard normal CDF (torch's ndtr: accurate in the tails, no scipy). torch is imported here, on use: the
    report imports this module through the calibration helpers and runs where torch is not installed."""
    import torch

    return torch.special.ndtr(torch.as_tensor(x, dtype=torch.float64)).numpy()


def _narrow(mu: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(E[sigmoid(-|X|)] for mean |mu|, the smaller side of P; E[H(sigmoid(X))]) by Gauss-Hermite."""
    x, w = np.polynomial.hermite.hermgauss(HERMITE_NODES)
    logits = np.abs(mu)[:, None] + math.sqrt(2.0) * s[:, None] * x[None, :]
    weights = w / math.sqrt(math.pi)
    return sigmoid(-logits) @ weights, entropy_of_logit(logits) @ weights


def _wide(mu: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """_narrow's two integrals by the trapezoid rule on the logit grid, where the Gaussian density (s > 1) is
    the smooth factor. Beyond the grid sigmoid(-x) is 1 (x < -60) or below 1e-26 (x > 60)."""
    x, a = ENTROPY_GRID, np.abs(mu)
    density = np.exp(-0.5 * ((x[None, :] - a[:, None]) / s[:, None]) ** 2) / (
        s[:, None] * math.sqrt(2 * math.pi)
    )

    def trapezoid(f: np.ndarray) -> np.ndarray:  # numpy 1.26 has no np.trapezoid
        return (f[:, 1:] + f[:, :-1]).sum(axis=1) * (x[1] - x[0]) / 2.0

    smaller = trapezoid(density * sigmoid(-x)[None, :]) + normal_cdf((x[0] - a) / s)
    expected = trapezoid(density * entropy_of_logit(x)[None, :])
    return smaller, expected


def expected_sigmoid(mu: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For X ~ N(mu, s^2) per row (float64 vectors, s >= 0): (E[sigmoid(X)], min(P, 1 - P) without
    cancellation, E[H(sigmoid(X))])."""
    mu, s = np.asarray(mu, dtype=np.float64), np.asarray(s, dtype=np.float64)
    smaller, expected = np.empty_like(mu), np.empty_like(mu)
    for start in range(0, len(mu), CHUNK):
        rows = np.arange(start, min(start + CHUNK, len(mu)))
        for chosen, integrate in ((rows[s[rows] <= 1.0], _narrow), (rows[s[rows] > 1.0], _wide)):
            if len(chosen):
                smaller[chosen], expected[chosen] = integrate(mu[chosen], s[chosen])
    prob = np.where(mu < 0, smaller, 1.0 - smaller)  # X -> -X: E[sigmoid(X)] = 1 - E[sigmoid(-X)]
    return prob, smaller, expected


def gaussian_preference_prob(score: np.ndarray, variance: np.ndarray, tau: float) -> np.ndarray:
    """P(a > b) = E[sigmoid(s / tau)] for s ~ N(score, variance) per row."""
    score, variance = np.asarray(score, dtype=np.float64), np.asarray(variance, dtype=np.float64)
    return expected_sigmoid(score / tau, np.sqrt(variance) / tau)[0]
