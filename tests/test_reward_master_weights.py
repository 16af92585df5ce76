"""backbone.precision: bf16_master: the backbone trains with bf16 weights stepped through fp32 master copies
(common/optim/master_weights.py), the optimizer's state is fp32, the model leaves training holding the fp32
copies, a resumed run continues from the copies exactly, and DeepSpeed / FSDP launches are refused.

Against fp32 training on the same seed (BT, 8 steps, lr 1e-3, head lr 1e-3, no standardisation, on the tiny
base): every step's loss within LOSS_RTOL relative and the final model's scores within SCORE_ATOL. Observed
(printed by the test): loss 2.3e-2 relative at worst, scores 9e-3 absolute. The forward runs in bf16 throughout
(the residual stream too, not autocast's fp32), so the curves are close, not equal. GPM is checked for the
dtypes only: on the tiny random base its scores read feature differences between responses that are below
bf16's resolution (the first step's loss, same weights: 0.376 fp32 vs 0.500 bf16), so no tolerance there says
anything about the master weights; benchmarks/device_check.py runs GPM bf16_master on the 0.5B model."""

from __future__ import annotations

import os
import signal

import pytest
import torch
from support.models import build_reward, save_tiny_base
from support.rows import rps_pairs
from test_reward_train import _pairs

from prefpipe.common.config import ConfigError
from prefpipe.common.optim.master_weights import MasterWeights
from prefpipe.reward.train_setup import make_accelerator
from prefpipe.reward.trainer import RewardTrainer, TrainingInterrupted

LOSS_RTOL, SCORE_ATOL = 5e-2, 2e-2
TRAIN = {"steps": 8, "batch_size": 4, "micro_batch_size": 2, "learning_rate": 1e-3, "head_learning_rate": 1e-3,
         "head_fit": {"after_steps": 0}}  # fmt: skip


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    return save_tiny_base(tmp_path_factory.mktemp("tiny_base"))


def _train(base, out, precision, head="gpm", on_step_end=None, **train):
    rm, settings = build_reward(
        base, head, backbone={"precision": precision}, head={"standardize": False}, train={**TRAIN, **train}
    )
    linear = next(m for m in rm.backbone.modules() if isinstance(m, torch.nn.Linear))
    seen: set[tuple[torch.dtype, torch.dtype]] = (
        set()
    )  # (weight, output) dtypes of a backbone matmul in training
    linear.register_forward_hook(
        lambda m, _i, out: seen.add((m.weight.dtype, out.dtype)) if m.training else None
    )
    trainer = RewardTrainer(rm, settings, _pairs(rps_pairs())[:10], out, on_step_end=on_step_end)
    return rm, trainer, trainer.train(), seen


def _scores(rm) -> torch.Tensor:
    pairs = _pairs(rps_pairs())[:10]
    prompts = [p.prompt for p in pairs]
    a = rm.eval().encode(prompts, [p.chosen for p in pairs], batch_size=8)
    b = rm.encode(prompts, [p.rejected for p in pairs], batch_size=8)
    return rm.compare(a, b)[0]


@pytest.mark.parametrize("head", ["gpm", "bt"])
def test_bf16_master_follows_fp32_training_with_fp32_optimizer_state(tiny_base, tmp_path, head):
    ref_rm, _, ref, ref_seen = _train(tiny_base, tmp_path / "fp32", "fp32", head)
    rm, trainer, got, seen = _train(tiny_base, tmp_path / "bf16", "bf16_master", head)
    assert ref_seen == {(torch.float32, torch.float32)} and seen == {(torch.bfloat16, torch.bfloat16)}
    opt = trainer.optimizer
    assert isinstance(opt, MasterWeights) and {m.dtype for m in opt.master} == {torch.float32}
    state = [v for s in opt.inner.state.values() for k, v in s.items() if k in ("exp_avg", "exp_avg_sq")]
    assert len(state) == 2 * len(opt.master) and {v.dtype for v in state} == {torch.float32}
    # after training: fp32 parameters holding the master copies exactly
    assert {p.dtype for p in rm.parameters()} == {torch.float32}
    for p, m in zip(opt.params, opt.master, strict=True):
        assert p.dtype == torch.float32 and torch.equal(p, m)
    losses = torch.tensor([r["loss"] for r in ref.history]), torch.tensor([r["loss"] for r in got.history])
    assert not torch.equal(losses[0], losses[1])  # bf16 really ran
    rel = ((losses[1] - losses[0]).abs() / losses[0].abs()).max().item()
    score_diff = (_scores(rm) - _scores(ref_rm)).abs().max().item()
    print(
        f"{head} bf16_master vs fp32, 8 steps: loss max rel {rel:.1e}; final scores max abs {score_diff:.1e}"
    )
    if head == "bt":
        assert rel <= LOSS_RTOL and score_diff <= SCORE_ATOL


def test_bf16_master_resumes_from_the_fp32_copies(tiny_base, tmp_path):
    full_rm, _, full, _ = _train(tiny_base, tmp_path / "full", "bf16_master", checkpoint_every=0)

    def kill_at_3(step, row):
        if step == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(TrainingInterrupted):
        _train(tiny_base, tmp_path / "cut", "bf16_master", on_step_end=kill_at_3)
    rm, trainer, resumed, _ = _train(tiny_base, tmp_path / "cut", "bf16_master")
    assert resumed.resumed_from == 3
    strip = [{k: v for k, v in r.items() if k != "step_time"} for r in full.history]
    assert [{k: v for k, v in r.items() if k != "step_time"} for r in resumed.history] == strip
    for (name, a), (_, b) in zip(full_rm.state_dict().items(), rm.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("flag", ["ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP"])
def test_refused_where_the_launcher_keeps_its_own_master_weights(tiny_base, monkeypatch, flag):
    _, settings = build_reward(tiny_base, "bt", backbone={"precision": "bf16_master"})
    monkeypatch.setenv(flag, "true")
    with pytest.raises(ConfigError, match="bf16_master cannot run under (DeepSpeed|FSDP)"):
        make_accelerator(settings)


def test_clipping_runs_on_the_fp32_copies():
    """clip_grad_norm_ then step equals an fp32 AdamW on the bf16 gradients cast up and clipped by torch."""
    torch.manual_seed(0)
    start = torch.randn(64)
    half = torch.nn.Parameter(start.bfloat16())
    ref = torch.nn.Parameter(start.bfloat16().float())
    opt = MasterWeights([half], lambda ps: torch.optim.AdamW(ps, lr=1e-2))
    ref_opt = torch.optim.AdamW([ref], lr=1e-2)
    for _ in range(3):
        grad = (torch.randn(64) * 10).bfloat16()
        half.grad, ref.grad = grad.clone(), grad.float()
        norm = opt.clip_grad_norm_(1.0)
        assert norm.dtype == torch.float32
        assert norm == torch.nn.utils.clip_grad_norm_([ref], 1.0)
        opt.step()
        ref_opt.step()
        assert torch.equal(opt.master[0], ref.detach()) and torch.equal(
            half.detach(), ref.detach().bfloat16()
        )
