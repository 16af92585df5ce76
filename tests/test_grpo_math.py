"""GRPO math against independent computations: advantages, KL estimators, clipped surrogate, aggregations."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from support.settings import grpo_settings

from prefpipe.grpo.algorithm.advantages import group_advantages
from prefpipe.grpo.algorithm.losses import BatchNorms, aggregate, grpo_loss
from prefpipe.grpo.algorithm.objectives import ObjectiveInputs, ppo_clip
from prefpipe.grpo.kl import kl_from_log_ratio, masked_log_ratio, per_token_kl

# ------------------------------------------------------------------------------------------ advantages
RUN = grpo_settings()  # the default run (its advantage_eps)


@pytest.mark.parametrize("mode", ["group", "batch", "none"])
def test_equal_rewards_give_zero_advantages(mode):
    rewards = torch.tensor([0.7] * 4 + [-2.0] * 4)
    adv = group_advantages(rewards, 4, mode, RUN.advantage_eps)
    assert torch.equal(adv.advantages, torch.zeros(8))
    assert adv.frac_zero_std == 1.0


def test_advantage_scaling_modes_match_explicit_statistics():
    rewards = [1.0, 0.0, 0.0, 1.0, 0.5, 2.0, -1.0, 0.25, 3.0, 3.0, 3.0, 3.0]
    G, eps = 4, 1e-4
    groups = [rewards[i : i + G] for i in range(0, len(rewards), G)]
    batch_std = statistics.stdev(rewards)
    want = {"group": [], "batch": [], "none": []}
    for g in groups:
        mean, std = statistics.fmean(g), statistics.stdev(g)
        for r in g:
            want["none"].append(r - mean)
            want["group"].append((r - mean) / (std + eps))
            want["batch"].append((r - mean) / (batch_std + eps))
    for mode, expected in want.items():
        got = group_advantages(torch.tensor(rewards), G, mode, eps)
        assert got.advantages.tolist() == pytest.approx(expected, abs=1e-5), mode
        assert got.frac_zero_std == pytest.approx(1 / 3)


def test_group_scaling_of_a_near_constant_group_stays_bounded():
    # the eps keeps a std of ~1e-7 from turning rounding noise into huge advantages
    rewards = torch.tensor([1.0, 1.0 + 1e-7, 1.0, 1.0])
    assert group_advantages(rewards, 4, "group", RUN.advantage_eps).advantages.abs().max() < 1e-2


def test_advantages_reject_bad_shapes_and_modes():
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages(torch.zeros(4), 3, RUN.scale_rewards, RUN.advantage_eps)
    with pytest.raises(ValueError, match="scale_rewards"):
        group_advantages(torch.zeros(4), 2, "std", RUN.advantage_eps)


# ------------------------------------------------------------------------------------------ KL estimators


@pytest.mark.parametrize("seed", [0, 1])
def test_k1_k3_unbiased_and_k2_biased_on_categoricals(seed):
    gen = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(6, generator=gen) * 1.5, dim=0)  # policy pi (we sample from it)
    q = torch.softmax(torch.randn(6, generator=gen) * 1.5, dim=0)  # reference
    exact = float(
        torch.distributions.kl_divergence(
            torch.distributions.Categorical(p), torch.distributions.Categorical(q)
        )
    )
    # exact expectation of each estimator under pi, by enumeration (independent of sampling)
    log_ratio_all = (q.log() - p.log()).double()
    pd = p.double()
    expect = {name: float((pd * kl_from_log_ratio(log_ratio_all, name)).sum()) for name in ("k1", "k2", "k3")}
    assert expect["k1"] == pytest.approx(exact, rel=1e-6)
    assert expect["k3"] == pytest.approx(exact, rel=1e-6)
    assert abs(expect["k2"] - exact) > 1e-3  # k2 is biased on these distributions

    # Monte Carlo with a fixed generator through the real per-token function
    n = 400_000
    idx = torch.multinomial(p, n, replacement=True, generator=gen)
    logp, ref = p.log()[idx][None, :], q.log()[idx][None, :]
    mask = torch.ones_like(logp)
    for name, tol in (("k1", 4), ("k3", 4)):
        est = per_token_kl(logp, ref, mask, name)
        se = float(est.std()) / math.sqrt(n)
        assert abs(float(est.mean()) - exact) < tol * se + 1e-6, name
    k2 = per_token_kl(logp, ref, mask, "k2")
    se = float(k2.std()) / math.sqrt(n)
    assert abs(float(k2.mean()) - expect["k2"]) < 4 * se
    assert abs(float(k2.mean()) - exact) > 4 * se


def test_k3_is_nonnegative_and_matches_formula():
    logp = torch.tensor([[-1.0, -3.0, -0.1]])
    ref = torch.tensor([[-2.0, -0.5, -0.1]])
    mask = torch.ones_like(logp)
    got = per_token_kl(logp, ref, mask, "k3")
    want = [math.exp(r - lp) - (r - lp) - 1 for lp, r in zip(logp[0].tolist(), ref[0].tolist(), strict=True)]
    assert got[0].tolist() == pytest.approx(want)
    assert (got >= 0).all()
    # one token 12 nats below the reference: the "KL 1e5" symptom, reported not hidden
    huge = per_token_kl(torch.tensor([[-13.0]]), torch.tensor([[-1.0]]), torch.ones(1, 1), "k3")
    assert float(huge) == pytest.approx(math.exp(12) - 13, rel=1e-5)


def test_masking_happens_before_exp_so_padding_cannot_overflow():
    logp = torch.tensor([[-1.0, -1e4, float("-inf")]])  # garbage at padded positions
    ref = torch.tensor([[-1.5, 0.0, 0.0]])
    mask = torch.tensor([[1, 0, 0]])
    for name in ("k1", "k2", "k3"):
        kl = per_token_kl(logp, ref, mask, name)
        assert torch.isfinite(kl).all(), name
        assert kl[0, 1:].eq(0).all()
    assert masked_log_ratio(logp, ref, mask, clamp=0.2)[0, 0] == pytest.approx(-0.2)


# ------------------------------------------------------------------------------------------ surrogate


def _ragged_batch(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    lengths = [5, 2, 4, 1]
    B, T = len(lengths), max(lengths) + 1  # one extra padded column
    mask = torch.zeros(B, T)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    logp = -torch.rand(B, T, generator=gen) * 3
    old = logp + torch.randn(B, T, generator=gen) * 0.4
    ref = logp + torch.randn(B, T, generator=gen) * 0.5
    adv = torch.tensor([1.5, -0.7, 0.3, -2.0])
    return logp, old, ref, adv, mask, lengths


def _loop_token_loss(lp, old, ref, a, eps_lo, eps_hi, beta):
    rho = math.exp(lp - old)
    surrogate = -min(rho * a, min(max(rho, 1 - eps_lo), 1 + eps_hi) * a)
    kl = math.exp(ref - lp) - (ref - lp) - 1
    return surrogate + beta * kl


# grpo_loss as the plain clipped surrogate: symmetric clip at 0.2, no KL term, no guard on the log-ratio
SURROGATE_ONLY = {
    "eps_low": 0.2,
    "eps_high": 0.2,
    "beta": 0.0,
    "ref_logp": None,
    "kl_estimator": "k3",
    "log_ratio_clamp": None,
    "objective": "ppo_clip",
}


@pytest.mark.parametrize("mode", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_aggregations_match_explicit_loops(mode):
    logp, old, ref, adv, mask, lengths = _ragged_batch()
    eps_lo, eps_hi, beta, max_len = 0.2, 0.28, 0.05, 7
    per_seq = []
    for i, n in enumerate(lengths):
        per_seq.append(
            [
                _loop_token_loss(
                    float(logp[i, t]), float(old[i, t]), float(ref[i, t]), float(adv[i]), eps_lo, eps_hi, beta
                )
                for t in range(n)
            ]
        )
    total_tokens = sum(lengths)
    want = {
        "grpo": sum(sum(s) / len(s) for s in per_seq) / len(per_seq),
        "bnpo": sum(sum(s) for s in per_seq) / total_tokens,
        "dr_grpo": sum(sum(s) for s in per_seq) / (len(per_seq) * max_len),
        "dapo": sum(sum(s) for s in per_seq) / total_tokens,
    }[mode]
    norms = BatchNorms(len(lengths), total_tokens, 1, max_len)
    out = grpo_loss(
        logp,
        old,
        adv,
        mask,
        norms,
        loss_type=mode,
        eps_low=eps_lo,
        eps_high=eps_hi,
        beta=beta,
        ref_logp=ref,
        kl_estimator="k3",
        log_ratio_clamp=None,
        objective="ppo_clip",
    )
    assert float(out.loss) == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("mode", ["grpo", "dr_grpo", "dapo"])
def test_micro_batches_sum_to_the_full_batch_loss_and_gradient(mode):
    logp, old, _, adv, mask, lengths = _ragged_batch(1)
    norms_full = BatchNorms(4, int(mask.sum()), 1, 6)
    norms_split = BatchNorms(4, int(mask.sum()), 2, 6)
    full_lp = logp.clone().requires_grad_(True)
    full = grpo_loss(full_lp, old, adv, mask, norms_full, loss_type=mode, **SURROGATE_ONLY).loss
    full.backward()
    split_lp = logp.clone().requires_grad_(True)
    parts = [
        grpo_loss(split_lp[s], old[s], adv[s], mask[s], norms_split, loss_type=mode, **SURROGATE_ONLY).loss
        for s in (slice(0, 1), slice(1, 4))
    ]
    sum(parts).backward()
    assert float(sum(parts).detach()) == pytest.approx(float(full.detach()), rel=1e-6)
    assert torch.allclose(split_lp.grad, full_lp.grad, atol=1e-7)


def test_on_policy_gradient_is_minus_advantage_over_normaliser():
    # with old = logp.detach() the ratio is 1 and d loss / d logp_t = -A_i / (active tokens) under dapo
    _, _, _, adv, mask, lengths = _ragged_batch(2)
    logp = (-torch.rand(mask.shape)).requires_grad_(True)
    norms = BatchNorms(4, int(mask.sum()), 1, 6)
    grpo_loss(logp, logp.detach(), adv, mask, norms, loss_type="dapo", **SURROGATE_ONLY).loss.backward()
    want = -adv[:, None] * mask / mask.sum()
    assert torch.allclose(logp.grad, want, atol=1e-7)


def test_clip_indicators_follow_the_sign_of_the_advantage():
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1, 1.5]]).repeat(2, 1))
    old = torch.zeros_like(logp)
    mask = torch.ones_like(logp)
    per_token, clip = ppo_clip(
        ObjectiveInputs(logp, old, torch.tensor([1.0, -1.0]), mask, mask, 0.2, 0.28, None)
    )
    # A > 0: ratio 1.5 > 1.28 is clipped (high); A < 0: ratio 0.5 < 0.8 is clipped (low)
    assert clip["high"].tolist() == [[True, False, False, True], [False, False, False, False]]
    assert clip["low"].tolist() == [[False, False, False, False], [False, True, False, False]]
    assert per_token[0].tolist() == pytest.approx([-1.28, -0.5, -1.1, -1.28])
    assert per_token[1].tolist() == pytest.approx([1.5, 0.8, 1.1, 1.5])


def test_aggregate_rejects_unknown_mode():
    with pytest.raises(ValueError, match="loss_type"):
        aggregate(torch.zeros(1, 1), torch.ones(1, 1), "mean", BatchNorms(1, 1, 1, 1))


def test_reward_part_frac_mixed_counts_groups_with_unequal_values():
    """Per reward part: the share of prompt groups whose values are not all equal (hand-counted)."""
    from prefpipe.grpo.algorithm.diagnostics import reward_metrics

    verifier = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0])  # groups of 3: mixed, equal, equal
    model = torch.tensor([0.1, 0.2, 0.3, 0.5, 0.5, 0.5, 0.0, 0.7, 0.0])  # mixed, equal, mixed
    out = reward_metrics(verifier + model, {"verifier": verifier, "reward_model": model}, group_size=3)
    assert out["reward/verifier_frac_mixed"] == pytest.approx(1 / 3)
    assert out["reward/reward_model_frac_mixed"] == pytest.approx(2 / 3)
