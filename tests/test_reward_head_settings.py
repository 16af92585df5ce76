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

from prefpipe.reward.heads.registry import build_head
from prefpipe.reward.model import HEAD_CONFIG, load_reward_model, save_reward_model

N, DIM = 7, 6
BAYES = {"kl_warmup_steps": 10, "max_kl_weight": 0.3, "prior_variance": 2.0, "mc_samples": 64}


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


def test_bayesian_probability_averages_sigmoids_over_its_own_posterior_samples():
    """The same draws as the head's (one generator, a normal draw per side per sample), averaged by hand."""
    tau = 0.2
    settings = _settings("bgpm", tau)
    model = build_head(settings, 8, 8)
    g = torch.Generator().manual_seed(13)
    a, b = _encoding("bgpm", g, False), _encoding("bgpm", g, False)
    got = model.preference_prob(a, b, generator=torch.Generator().manual_seed(5))
    draws = torch.Generator().manual_seed(5)
    n = settings.bayes.mc_samples
    gate = (a["gate"] + b["gate"]) / 2
    total = torch.zeros(N, dtype=torch.float64)
    for _ in range(n):  # per sample: a's draw, then b's
        sa = a["mean"] + torch.randn(a["mean"].shape, generator=draws) * a["var"].sqrt()
        sb = b["mean"] + torch.randn(b["mean"].shape, generator=draws) * b["var"].sqrt()
        sa, sb = sa / sa.norm(dim=-1, keepdim=True), sb / sb.norm(dim=-1, keepdim=True)
        total += 1 / (1 + torch.exp(-_score(sa, sb, gate) / tau))
    torch.testing.assert_close(got.double(), total / n, rtol=1e-5, atol=1e-6)


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
