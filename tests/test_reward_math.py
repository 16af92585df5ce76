"""Reward-model math against independent computations: explicit loops, closed forms, torch.distributions,
Monte Carlo."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from support.settings import reward_settings
from torch.distributions import Normal, kl_divergence

from prefpipe.reward.heads.bgpm import BayesianGPMHead
from prefpipe.reward.heads.gpm import GPMHead, PromptGate
from prefpipe.reward.heads.registry import build_head
from prefpipe.reward.losses import gaussian_kl, kl_beta, kl_mean_term, preference_nll
from prefpipe.reward.scores import (
    gpm_score,
    gpm_score_variance,
    pair_gate,
    swap_blocks,
)


def pair_loss(settings, out_c, out_r, step):
    """The loss of a head built with `settings` (its weights play no part: the outputs are given)."""
    return build_head(settings, 4, 4).loss(out_c, out_r, step)


def _loop_score(a: torch.Tensor, b: torch.Tensor, lam: torch.Tensor | None) -> torch.Tensor:
    out = torch.zeros(a.shape[0], dtype=torch.float64)
    for i in range(a.shape[0]):
        for block in range(a.shape[1] // 2):
            weight = 1.0 if lam is None else float(lam[i, block])
            out[i] += weight * (a[i, 2 * block] * b[i, 2 * block + 1] - a[i, 2 * block + 1] * b[i, 2 * block])
    return out


@pytest.mark.parametrize("with_gate", [False, True])
def test_gpm_score_matches_loop_and_is_skew_symmetric(with_gate):
    g = torch.Generator().manual_seed(0)
    a, b = (
        torch.randn(5, 6, generator=g, dtype=torch.float64),
        torch.randn(5, 6, generator=g, dtype=torch.float64),
    )
    lam = torch.rand(5, 3, generator=g, dtype=torch.float64) * 2 if with_gate else None
    s_ab = gpm_score(a, b, lam)
    torch.testing.assert_close(s_ab, _loop_score(a, b, lam))
    torch.testing.assert_close(gpm_score(b, a, lam), -s_ab)
    assert torch.all(gpm_score(a, a, lam) == 0)
    assert s_ab.abs().min() > 1e-6  # a non-trivial score, so the symmetry checks mean something


def test_gpm_score_equals_bilinear_form_with_block_rotation():
    g = torch.Generator().manual_seed(1)
    a, b = (
        torch.randn(4, 4, generator=g, dtype=torch.float64),
        torch.randn(4, 4, generator=g, dtype=torch.float64),
    )
    lam = torch.tensor([0.5, 1.5], dtype=torch.float64)
    R = torch.zeros(4, 4, dtype=torch.float64)
    for block, weight in enumerate(lam):
        R[2 * block, 2 * block + 1], R[2 * block + 1, 2 * block] = weight, -weight
    torch.testing.assert_close(gpm_score(a, b, lam.expand(4, 2)), torch.einsum("ni,ij,nj->n", a, R, b))


def test_pair_gate_is_symmetric_so_model_scores_stay_skew_symmetric():
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g)
    ga, gb = torch.rand(3, 2, generator=g), torch.rand(3, 2, generator=g)
    torch.testing.assert_close(gpm_score(a, b, pair_gate(ga, gb)), -gpm_score(b, a, pair_gate(gb, ga)))


def test_prompt_gate_is_scaled_softmax_summing_to_k():
    torch.manual_seed(0)
    gate = PromptGate(hidden_size=16, k=3)
    h = torch.randn(4, 16)
    lam = gate(h)
    expected = torch.softmax(h @ gate.prompt_head.weight.T / 4.0, dim=-1) * 3
    torch.testing.assert_close(lam, expected)
    torch.testing.assert_close(lam.sum(-1), torch.full((4,), 3.0))


def test_gpm_head_normalises_and_gate_defaults_to_ones():
    torch.manual_seed(0)
    head = GPMHead(input_size=8, prompt_size=8, dim=6, normalize=True, gate=False)
    out = head(torch.randn(5, 8), torch.randn(5, 8))
    torch.testing.assert_close(out["embedding"].norm(dim=-1), torch.ones(5))
    assert torch.equal(out["gate"], torch.ones(5, 3))


def test_bt_and_gpm_losses_match_hand_computation():
    tau = 0.1
    rc, rr = torch.tensor([0.3, -0.2]), torch.tensor([0.1, 0.4])
    hand = (
        sum(math.log(1 + math.exp(-(c - r) / tau)) for c, r in zip(rc.tolist(), rr.tolist(), strict=True)) / 2
    )
    bt = pair_loss(
        reward_settings({"head": {"tau": tau}}, variant="bt").head, {"reward": rc}, {"reward": rr}, 0
    )
    assert bt.loss.item() == pytest.approx(hand, rel=1e-6)
    assert bt.kl_loss.item() == 0 and bt.kl_beta == 0

    c = torch.tensor([[0.6, 0.8, 0.0, 1.0]])
    r = torch.tensor([[1.0, 0.0, 0.6, -0.8]])
    gate = torch.tensor([[0.5, 1.5]])
    s = 0.5 * (0.6 * 0.0 - 0.8 * 1.0) + 1.5 * (0.0 * -0.8 - 1.0 * 0.6)  # = -1.3
    gpm = pair_loss(
        reward_settings({"head": {"dim": 4, "tau": tau}}).head,
        {"embedding": c, "gate": gate},
        {"embedding": r, "gate": gate},
        0,
    )
    assert gpm.score.item() == pytest.approx(s)
    assert gpm.loss.item() == pytest.approx(math.log(1 + math.exp(-s / tau)), rel=1e-6)
    assert preference_nll(torch.tensor([s]), tau).item() == pytest.approx(gpm.loss.item())


@pytest.mark.parametrize("kl_mean", ["normalized", "raw", "variance_only"])
def test_gaussian_kl_matches_torch_distributions(kl_mean):
    g = torch.Generator().manual_seed(3)
    out = {
        "raw_mean": torch.randn(4, 6, generator=g, dtype=torch.float64) * 2,
        "var": torch.rand(4, 6, generator=g, dtype=torch.float64) + 0.05,
    }
    out["mean"] = torch.nn.functional.normalize(out["raw_mean"], dim=-1)
    prior = 3.0
    m = {"normalized": out["mean"], "raw": out["raw_mean"], "variance_only": torch.zeros_like(out["mean"])}[
        kl_mean
    ]
    reference = kl_divergence(Normal(m, out["var"].sqrt()), Normal(0.0, math.sqrt(prior))).sum(-1)
    torch.testing.assert_close(gaussian_kl(kl_mean_term(out, kl_mean), out["var"], prior), reference)


def test_bayesian_loss_adds_beta_times_kl_of_both_sides():
    bayes = {"kl_warmup_steps": 10, "max_kl_weight": 0.5, "prior_variance": 2.0, "kl_mean": "raw"}
    head = reward_settings({"head": {"dim": 2, "tau": 0.5, "bayes": bayes}}, variant="bgpm").head
    g = torch.Generator().manual_seed(4)

    def side():
        raw = torch.randn(3, 2, generator=g)
        return {
            "raw_mean": raw,
            "mean": torch.nn.functional.normalize(raw, dim=-1),
            "var": torch.rand(3, 2, generator=g) + 0.1,
            "sample": torch.randn(3, 2, generator=g),
            "gate": torch.ones(3, 1),
        }

    c, r = side(), side()
    parts = pair_loss(head, c, r, 4)
    score = gpm_score(c["sample"], r["sample"])
    kl = (gaussian_kl(c["raw_mean"], c["var"], 2.0) + gaussian_kl(r["raw_mean"], r["var"], 2.0)).mean()
    assert parts.kl_beta == pytest.approx(0.2)
    torch.testing.assert_close(parts.preference_loss, -torch.nn.functional.logsigmoid(score / 0.5).mean())
    torch.testing.assert_close(parts.loss, parts.preference_loss + 0.2 * kl)


def test_kl_beta_schedule_values():
    assert [kl_beta(t, 1000, 1e-4) for t in (0, 250, 1000, 5000)] == pytest.approx([0.0, 2.5e-5, 1e-4, 1e-4])
    assert kl_beta(0, 0, 1.0) == 1.0  # broken setting: full weight from step 0
    assert kl_beta(3, 4, 0.2) == pytest.approx(0.15)


def _bgpm_head(**bayes) -> BayesianGPMHead:
    """A Bayesian head with the bgpm variant's (design-note fixed) settings, `bayes` changed."""
    settings = dataclasses.replace(reward_settings(variant="bgpm").head.bayes, **bayes)
    torch.manual_seed(0)
    return BayesianGPMHead(64, 64, 6, normalize=True, gate=True, settings=settings)


def test_logvar_init_gives_initial_variance_about_0_1():
    h = torch.randn(256, 64)
    fixed = _bgpm_head().eval()(h, h)["var"]
    assert 0.08 < fixed.mean().item() < 0.125
    assert fixed.std().item() < 0.03  # logvar weights scaled by 0.1: variance barely depends on the input
    # The design note's weight scaling alone (no offset) leaves logvar ~ 0, i.e. variance ~ 1, not 0.1.
    scaled_only = _bgpm_head(logvar_init_variance=None)(h, h)["var"]
    assert 0.9 < scaled_only.mean().item() < 1.1
    broken = _bgpm_head(logvar_init_scale=1.0, logvar_init_variance=None)(h, h)["var"]
    assert broken.std().item() > 3 * scaled_only.std().item()


def test_logvar_clamp_bounds_the_variance():
    head = _bgpm_head(logvar_clamp=(-1.0, 0.5), logvar_init_scale=1.0, logvar_init_variance=None)
    var = head.eval()(torch.randn(64, 64) * 50, torch.randn(64, 64))["var"]
    assert var.min() >= math.exp(-1.0) - 1e-6 and var.max() <= math.exp(0.5) + 1e-6
    assert (var == var.min()).any() and (var == var.max()).any()  # the clamp was active


def test_bgpm_head_samples_only_in_train_mode_and_eval_is_deterministic():
    head = _bgpm_head()
    h = torch.randn(4, 64)
    assert "sample" in head.train()(h, h)
    head.eval()
    state = torch.get_rng_state()
    first, second = head(h, h), head(h, h)
    assert "sample" not in first
    assert torch.equal(first["mean"], second["mean"]) and torch.equal(first["var"], second["var"])
    assert torch.equal(state, torch.get_rng_state())  # evaluation draws no random numbers
    torch.testing.assert_close(first["mean"].norm(dim=-1), torch.ones(4))


def test_swap_blocks():
    assert swap_blocks(torch.tensor([1.0, 2.0, 3.0, 4.0])).tolist() == [2.0, 1.0, 4.0, 3.0]


def test_closed_form_score_variance_matches_monte_carlo():
    g = torch.Generator().manual_seed(5)
    mean_a, mean_b = (
        torch.randn(3, 4, generator=g, dtype=torch.float64),
        torch.randn(3, 4, generator=g, dtype=torch.float64),
    )
    var_a, var_b = (
        torch.rand(3, 4, generator=g, dtype=torch.float64) * 0.5,
        torch.rand(3, 4, generator=g, dtype=torch.float64),
    )
    gate = torch.tensor([[0.5, 1.5]], dtype=torch.float64).expand(3, 2)
    n = 400_000
    sa = mean_a + torch.randn(n, 3, 4, generator=g, dtype=torch.float64) * var_a.sqrt()
    sb = mean_b + torch.randn(n, 3, 4, generator=g, dtype=torch.float64) * var_b.sqrt()
    mc = gpm_score(sa, sb, gate).var(dim=0)
    closed = gpm_score_variance(mean_a, var_a, mean_b, var_b, gate)
    torch.testing.assert_close(closed, mc, rtol=0.02, atol=0)


def test_bayesian_probability_and_probit_approximation_against_quadrature():
    """The bgpm head's P(a > b) and the probit formula against E[sigmoid(s / tau)], s ~ N(score, closed-form
    variance), by a plain quadrature on a fine grid of standard normal z."""
    g = torch.Generator().manual_seed(6)
    enc_a = {
        "mean": torch.nn.functional.normalize(torch.randn(5, 4, generator=g), dim=-1),
        "gate": torch.ones(5, 2),
    }
    enc_b = {
        "mean": torch.nn.functional.normalize(torch.randn(5, 4, generator=g), dim=-1),
        "gate": torch.ones(5, 2),
    }
    head = build_head(reward_settings({"head": {"dim": 4, "tau": 0.1}}, variant="bgpm").head, 4, 4)
    score = gpm_score(enc_a["mean"], enc_b["mean"])
    # Zero variance: both are exactly sigmoid(s / tau).
    enc_a["var"] = enc_b["var"] = torch.zeros(5, 4)
    exact = torch.sigmoid(score.double() / 0.1)
    torch.testing.assert_close(head.preference_prob(enc_a, enc_b), exact, atol=1e-7, rtol=0)
    enc_a["var"] = enc_b["var"] = torch.full((5, 4), 0.02)
    var = gpm_score_variance(enc_a["mean"], enc_a["var"], enc_b["mean"], enc_b["var"]).double()
    z = torch.linspace(-10, 10, 20001, dtype=torch.float64)
    weights = torch.exp(-0.5 * z**2)
    logits = (score.double()[:, None] + var.sqrt()[:, None] * z) / 0.1
    quad = (torch.sigmoid(logits) * weights).sum(-1) / weights.sum()
    torch.testing.assert_close(head.preference_prob(enc_a, enc_b), quad, atol=1e-6, rtol=0)
    assert (quad - exact).abs().max() > 0.01  # the variance really changed the probability
