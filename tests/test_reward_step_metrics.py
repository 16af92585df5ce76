"""train.metrics_every (reward/fast/step_metrics.py): a reward training step leaves its metrics on the device and
the trainer reads them every N steps. The rows it logs (what the stage writes to metrics.jsonl) equal the
per-step read's row for row: same steps, same keys in the same order, same values (observed: bit-identical;
bound 1e-12 relative); it reads the host once per window (the count a run reports: steps / N plus one read
per checkpoint or last step off the grid); and a loss that really goes non-finite (a learning rate that blows
the weights up) stops the run at the read after it, naming the step where it happened, with the rows logged
up to that step as the per-step read logs them."""

from __future__ import annotations

import math

import pytest
import torch
from support.models import build_reward, save_tiny_base
from support.rows import rps_pairs
from test_reward_train import _pairs

from prefpipe.reward.train_setup import metrics_every_for
from prefpipe.reward.trainer import RewardTrainer

REL = 1e-12  # float64 sums read per step or per window (observed: equal)
TRAIN = {"steps": 7, "batch_size": 4, "micro_batch_size": 2}  # 2 micro-batches: accumulation inside a step


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    return save_tiny_base(tmp_path_factory.mktemp("tiny_base"))


def _run(base, out, every, head="bgpm", **train):
    """Train on 10 pairs (batches cross epochs); the rows as log_fn got them and the host reads."""
    rm, settings = build_reward(base, head, train={**TRAIN, "metrics_every": every, **train})
    logged: list[dict] = []
    trainer = RewardTrainer(
        rm, settings, _pairs(rps_pairs())[:10], out, log_fn=lambda **row: logged.append(row)
    )
    result = trainer.train()
    assert logged == result.history
    return logged, trainer.metrics.reads


def _same_rows(ref: list[dict], got: list[dict]) -> None:
    assert [r["step"] for r in got] == [r["step"] for r in ref]
    for a, b in zip(ref, got, strict=True):
        assert list(b) == list(a)  # same keys, same order
        for key, value in a.items():
            if key == "step_time":  # wall time, not a metric of the model
                continue
            if value is None or isinstance(value, int):
                assert b[key] == value, key
            else:
                assert b[key] == pytest.approx(value, rel=REL, nan_ok=True), (a["step"], key)


@pytest.mark.parametrize("head", ["bt", "bgpm"])
def test_rows_read_every_n_steps_equal_the_per_step_rows(tiny_base, tmp_path, head):
    ref, reads_1 = _run(tiny_base, tmp_path / "1", 1, head)
    got, reads_3 = _run(tiny_base, tmp_path / "3", 3, head)
    _same_rows(ref, got)
    assert reads_1 == 7 and reads_3 == math.ceil(7 / 3)  # windows 1-3, 4-6, 7
    assert ref[-1]["kl_beta"] > 0 if head == "bgpm" else ref[-1]["kl_beta"] == 0
    assert all(r["grad_norm"] > 0 and r["head_grad_norm"] > 0 for r in got)
    diffs = [
        abs(b[k] - a[k])
        for a, b in zip(ref, got, strict=True)
        for k in a
        if isinstance(a[k], float) and k != "step_time"
    ]
    print(f"{head}: metrics_every 3 vs 1, max abs difference over every logged value {max(diffs):.1e}")


def test_checkpoints_read_off_the_grid_and_a_resumed_run_logs_the_same_rows(tiny_base, tmp_path):
    """checkpoint_every 2 with metrics_every 3: a read before each checkpoint (the history it saves is whole):
    reads at steps 2, 3, 4, 6, 7; the rows stay those of the per-step read, and a rerun resuming from the step-6
    checkpoint logs them again."""
    ref, _ = _run(tiny_base, tmp_path / "1", 1, checkpoint_every=2, keep_checkpoints=True)
    got, reads = _run(tiny_base, tmp_path / "3", 3, checkpoint_every=2, keep_checkpoints=True)
    _same_rows(ref, got)
    assert reads == 5
    saved = sorted(p.name for p in (tmp_path / "3" / "checkpoints").glob("step-*"))
    assert saved == ["step-00000006"]  # the latest kept
    resumed, reads = _run(tiny_base, tmp_path / "3", 3, checkpoint_every=2, keep_checkpoints=True)
    _same_rows(ref, resumed)
    assert reads == 1  # step 7 alone


def _blow_up(base, out, every):
    """Adam at learning rate 1e30 without clipping: step 1 moves every weight by about 1e30, so the forward of
    step 2 overflows (inf logits, NaN loss). Returns the error and the rows logged before it."""
    logged: list[dict] = []
    rm, settings = build_reward(
        base, "bt",
        train={**TRAIN, "metrics_every": every, "learning_rate": 1e30, "head_learning_rate": 1e30,
               "warmup_steps": 0, "lr_schedule": "constant", "max_grad_norm": 1e38},
    )  # fmt: skip
    trainer = RewardTrainer(
        rm, settings, _pairs(rps_pairs())[:10], out, log_fn=lambda **row: logged.append(row)
    )
    with pytest.raises(FloatingPointError) as info:
        trainer.train()
    return str(info.value), logged, trainer.metrics.reads


def test_a_non_finite_loss_stops_the_run_naming_its_step(tiny_base, tmp_path):
    first, rows_1, reads_1 = _blow_up(tiny_base, tmp_path / "1", 1)
    # the per-step read: finite up to the step before, non-finite at the step it names
    bad = rows_1[-1]["step"]
    assert all(math.isfinite(r["loss"]) for r in rows_1[:-1]) and not math.isfinite(rows_1[-1]["loss"])
    assert bad == 2 and reads_1 == 2
    assert "non-finite loss" in first and "at step 2 " in first
    later, rows_4, reads_4 = _blow_up(tiny_base, tmp_path / "4", 4)
    assert "at step 2 " in later and "train.metrics_every: 4" in later and reads_4 == 1  # read at step 4
    _same_rows(rows_1, rows_4)  # logged up to the bad step only, as the per-step read


def test_the_read_interval_follows_the_device(tiny_base):
    _, settings = build_reward(tiny_base, "bt", train={"metrics_every": 1, "cuda_metrics_every": 10})
    assert metrics_every_for(torch.device("cpu"), settings.train) == 1
    assert metrics_every_for(torch.device("cuda", 0), settings.train) == 10
