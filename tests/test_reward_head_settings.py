"""Heads own their settings: `head.loss(out_c, out_r, step)` and `head.preference_prob(a, b)` read the settings
the head was built with, and give what the formulas give (written out here in float64 on random encodings);
a saved model stores tau once and still loads folders that stored it twice."""

from __future__ import annotations

import json
import math

import pytest
import torch
from support.models import build_reward, save_tiny_base
from support.settings import reward_settings

from prefpipe.common.expected_sigmoid import gaussian_preference_prob
from prefpipe.reward.heads.registry import build_head
from prefpipe.reward.model import HEAD_CONFIG, load_reward_model, save_reward_model

N, DIM = 7, 6
BAYES = {"kl_warmup_steps": 10, "max_kl_weight": 0.3, "prior_variance": 2.0}


def _settings(head: str, tau: float):
    extra = {"bayes": BAYES} if head == "bgpm" else {}
    return reward_settings({"head": {"dim": DIM, "tau": tau, **extra}}, variant=head).head


def _encoding(head: str, g: torch.Generator, train: bool) -> dict[str, torch.Tensor]:
    if head == "bt":
        return {"reward": torch.randn(N, generator=g)}
    gate = torch.rand(N, DIM // 2, generator=g) + 0.5
    raw = torch.randn(N, DIM, generator=g)
    if head == "gpm":
        return {"embedding": raw / raw.norm(dim=-1, keepdim=True), "gate": gate}
    var = torch.rand(N, DIM, generator=g) + 0.1
    enc = {"raw_mean": raw, "mean": raw / raw.norm(dim=-1, keepdim=True), "var": var, "gate": gate}
    if train:
        enc["logvar"] = var.log()
        enc["sample"] = torch.randn(N, DIM, generator=g)
    return enc


def _score(a: torch.Tensor, b: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """sum_l gate_l (a_2l b_2l+1 - a_2l+1 b_2l), one loop per block, float64 (the pair's gate: their mean)."""
    a, b, gate = a.double(), b.double(), gate.double()
    return sum(
        gate[:, k] * (a[:, 2 * k] * b[:, 2 * k + 1] - a[:, 2 * k + 1] * b[:, 2 * k]) for k in range(DIM // 2)
    )


def _training_score(head: str, c: dict, r: dict) -> torch.Tensor:
    if head == "bt":
        return (c["reward"] - r["reward"]).double()
    key = {"gpm": "embedding", "bgpm": "sample"}[head]
    return _score(c[key], r[key], (c["gate"] + r["gate"]) / 2)


def _kl(enc: dict, prior: float) -> torch.Tensor:
    """KL(N(mean, var) || N(0, prior)) per row, the normalised mean (the default kl_mean), float64."""
    m, v = enc["mean"].double(), enc["var"].double()
    return 0.5 * ((v + m**2) / prior - 1 - torch.log(v / prior)).sum(-1)


@pytest.mark.parametrize("head", ["bt", "gpm", "bgpm"])
@pytest.mark.parametrize("tau", [0.1, 0.7])
def test_loss_is_the_formula_with_the_heads_own_tau(head, tau):
    g = torch.Generator().manual_seed(11)
    model = build_head(_settings(head, tau), 8, 8)
    c, r = _encoding(head, g, True), _encoding(head, g, True)
    step = 4
    parts = model.loss(c, r, step)
    score = _training_score(head, c, r)
    nll = torch.mean(torch.log1p(torch.exp(-score / tau)))
    torch.testing.assert_close(parts.score.double(), score, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(parts.prob.double(), 1 / (1 + torch.exp(-score / tau)), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(parts.preference_loss.double(), nll, rtol=1e-5, atol=1e-6)
    if head == "bgpm":
        beta = min(1.0, step / BAYES["kl_warmup_steps"]) * BAYES["max_kl_weight"]
        kl = (_kl(c, BAYES["prior_variance"]) + _kl(r, BAYES["prior_variance"])).mean()
        assert parts.kl_beta == pytest.approx(beta)
        torch.testing.assert_close(parts.loss.double(), nll + beta * kl, rtol=1e-5, atol=1e-6)
    else:
        assert parts.kl_beta == 0 and float(parts.kl_loss) == 0
        torch.testing.assert_close(parts.loss.double(), nll, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("head", ["bt", "gpm"])
def test_point_heads_probability_is_sigmoid_of_score_over_their_tau(head):
    g = torch.Generator().manual_seed(12)
    tau = 0.3
    model = build_head(_settings(head, tau), 8, 8)
    a, b = _encoding(head, g, False), _encoding(head, g, False)
    if head == "bt":
        score = (a["reward"] - b["reward"]).double()
    else:
        score = _score(a["embedding"], b["embedding"], (a["gate"] + b["gate"]) / 2)
    torch.testing.assert_close(model.preference_prob(a, b).double(), 1 / (1 + torch.exp(-score / tau)))


def _score_variance(a: dict, b: dict, gate: torch.Tensor) -> torch.Tensor:
    """Var[s] for independent diagonal Gaussians, per block: Var[a0 b1] + Var[a1 b0] (uncorrelated), where
    Var[x y] = E[x]^2 Var[y] + E[y]^2 Var[x] + Var[x] Var[y]; float64, one loop per block."""
    ma, va, mb, vb = (enc[k].double() for enc in (a, b) for k in ("mean", "var"))
    gate = gate.double()

    def product(i: int, j: int) -> torch.Tensor:  # Var[a_i b_j]
        return ma[:, i] ** 2 * vb[:, j] + mb[:, j] ** 2 * va[:, i] + va[:, i] * vb[:, j]

    return sum(
        gate[:, k] ** 2 * (product(2 * k, 2 * k + 1) + product(2 * k + 1, 2 * k)) for k in range(DIM // 2)
    )


# sd / tau above 1 (integrated on the logit grid) and below (Gauss-Hermite)
@pytest.mark.parametrize("var_scale", [1.0, 1e-2])
def test_bayesian_probability_is_the_expected_sigmoid_over_its_score_posterior(var_scale):
    """P(a > b) = E[sigmoid(s / tau)] for s ~ N(score of the means, closed-form Var[s]): the head's P is within
    4 standard errors of a Monte Carlo average over 400,000 draws of s, and the variance really moves it."""
    tau, draws = 0.2, 400_000
    model = build_head(_settings("bgpm", tau), 8, 8)
    g = torch.Generator().manual_seed(13)
    a, b = _encoding("bgpm", g, False), _encoding("bgpm", g, False)
    a["var"], b["var"] = a["var"] * var_scale, b["var"] * var_scale
    got = model.preference_prob(a, b)
    assert got.dtype == torch.float64 and got.shape == (N,)
    gate = (a["gate"] + b["gate"]) / 2
    score, var = _score(a["mean"], b["mean"], gate), _score_variance(a, b, gate)
    s = score[:, None] + var.sqrt()[:, None] * torch.randn(N, draws, generator=g, dtype=torch.float64)
    f = 1 / (1 + torch.exp(-s / tau))
    mc, stderr = f.mean(-1), f.std(-1) / math.sqrt(draws)
    assert ((got - mc).abs() < 4 * stderr).all(), (got - mc) / stderr
    point = 1 / (1 + torch.exp(-score / tau))
    assert (got - point).abs().max() > 0.01  # the variance moves P: not the point probability


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    return save_tiny_base(tmp_path_factory.mktemp("tiny_base"))


def test_tau_is_saved_once_and_old_folders_with_two_copies_still_load(tiny_base, tmp_path):
    rm, settings = build_reward(tiny_base, "gpm", head={"tau": 0.25})
    folder = save_reward_model(rm, tmp_path / "model")
    saved = json.loads((folder / HEAD_CONFIG).read_text())
    assert "tau" not in saved and saved["head"]["tau"] == 0.25
    assert load_reward_model(folder).head.tau == 0.25
    saved["tau"] = 0.25  # the layout of folders saved before: tau at the top level as well
    (folder / HEAD_CONFIG).write_text(json.dumps(saved))
    loaded = load_reward_model(folder)
    assert loaded.tau == loaded.head.tau == 0.25 and math.isclose(settings.head.tau, 0.25)


def test_bayesian_folders_saved_with_a_monte_carlo_sample_count_still_load(tiny_base, tmp_path):
    """Folders saved when a Bayesian head's P was a Monte Carlo average carry head.bayes.mc_samples: it is ignored
    and the loaded head integrates P like any other."""
    rm, _ = build_reward(tiny_base, "bgpm")
    folder = save_reward_model(rm, tmp_path / "model")
    saved = json.loads((folder / HEAD_CONFIG).read_text())
    assert "mc_samples" not in saved["head"]["bayes"]
    saved["head"]["bayes"]["mc_samples"] = 64
    (folder / HEAD_CONFIG).write_text(json.dumps(saved))
    loaded = load_reward_model(folder)
    a, b = loaded.encode(["x", "y"], ["one", "two"], 2), loaded.encode(["x", "y"], ["three", "four"], 2)
    score, var = loaded.compare(a, b)
    want = torch.from_numpy(
        gaussian_preference_prob(score.double().numpy(), var.double().numpy(), loaded.tau)
    )
    torch.testing.assert_close(loaded.preference_prob(a, b), want, atol=0, rtol=0)
