"""The objectives the anchors ship (grpo/algorithm/objectives.py: GSPO, CISPO) and the engine-mismatch
corrections (grpo/rollout/engines/correction.py: token and sequence truncated / masked importance sampling),
each against a hand computation: the formulas written out with Python loops and floats on small tensors,
values and gradients (d loss / d log pi_theta(t) by hand). Then on a built multi-turn episode: the sequence of
a sequence-level ratio or weight is the episode's policy tokens, never the environment's."""

from __future__ import annotations

import math

import pytest
import torch
from support.episodes import built_episodes
from support.models import chat_tokenizer, tiny_llama
from support.settings import grpo_settings

from prefpipe.grpo.algorithm.losses import BatchNorms, grpo_loss
from prefpipe.grpo.algorithm.objectives import OBJECTIVES
from prefpipe.grpo.algorithm.spans import loss_spans, plain_span
from prefpipe.grpo.algorithm.update import Learner, StepBatch, make_adamw, micro_batch_loss, update
from prefpipe.grpo.data_parallel import DataParallel
from prefpipe.grpo.rollout.engines.correction import CORRECTIONS, gap_metrics, importance_weights
from prefpipe.grpo.rollout.episodes.episode import POLICY

# three rows of lengths 4, 2, 3 (T = 4); row 0 moved up, row 1 down, row 2 barely
LENGTHS = [4, 2, 3]
OLD = [[-1.0, -2.0, -0.5, -1.5], [-0.7, -1.2, 0.0, 0.0], [-2.0, -0.3, -1.1, 0.0]]
SHIFT = [[0.30, 0.10, 0.20, 0.40], [-0.40, -0.20, 0.0, 0.0], [0.01, -0.02, 0.02, 0.0]]
ADV = [1.0, -0.5, 0.8]


def _batch():
    mask = torch.tensor([[1.0] * n + [0.0] * (4 - n) for n in LENGTHS])
    old = torch.tensor(OLD)
    logp = (old + torch.tensor(SHIFT)).requires_grad_(True)
    return logp, old, torch.tensor(ADV), mask


def _loss(objective: str, loss_type: str, eps=(0.2, 0.28), logp=None, batch=None, ratio_mask=None):
    lp, old, adv, mask = batch if batch is not None else _batch()
    lp = lp if logp is None else logp
    norms = BatchNorms(len(LENGTHS), int(mask.sum()), 1, 4)
    out = grpo_loss(
        lp, old, adv, mask, norms, loss_type=loss_type, eps_low=eps[0], eps_high=eps[1], beta=0.0,
        ref_logp=None, kl_estimator="k3", log_ratio_clamp=None, objective=objective, ratio_mask=ratio_mask,
    )  # fmt: skip
    out.loss.backward()
    return float(out.loss.detach()), lp.grad.clone(), out


def _clip(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


def _seq_weight(loss_type: str, i: int) -> float:
    """d loss / d (row i's per-token loss l_it) of an aggregation: grpo 1/(B n_i), dapo 1/N."""
    return 1.0 / (len(LENGTHS) * LENGTHS[i]) if loss_type == "grpo" else 1.0 / sum(LENGTHS)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_gspo_value_and_gradient_by_hand(loss_type):
    lo, hi = 0.05, 0.08
    want_loss, want_grad = 0.0, [[0.0] * 4 for _ in LENGTHS]
    for i, n in enumerate(LENGTHS):
        s = math.exp(sum(SHIFT[i][:n]) / n)  # (prod_t r_t)^(1/n)
        a = ADV[i]
        unclipped, clipped = s * a, _clip(s, 1 - lo, 1 + hi) * a
        per_token = -min(unclipped, clipped)
        w = _seq_weight(loss_type, i)
        want_loss += n * w * per_token
        if unclipped <= clipped:  # the ratio term wins: d(-s a)/d logp_t = -a s / n, on each of the n tokens
            for t in range(n):
                want_grad[i][t] = n * w * (-a * s / n)
    got, grad, _ = _loss("gspo", loss_type, (lo, hi))
    assert got == pytest.approx(want_loss, rel=1e-6)
    torch.testing.assert_close(grad, torch.tensor(want_grad), rtol=1e-5, atol=1e-7)
    # the clip binds where it should: row 0 (s = e^0.25 > 1.08, A > 0) and row 1 (s = e^-0.3 < 0.95, A < 0) get
    # no gradient, row 2 (s = e^0.0033) does
    assert torch.count_nonzero(grad[:2]) == 0 and torch.count_nonzero(grad[2, :3]) == 3


def test_gspo_with_all_ratios_equal_in_a_row_is_the_token_form():
    shift = torch.tensor([[0.3] * 4, [-0.1] * 4, [0.05] * 4])
    _, old, adv, mask = _batch()
    for loss_type in ("grpo", "dapo", "bnpo", "dr_grpo"):
        results = []
        for objective in ("gspo", "ppo_clip"):
            logp = (old + shift).requires_grad_(True)
            results.append(_loss(objective, loss_type, (0.2, 0.28), logp, (logp, old, adv, mask)))
        (seq_loss, seq_grad, seq_out), (tok_loss, tok_grad, tok_out) = results
        assert seq_loss == pytest.approx(tok_loss, rel=1e-6), loss_type
        torch.testing.assert_close(seq_grad, tok_grad, rtol=1e-5, atol=1e-7)
        assert torch.equal(seq_out.clip_high, tok_out.clip_high) and torch.equal(
            seq_out.clip_low, tok_out.clip_low
        )
    assert bool(seq_out.clip_high[0, :4].all())  # row 0: ratio e^0.3 > 1.28 with A > 0, in both forms


def test_gspo_ratio_runs_over_the_ratio_mask_only():
    # the last token of row 0 is in the loss but not in the ratio (an environment token under a wrong mask)
    ratio_mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    _, grad, out = _loss("gspo", "grpo", (0.5, 0.5), ratio_mask=ratio_mask)
    s0 = math.exp(sum(SHIFT[0][:3]) / 3)  # token 3's shift (0.40) does not enter
    assert out.ratio[0].tolist() == pytest.approx([s0] * 4, rel=1e-6)
    # unclipped: every loss token of row 0, token 3 included, gets -A s / (B n_0) (it trains, it is not in s)
    torch.testing.assert_close(grad[0], torch.full((4,), -ADV[0] * s0 / (3 * 4)), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
def test_cispo_value_and_gradient_by_hand_the_weight_is_stop_gradient(loss_type):
    lo, hi = 0.2, 0.28
    lp, old, adv, mask = _batch()
    want_loss, want_grad = 0.0, [[0.0] * 4 for _ in LENGTHS]
    for i, n in enumerate(LENGTHS):
        w_agg = _seq_weight(loss_type, i)
        for t in range(n):
            weight = _clip(math.exp(SHIFT[i][t]), 1 - lo, 1 + hi)
            logp_t = OLD[i][t] + SHIFT[i][t]
            want_loss += w_agg * (-weight * ADV[i] * logp_t)
            want_grad[i][t] = w_agg * (-weight * ADV[i])  # through log pi only: the weight is a constant
    got, grad, out = _loss("cispo", loss_type, (lo, hi), batch=(lp, old, adv, mask))
    assert got == pytest.approx(want_loss, rel=1e-6)
    torch.testing.assert_close(grad, torch.tensor(want_grad), rtol=1e-5, atol=1e-7)
    # row 0 token 3: r = e^0.4 > 1.28 with A > 0 is capped at 1.28 and still trains (ppo_clip gives it 0)
    assert bool(out.clip_high[0, 3])
    assert float(grad[0, 3]) == pytest.approx(-1.28 * ADV[0] * _seq_weight(loss_type, 0))
    _, ppo_grad, _ = _loss("ppo_clip", loss_type, (lo, hi))
    assert float(ppo_grad[0, 3]) == 0.0


def test_objectives_agree_on_policy():
    """num_iterations 1, no engine: every ratio is 1 and all three objectives give the same gradient."""
    grads = []
    for objective in sorted(OBJECTIVES):
        lp, old, adv, mask = _batch()
        logp = lp.detach().clone().requires_grad_(True)
        grads.append(_loss(objective, "dapo", logp=logp, batch=(logp, logp.detach(), adv, mask))[1])
    for g in grads[1:]:
        torch.testing.assert_close(g, grads[0], rtol=1e-6, atol=1e-8)


# engine mismatch: log rho_t = log pi_old - log pi_engine per token, 4 rows of 3 tokens, the last token of row 3
# outside the ratio mask (an environment token: its huge rho must not count)
LOG_RHO = [[0.2, 0.3, 0.2], [-0.5, 0.1, -0.3], [0.9, 0.6, -0.1], [0.1, 0.1, 9.0]]
RATIO_MASK = [[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 0]]
CAP = 3.0


def _hand_weights(mode: str, cap: float = CAP) -> list[list[float]]:
    out = []
    for row, on in zip(LOG_RHO, RATIO_MASK, strict=True):
        rho = [math.exp(x) for x in row]
        prod = math.exp(sum(x for x, m in zip(row, on, strict=True) if m))
        per = {
            "token_truncate": [min(r, cap) for r in rho],
            "token_mask": [r if r <= cap else 0.0 for r in rho],
            "sequence_truncate": [min(prod, cap)] * 3,
            "sequence_mask": [prod if prod <= cap else 0.0] * 3,
        }[mode]
        out.append([w if m else 1.0 for w, m in zip(per, on, strict=True)])
    return out


@pytest.mark.parametrize("mode", ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"])
def test_importance_corrections_by_hand(mode):
    old = torch.full((4, 3), -1.0)
    engine = old - torch.tensor(LOG_RHO)
    w = importance_weights(old, engine, torch.tensor(RATIO_MASK), mode, CAP)
    torch.testing.assert_close(w, torch.tensor(_hand_weights(mode)), rtol=1e-6, atol=1e-7)
    assert importance_weights(old, engine, torch.tensor(RATIO_MASK), "none", CAP) is None


def test_sequence_mask_drops_exactly_the_sequences_over_the_cap():
    # sequence ratios e^0.7 = 2.01, e^-0.7, e^1.5 = 4.48, e^0.2: only row 2 exceeds 3 and drops out whole
    old = torch.full((4, 3), -1.0)
    w = importance_weights(old, old - torch.tensor(LOG_RHO), torch.tensor(RATIO_MASK), "sequence_mask", CAP)
    dropped = [bool((w[i][torch.tensor(RATIO_MASK[i]).bool()] == 0).all()) for i in range(4)]
    assert dropped == [False, False, True, False]
    assert all(bool((w[i] > 0).all()) for i in (0, 1, 3))
    assert set(CORRECTIONS) == {"none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"}


@pytest.mark.parametrize(("mode", "cap", "changed"), [("token_truncate", 2.0, 1), ("sequence_mask", 3.0, 2)])
def test_the_logged_weights_are_the_corrections_own(mode, cap, changed):
    """is_weight_mean / is_truncated_ratio over the 10 policy tokens: token_truncate at 2 caps one token (row 2's
    e^0.9), sequence_mask at 3 drops row 2 (its 2 policy tokens)."""
    old = torch.full((4, 3), -1.0)
    m = gap_metrics(old, old - torch.tensor(LOG_RHO), torch.tensor(RATIO_MASK), mode, cap, DataParallel())
    weights = _hand_weights(mode, cap)
    hand = [w for ws, on in zip(weights, RATIO_MASK, strict=True) for w, k in zip(ws, on, strict=True) if k]
    assert m["is_weight_mean"] == pytest.approx(sum(hand) / len(hand), rel=1e-6)
    assert m["is_truncated_ratio"] == pytest.approx(changed / 10)


@pytest.mark.parametrize("mask_mode", ["completion", "with_environment"])
def test_on_an_episode_the_sequence_is_the_policy_tokens(mask_mode):
    """GSPO's ratio and a sequence-level engine weight over a built episode: hand-computed from the policy
    tokens found by walking each episode's owners; the environment's tokens move neither."""
    tok = chat_tokenizer()
    rollout, episodes = built_episodes(tok, 2)
    n, width = rollout.completion_ids.shape
    g = torch.Generator().manual_seed(0)
    delta = torch.rand(n, width, generator=g) * 0.02 - 0.01  # log pi - log pi_old, per completion token
    env = torch.tensor(
        [[o != POLICY for o in e.owners] + [False] * (width - len(e.owners)) for e in episodes]
    )
    delta = torch.where(env, torch.full_like(delta, 5.0), delta)  # wild on environment tokens
    rollout.sampler_logprobs = torch.where(env, torch.full_like(delta, -30.0), torch.full_like(delta, -1.02))
    settings = grpo_settings(
        {"policy_objective": "gspo", "mask_mode": mask_mode, "beta": 0.0, "mask_truncated_completions": False,
         "epsilon_low": 0.5, "epsilon_high": 0.5, "rollout": {"importance_correction": "sequence_truncate",
         "importance_cap": 100.0}}
    )  # fmt: skip
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    for sp in loss_spans(rollout, mask_mode, False, 4):
        mb = plain_span(rollout, sp)
        c = sp.n_completion
        old = torch.full(mb.mask.shape, -1.0)
        logp = old.clone()
        logp[:, -c:] += delta[mb.rows, :c]
        terms = micro_batch_loss(settings, rollout, mb, (logp, old, None), adv[mb.rows])
        for k, row in enumerate(mb.rows.tolist()):
            owners = episodes[row].owners
            policy = [j for j, o in enumerate(owners) if o == POLICY]
            s = math.exp(sum(float(delta[row, j]) for j in policy) / len(policy))
            on = mb.mask[k].bool()
            assert terms.clip["ratio"][k][on].tolist() == pytest.approx([s] * int(on.sum()), rel=1e-5)
            w = min(math.exp(len(policy) * 0.02), 100.0)  # rho_t = e^(-1 + 1.02) on each policy token
            cols = [sp.n_scored - c + j for j in policy]
            assert terms.sampler_weights[k, cols].tolist() == pytest.approx([w] * len(policy), rel=1e-5)
            env_cols = [sp.n_scored - c + j for j, o in enumerate(owners) if o != POLICY]
            assert terms.sampler_weights[k, env_cols].tolist() == [1.0] * len(env_cols)


def _trainer_grads(tok, objective: str, iterations: int) -> list[torch.Tensor]:
    """The trainer's own update (grpo/algorithm/update.py) on built episodes: the last pass's gradients."""
    settings = grpo_settings(
        {"num_generations": 2, "beta": 0.0, "micro_batch_size": 2, "mask_truncated_completions": False,
         "max_grad_norm": 1e9, "policy_objective": objective, "num_iterations": iterations,
         "epsilon_low": 1e-3, "epsilon_high": 1e-3}
    )  # fmt: skip
    policy = tiny_llama(tok, seed=0)
    params = list(policy.parameters())
    learner = Learner(settings, policy, make_adamw(params, settings), params, None, DataParallel(), "cpu")
    rollout, _ = built_episodes(tok, 2)
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0])
    update(learner, StepBatch([{}] * 4, rollout, adv.clone(), {}, adv))
    return [p.grad.clone() for p in params]


def test_the_trainer_takes_the_objective_on_episodes():
    """On-policy (one pass) the three objectives give the trainer the same gradient; on the second pass of
    num_iterations 2 the ratios have moved past the (narrow) clip range and they differ: where the clip binds,
    ppo_clip drops a token, gspo its whole sequence, cispo keeps it at the capped weight."""
    tok = chat_tokenizer()
    first = {name: _trainer_grads(tok, name, 1) for name in sorted(OBJECTIVES)}
    for name in ("gspo", "cispo"):
        for a, b in zip(first[name], first["ppo_clip"], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)
    second = {name: _trainer_grads(tok, name, 2) for name in sorted(OBJECTIVES)}
    for name in ("gspo", "cispo"):
        gap = max(float((a - b).abs().max()) for a, b in zip(second[name], second["ppo_clip"], strict=True))
        assert gap > 1e-5, name
