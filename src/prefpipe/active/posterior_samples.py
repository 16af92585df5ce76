"""Posterior draws of P(chosen > rejected) from a Bayesian GPM, for the acquisitions that need joint samples
(BatchBALD, EPIG: prefpipe.active.information), and the head's view of each prompt alone (BAL-PM's features).

The head's posterior is a diagonal Gaussian per encoded sequence (prompt + response), independent across
sequences. Draw j of sequence x is normalize(mean_x + eps_j(x) * sd_x) (the head's own reparameterisation),
eps_j(x) ~ N(0, I) from numpy's generator seeded with (seed, round, sha256 of x's text): the same sequence gets
the same draw wherever it appears, so draw j of all pairs is one joint posterior draw, pairs that share a
response are correlated as the posterior says, and a rerun gives the same numbers on every machine. Then
p_j = sigmoid(s(draw_j(chosen), draw_j(rejected)) / tau).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from prefpipe.reward.scores import gpm_score, pair_gate

SAMPLE_PREFIX, FEATURE_PREFIX = "p_sample_", "prompt_feature_"  # the pool-score table's column names


def sequence_noise(
    prompts: Sequence[str], responses: Sequence[str], shape: tuple[int, int], seed: tuple[int, int]
) -> np.ndarray:
    """eps of shape (rows, draws, dim): one seeded draw per distinct (prompt, response) text."""
    out = np.empty((len(prompts), *shape))
    cache: dict[tuple[str, str], np.ndarray] = {}
    for row, key in enumerate(zip(prompts, responses, strict=True)):
        if key not in cache:
            digest = hashlib.sha256(f"{len(key[0])}:{key[0]}{key[1]}".encode()).digest()
            entropy = [*seed, int.from_bytes(digest[:8], "little")]
            cache[key] = np.random.default_rng(entropy).standard_normal(shape)
        out[row] = cache[key]
    return out


def _draws(enc: dict[str, torch.Tensor], noise: np.ndarray, normalize: bool) -> torch.Tensor:
    mean, sd = enc["mean"].double(), enc["var"].double().clamp(min=0).sqrt()
    sample = mean[:, None, :] + torch.from_numpy(noise) * sd[:, None, :]
    return F.normalize(sample, p=2, dim=-1) if normalize else sample


def sample_probabilities(
    enc_chosen: dict[str, torch.Tensor],
    enc_rejected: dict[str, torch.Tensor],
    noise: tuple[np.ndarray, np.ndarray],
    tau: float,
    normalize: bool,
) -> np.ndarray:
    """(pairs, draws) matrix of p_j = sigmoid(s_j / tau) from the two sides' encodings and their noise."""
    a, b = _draws(enc_chosen, noise[0], normalize), _draws(enc_rejected, noise[1], normalize)
    gate = pair_gate(enc_chosen.get("gate"), enc_rejected.get("gate"))
    gate = None if gate is None else gate.double()[:, None, :]
    return torch.sigmoid(gpm_score(a, b, gate) / tau).numpy()
