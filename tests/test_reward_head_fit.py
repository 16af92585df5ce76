"""Head fitting on cached features (train.head_fit) against independent computations: the loss it reports is the
loss of the model's own forward pass, and on a convex case (a BT head on fixed features = logistic regression
on feature differences) full-batch fitting lowers the loss monotonically to the L-BFGS optimum; the cosine
schedule is Adam at the half-cosine learning rates."""

from __future__ import annotations

import math

import pytest
import torch
from support.models import build_reward, save_tiny_base
from support.rows import rps_pairs

from prefpipe.reward import head_fit
from prefpipe.reward.head_fit import CachedFeatures
from prefpipe.reward.heads.disentangle import pair_lengths


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    return save_tiny_base(tmp_path_factory.mktemp("tiny_base"))


@pytest.mark.parametrize("head", ["gpm", "bgpm"])
def test_the_fitted_loss_is_the_loss_of_the_models_own_forward(tiny_base, head):
    rm, settings = build_reward(tiny_base, head)
    assert settings.head.standardize and settings.backbone.embedding_features
    rows = rps_pairs()
    prompts = [r["prompt"] for r in rows]
    chosen = rm.encoder.tokenize_many(prompts, [r["chosen"] for r in rows])
    rejected = rm.encoder.tokenize_many(prompts, [r["rejected"] for r in rows])
    step = 7  # a Bayesian head's KL weight is the warm-up weight at this step (kl_warmup_steps 2: full)
    lengths = pair_lengths([r["chosen"] for r in rows], [r["rejected"] for r in rows])
    metrics = head_fit.fit_stage(rm, settings, (chosen, rejected), lengths, 30, step, True, "test")
    assert metrics["steps"] == 30 and metrics["pairs"] == len(rows)
    assert metrics["loss_end"] < metrics["loss_start"]
    norm = rm.head.input_norm  # set from the features of every training response (chosen and rejected)
    feats = head_fit.cache_features(rm, chosen, rejected, lengths, batch_size=5)
    torch.testing.assert_close(norm.mean, feats.pooled.mean(0))
    torch.testing.assert_close(norm.inv_sd, 1 / feats.pooled.std(0))

    rm.eval()  # independent path: the model's forward on padded token batches, not the cached features
    with torch.no_grad():
        out = rm(**rm.encoder.pad(chosen + rejected))
    n = len(rows)
    parts = rm.head.loss({k: v[:n] for k, v in out.items()}, {k: v[n:] for k, v in out.items()}, step)
    assert float(parts.loss) == pytest.approx(metrics["loss_end"], abs=1e-5)
    assert float((parts.score > 0).float().mean()) == metrics["accuracy_end"]
    if head == "bgpm":
        assert float(parts.kl_beta) == settings.head.bayes.max_kl_weight and float(parts.kl_loss) > 0


def test_full_batch_fitting_of_a_bt_head_descends_to_the_logistic_regression_optimum(tiny_base):
    rm, settings = build_reward(tiny_base, "bt")
    width, hidden, n = rm.spec.head_input_size, rm.spec.hidden_size, 1000
    g = torch.Generator().manual_seed(0)
    chosen = 2.0 * torch.randn(n, width, generator=g) + 1.0
    rejected = 2.0 * torch.randn(n, width, generator=g) + 1.0
    w_true = 0.05 * torch.randn(width, generator=g)  # weak signal: many labels flip
    flip = torch.rand(n, generator=g) < torch.sigmoid(
        -(chosen - rejected) @ w_true
    )  # noisy labels: a finite optimum
    chosen[flip], rejected[flip] = rejected[flip].clone(), chosen[flip].clone()
    feats = CachedFeatures(
        torch.cat([chosen, rejected]), torch.randn(2 * n, hidden, generator=g), torch.zeros(2, n)
    )
    rm.head.input_norm.fit(feats.pooled)

    # Independent optimum: L-BFGS in float64 on mean softplus(-(w . (z_c - z_r)) / tau), z standardised.
    z = (feats.pooled.double() - feats.pooled.double().mean(0)) / feats.pooled.double().std(0)
    diff = (z[:n] - z[n:]) / settings.head.tau
    w = torch.zeros(width, dtype=torch.float64, requires_grad=True)
    lbfgs = torch.optim.LBFGS([w], max_iter=500, tolerance_grad=1e-12, line_search_fn="strong_wolfe")

    def closure():
        lbfgs.zero_grad()
        loss = torch.nn.functional.softplus(-(diff @ w)).mean()
        loss.backward()
        return loss

    lbfgs.step(closure)
    optimum = float(closure())

    metrics = head_fit.fit_head(rm, feats, 1000, 1e-2, step=0, schedule="constant")
    losses = [*metrics["loss_trace"], metrics["loss_end"]]  # every 100 steps, then the final loss
    assert all(b <= a + 1e-5 for a, b in zip(losses, losses[1:], strict=False)), losses  # float32 at the end
    assert losses[0] > optimum + 0.1  # it had something to descend
    assert metrics["loss_end"] == pytest.approx(optimum, abs=2e-3), (losses, optimum)


def test_the_cosine_schedule_is_adam_at_half_cosine_learning_rates(tiny_base):
    """schedule cosine == an independent Adam loop whose step i uses lr * (1 + cos(pi i / steps)) / 2 (the last
    step near 0), starting from the same head on the same features; constant differs from it."""
    rm, settings = build_reward(tiny_base, "gpm")
    g = torch.Generator().manual_seed(3)
    n, width = 24, rm.spec.head_input_size
    feats = CachedFeatures(
        torch.randn(2 * n, width, generator=g),
        torch.randn(2 * n, rm.spec.hidden_size, generator=g),
        torch.zeros(2, n),
    )
    rm.head.input_norm.fit(feats.pooled)
    start = {k: v.clone() for k, v in rm.head.state_dict().items()}
    steps, lr = 40, 1e-2

    params = [p for p in rm.head.parameters() if p.requires_grad]
    adam = torch.optim.Adam(params, lr=lr)
    rm.head.train()
    for i in range(steps):
        for group in adam.param_groups:
            group["lr"] = lr * (1 + math.cos(math.pi * i / steps)) / 2
        adam.zero_grad(set_to_none=True)
        head_fit.pair_loss(rm, feats, 0).loss.backward()
        adam.step()
    expected = {k: v.clone() for k, v in rm.head.state_dict().items()}

    for schedule in ("cosine", "constant"):
        rm.head.load_state_dict(start)
        head_fit.fit_head(rm, feats, steps, lr, step=0, schedule=schedule)
        got = rm.head.state_dict()
        same = all(torch.allclose(got[k], expected[k], rtol=1e-5, atol=1e-6) for k in expected)
        assert same == (schedule == "cosine"), schedule
