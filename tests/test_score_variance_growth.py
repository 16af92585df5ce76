"""The Bayesian GPM's closed-form score variance (prefpipe.reward.scores.gpm_score_variance) against Monte Carlo
from the same Gaussians, and why it grows with the margin (docs/findings/UNCERTAINTY.md, issue 33)."""

from __future__ import annotations

import math

import numpy as np
import torch

from prefpipe.reward.losses import gaussian_kl
from prefpipe.reward.scores import gpm_score, gpm_score_variance, sample_embedding


def _gaussians(n: int, dim: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    mean_a = torch.randn(n, dim, generator=g, dtype=torch.float64)
    mean_b = torch.randn(n, dim, generator=g, dtype=torch.float64)
    var_a = torch.rand(n, dim, generator=g, dtype=torch.float64) * 0.5 + 0.01
    var_b = torch.rand(n, dim, generator=g, dtype=torch.float64) * 0.5 + 0.01
    gate = torch.softmax(torch.randn(n, dim // 2, generator=g, dtype=torch.float64), -1) * (dim // 2)
    return mean_a, var_a, mean_b, var_b, gate


def test_closed_form_variance_matches_monte_carlo_within_its_standard_error():
    mean_a, var_a, mean_b, var_b, gate = _gaussians(12, 6, seed=0)
    samples = 200_000
    g = torch.Generator().manual_seed(1)
    s = torch.stack(
        [
            gpm_score(
                sample_embedding(mean_a[i].expand(samples, -1), var_a[i].expand(samples, -1), False, g),
                sample_embedding(mean_b[i].expand(samples, -1), var_b[i].expand(samples, -1), False, g),
                gate[i].expand(samples, -1),
            )
            for i in range(len(mean_a))
        ]
    )
    centred = s - s.mean(1, keepdim=True)
    mc_var = centred.pow(2).mean(1)
    # standard error of a sample variance: sqrt((mu4 - sigma^4) / n), both estimated from the same samples
    stderr = ((centred.pow(4).mean(1) - mc_var.pow(2)) / samples).sqrt()
    closed = gpm_score_variance(mean_a, var_a, mean_b, var_b, gate)
    assert torch.all((closed - mc_var).abs() <= 4 * stderr), (closed, mc_var, stderr)
    # the mean of the bilinear score is the score of the means (independent sides)
    mean_stderr = (mc_var / samples).sqrt()
    assert torch.all((s.mean(1) - gpm_score(mean_a, mean_b, gate)).abs() <= 4 * mean_stderr)


def test_variance_carries_the_squared_norm_of_the_means():
    """Var[s] = c^2 * (mean terms) + (trace term) when both means are scaled by c: it grows without bound
    with the embeddings' size while the variances themselves stay put."""
    mean_a, var_a, mean_b, var_b, gate = _gaussians(50, 6, seed=2)
    trace = gpm_score_variance(torch.zeros_like(mean_a), var_a, torch.zeros_like(mean_b), var_b, gate)
    at_1 = gpm_score_variance(mean_a, var_a, mean_b, var_b, gate)
    for c in (0.5, 2.0, 5.0):
        at_c = gpm_score_variance(c * mean_a, var_a, c * mean_b, var_b, gate)
        torch.testing.assert_close(at_c, trace + c * c * (at_1 - trace))
        assert torch.all(at_c[..., None] >= 0)
    assert torch.all(gpm_score_variance(5 * mean_a, var_a, 5 * mean_b, var_b, gate) > at_1)


def test_gate_scales_the_margin_by_lambda_and_the_variance_by_lambda_squared():
    """With unit-norm (normalised) means the size enters through the prompt gate: lambda_l multiplies block l's
    score and lambda_l^2 its variance, so a confident gate (one block near lambda = k) raises both."""
    mean_a, var_a, mean_b, var_b, gate = _gaussians(50, 6, seed=3)
    mean_a = torch.nn.functional.normalize(mean_a, dim=-1)
    mean_b = torch.nn.functional.normalize(mean_b, dim=-1)
    for lam in (0.5, 3.0):
        torch.testing.assert_close(
            gpm_score(mean_a, mean_b, lam * gate), lam * gpm_score(mean_a, mean_b, gate)
        )
        torch.testing.assert_close(
            gpm_score_variance(mean_a, var_a, mean_b, var_b, lam * gate),
            lam**2 * gpm_score_variance(mean_a, var_a, mean_b, var_b, gate),
        )


def test_variance_is_bounded_below_by_the_squared_margin():
    """Var[s] >= m^2 * (min var_b / |mu_b|^2 + min var_a / |mu_a|^2): by Cauchy-Schwarz on m = (R^T mu_a) . mu_b,
    so wherever the head's variances are of one size the variance ranks pairs by |m|, the opposite of an
    uncertainty (docs/findings/UNCERTAINTY.md)."""
    mean_a, var_a, mean_b, var_b, gate = _gaussians(2000, 6, seed=4)
    m = gpm_score(mean_a, mean_b, gate)
    bound = m.pow(2) * (
        var_b.min(-1).values / mean_b.pow(2).sum(-1) + var_a.min(-1).values / mean_a.pow(2).sum(-1)
    )
    assert torch.all(gpm_score_variance(mean_a, var_a, mean_b, var_b, gate) >= bound * (1 - 1e-12))
    # isotropic variances and no gate: the mean terms are exactly sigma^2 (|mu_a|^2 + |mu_b|^2), so with unit
    # means the closed-form variance is one constant, whatever the margin
    unit_a = torch.nn.functional.normalize(mean_a, dim=-1)
    unit_b = torch.nn.functional.normalize(mean_b, dim=-1)
    iso = torch.full_like(var_a, 0.01)
    flat = gpm_score_variance(unit_a, iso, unit_b, iso)
    torch.testing.assert_close(flat, torch.full_like(flat, 2 * 0.01 + 6 * 0.01**2))


def _elbo_optimal_variance(margin: float, tau: float, beta: float, prior_variance: float) -> float:
    """The score variance v minimising E[-log sigmoid(s / tau)] + beta * KL(N(., v) || N(0, prior)), s ~ N(m, v):
    one pair's share of the Bayesian head's loss (prefpipe.reward.losses), on a log grid of v."""
    x, w = np.polynomial.hermite.hermgauss(96)
    v = torch.logspace(-7, 1, 4001, dtype=torch.float64)
    s = margin + (2 * v[:, None]).sqrt() * torch.as_tensor(x)[None, :]
    nll = torch.nn.functional.softplus(-s / tau) @ torch.as_tensor(w / math.sqrt(math.pi))
    kl = gaussian_kl(None, v[:, None], prior_variance)  # the normalised mean's KL term is a constant
    return float(v[torch.argmin(nll + beta * kl)])


def test_the_loss_gives_a_confident_pair_the_most_variance():
    """Why the trained head's variance rises with the margin: with the default KL weight the KL pushes every
    variance up and the likelihood pushes back only while noise can still flip the pair, so the loss-optimal
    variance grows with the margin (about 2 tau (m - tau log(v / (beta tau^2))) once the sigmoid saturates) and
    |m| / sd even falls for the most confident pairs: the variance is the slack a pair leaves, not doubt."""
    tau, beta, prior = 0.1, 1.0e-4, 10.0  # config.yaml: head.tau, bayes.max_kl_weight, bayes.prior_variance
    margins = [0.3, 0.5, 0.75, 1.0, 1.5, 2.0]
    best = [_elbo_optimal_variance(m, tau, beta, prior) for m in margins]
    assert all(a < b for a, b in zip(best, best[1:], strict=False))
    assert best[-1] > 1000 * best[0]
    z = [m / math.sqrt(v) for m, v in zip(margins, best, strict=True)]
    assert z[-1] < z[2] < z[1]  # the flip probability Phi(-z) is larger on the most confident pairs
    for m, v in zip(margins[-2:], best[-2:], strict=True):  # saturated regime: the closed-form balance
        assert abs(v - 2 * tau * (m - tau * math.log(v / (beta * tau**2)))) < 0.01


def test_kl_on_the_normalised_mean_only_acts_on_the_variances():
    """kl_mean normalized = variance_only + a constant when the head normalises: |mean|^2 = 1, so the KL gives
    the mean no gradient and the log-variances the same one (docs/findings/UNCERTAINTY.md, section 2d)."""
    g = torch.Generator().manual_seed(5)
    raw = torch.randn(7, 6, generator=g, dtype=torch.float64, requires_grad=True)
    logvar = torch.randn(7, 6, generator=g, dtype=torch.float64, requires_grad=True)
    mean = torch.nn.functional.normalize(raw, dim=-1)
    on_mean = gaussian_kl(mean, logvar.exp(), 10.0)
    without = gaussian_kl(None, logvar.exp(), 10.0)
    torch.testing.assert_close(on_mean - without, torch.full_like(on_mean, 0.5 / 10.0))
    d_raw, d_logvar = torch.autograd.grad(on_mean.sum(), [raw, logvar])
    assert float(d_raw.abs().max()) < 1e-12
    torch.testing.assert_close(d_logvar, torch.autograd.grad(without.sum(), [logvar])[0])
