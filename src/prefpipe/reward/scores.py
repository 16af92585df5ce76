"""Preference scores between two encoded responses: BT difference, GPM skew-symmetric form, and the
Bayesian GPM's uncertainty (closed-form score variance, posterior samples; P(a > b) under the posterior is
integrated numerically by the head, its probit approximation lives in prefpipe.evaluation.calibration).

Pure tensor functions so every formula can be tested against an independent computation.
Embeddings are (N, 2k): block l is the pair (v[2l], v[2l+1]); gates are (N, k).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _blocks(v: torch.Tensor) -> torch.Tensor:
    if v.shape[-1] % 2:
        raise ValueError(f"embedding size must be even (2k), got {v.shape[-1]}")
    return v.reshape(*v.shape[:-1], v.shape[-1] // 2, 2)


def pair_gate(gate_a: torch.Tensor | None, gate_b: torch.Tensor | None) -> torch.Tensor | None:
    """Gate shared by both sides: the mean of the two prompt gates.

    With a causal decoder both sides see the same prompt tokens, so the gates are equal and this is the
    reference's lambda(x). For encoders (bidirectional) the prompt token also sees the response; averaging
    keeps s(a, b) = -s(b, a) exact instead of depending on which side supplied the gate.
    """
    if gate_a is None or gate_b is None:
        return None
    return 0.5 * (gate_a + gate_b)


def gpm_score(a: torch.Tensor, b: torch.Tensor, gate: torch.Tensor | None = None) -> torch.Tensor:
    """s(a > b | x) = sum_l lambda_l * (a[2l] b[2l+1] - a[2l+1] b[2l]); skew-symmetric, s(a, a) = 0."""
    pa, pb = _blocks(a), _blocks(b)
    per_block = pa[..., 0] * pb[..., 1] - pa[..., 1] * pb[..., 0]
    if gate is not None:
        per_block = per_block * gate
    return per_block.sum(-1)


def swap_blocks(v: torch.Tensor) -> torch.Tensor:
    """S v: exchange the two coordinates inside every block (the permutation in the variance formula)."""
    return _blocks(v).flip(-1).reshape(v.shape)


def gpm_score_variance(
    mean_a: torch.Tensor,
    var_a: torch.Tensor,
    mean_b: torch.Tensor,
    var_b: torch.Tensor,
    gate: torch.Tensor | None = None,
) -> torch.Tensor:
    """Var[s(a, b)] for independent diagonal Gaussians a ~ N(mean_a, var_a), b ~ N(mean_b, var_b).

    Var = <mu_a^2, S var_b> + <mu_b^2, S var_a> + <var_a, S var_b>, each block weighted by lambda_l^2
    (the two products in one block are uncorrelated, blocks are independent). It describes the Gaussian
    before the sample is renormalised onto the sphere, so it is an approximation for normalised heads.
    """
    terms = (
        mean_a.pow(2) * swap_blocks(var_b) + mean_b.pow(2) * swap_blocks(var_a) + var_a * swap_blocks(var_b)
    )
    per_block = _blocks(terms).sum(-1)
    if gate is not None:
        per_block = per_block * gate.pow(2)
    return per_block.sum(-1)


def sample_embedding(
    mean: torch.Tensor, var: torch.Tensor, normalize: bool, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Reparameterised sample mean + eps * std, renormalised onto the sphere when the head normalises."""
    eps = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
    sample = mean + eps * var.sqrt()
    return F.normalize(sample, p=2, dim=-1) if normalize else sample
