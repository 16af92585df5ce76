"""Training on a real tiny Llama: cyclic preferences (GPM vs BT), exact resume after SIGTERM, gradient
accumulation, and the stage CLI end to end."""

from __future__ import annotations

import json
import logging
import math
import os
import random
import signal
import subprocess
import sys

import pytest
import torch
from support.models import build_reward, save_tiny_base
from support.rows import rps_pairs, write_reward_data
from support.settings import reward_settings, stage_json
from support.stages import stage_env

from prefpipe.data import synthetic_cyclic
from prefpipe.reward.pairs import Pair
from prefpipe.reward.sanity_accuracy import pair_accuracy
from prefpipe.reward.trainer import RewardTrainer, TrainingInterrupted
from prefpipe.train_reward import main

METRIC_KEYS = {"preference_loss", "kl_loss", "kl_beta", "loss", "prob", "accuracy", "grad_norm", "lr", "step"}
CYCLIC_TRAIN = {
    "steps": 60,
    "batch_size": 12,
    "micro_batch_size": 12,
    "learning_rate": 1e-3,
    "head_learning_rate": 1e-2,
}

# The world's cyclic subset starts at a saddle, one per game: a skew-symmetric score's first-order gradients
# cancel around a cycle, and on a near-character-level base the last-token state carries a reply's move only
# weakly and entangled with its wording. The default recipe (issue 16) is tested as the run uses it: the head
# also reads the response tokens' mean input embedding (backbone.embedding_features), standardised
# (head.standardize), and is refitted full-batch on cached features after fine-tuning (train.head_fit);
# only the number of fine-tuning steps is smaller. With the previous recipe (last-token state only, no head
# fitting) the default run's GPM stayed at 0.55-0.59 on held-out cyclic pairs.
WORLD_CYCLIC_TRAIN = {"steps": 40, "batch_size": 32, "micro_batch_size": 32}


def _default_recipe() -> dict:
    """The default variant's head, backbone and training keys (config.yaml), for the world cyclic test."""
    from prefpipe.settings.build import to_mapping

    default = reward_settings()
    return {
        "head": to_mapping(default.head),
        "backbone": to_mapping(default.backbone),
        "train": {**to_mapping(default.train), **WORLD_CYCLIC_TRAIN},
    }


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    return save_tiny_base(tmp_path_factory.mktemp("tiny_base"))


def _pairs(rows: list[dict]) -> list[Pair]:
    return [Pair(r["id"], r["prompt"], r["chosen"], r["rejected"], r["subset"]) for r in rows]


def _train(base, head, out_dir, pairs, /, seed=0, on_step_end=None, **overrides):
    rm, settings = build_reward(base, head, seed=seed, **overrides)
    trainer = RewardTrainer(rm, settings, pairs, out_dir, on_step_end=on_step_end)
    return rm, trainer.train()


def test_gpm_learns_a_cycle_that_bt_cannot(tiny_base, tmp_path):
    pairs = _pairs(rps_pairs())
    gpm, gpm_result = _train(tiny_base, "gpm", tmp_path / "gpm", pairs, train=CYCLIC_TRAIN)
    bt, bt_result = _train(tiny_base, "bt", tmp_path / "bt", pairs, train=CYCLIC_TRAIN)
    gpm_acc = pair_accuracy(gpm.eval(), pairs, batch_size=32)["overall"]
    bt_acc = pair_accuracy(bt.eval(), pairs, batch_size=32)["overall"]
    assert gpm_acc >= 0.95, gpm_acc
    assert bt_acc <= 0.70, bt_acc  # a scalar reward gets at most 2 of the 3 pairs of a cycle right
    assert gpm_result.final_metrics["loss"] < 0.1
    # BT's loss on a balanced 3-cycle is minimised by equal rewards: it cannot go below log 2.
    assert bt_result.final_metrics["preference_loss"] >= math.log(2) - 1e-3
    assert set(gpm_result.final_metrics) >= METRIC_KEYS


def _world_cyclic_pairs(combos: list, split: str) -> list[Pair]:
    return [
        Pair(f"cyclic-{split}-{i}-{edge}", prompt, chosen, rejected, "cyclic-rps")
        for i, combo in enumerate(combos)
        for edge, (prompt, chosen, rejected) in enumerate(synthetic_cyclic.triple_rows(combo))
    ]


def test_gpm_learns_the_world_cyclic_subset_on_held_out_triples(tiny_base, tmp_path):
    """The synthetic world's own intransitive triples (6 games, held-out prompt/response phrasings), split as
    prep_data splits them: a GPM generalises the cycles to unseen triples, a scalar BT reward cannot."""
    combos_train, combos_test = synthetic_cyclic.split_combinations(100, 33, random.Random("0:cyclic"))
    train, test = _world_cyclic_pairs(combos_train, "train"), _world_cyclic_pairs(combos_test, "test")
    accuracy = {}
    for head in ("gpm", "bt"):
        recipe = _default_recipe()
        recipe["head"] = {k: v for k, v in recipe["head"].items() if k not in ("type", "bayes")}
        model, _ = _train(tiny_base, head, tmp_path / head, train, data={"max_length": 96}, **recipe)
        accuracy[head] = pair_accuracy(model.eval(), test, batch_size=32)["overall"]
    gpm_acc, bt_acc = accuracy["gpm"], accuracy["bt"]
    print(f"world cyclic subset, {len(test)} held-out pairs: GPM {gpm_acc:.3f}, BT {bt_acc:.3f}")
    assert gpm_acc >= 0.95, gpm_acc
    assert bt_acc <= 2 / 3 + 1e-9, bt_acc  # a scalar reward gets at most 2 of a triple's 3 pairs right


def _comparable(history):
    return [{k: v for k, v in row.items() if k != "step_time"} for row in history]


def test_resume_after_sigterm_matches_an_uninterrupted_run(tiny_base, tmp_path):
    pairs = _pairs(rps_pairs())[:10]  # 10 pairs, batch 4: batches cross epoch boundaries
    train = {
        "steps": 7,
        "batch_size": 4,
        "micro_batch_size": 2,
        "checkpoint_every": 3,
        "keep_checkpoints": True,
    }
    full_rm, full = _train(tiny_base, "bgpm", tmp_path / "full", pairs, train=train)

    def kill_at_5(step, row):
        if step == 5:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(TrainingInterrupted) as info:
        _train(tiny_base, "bgpm", tmp_path / "cut", pairs, on_step_end=kill_at_5, train=train)
    assert info.value.step == 5 and (tmp_path / "cut" / "checkpoints" / "step-00000005").is_dir()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handler restored
    torch.manual_seed(123)  # the resumed run must not depend on the RNG state it starts with
    resumed_rm, resumed = _train(tiny_base, "bgpm", tmp_path / "cut", pairs, seed=7, train=train)
    assert resumed.resumed_from == 5
    assert _comparable(resumed.history) == _comparable(full.history)  # replayed 1-5, then identical 6-7
    for (name, a), (_, b) in zip(full_rm.state_dict().items(), resumed_rm.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert full.history[-1]["kl_beta"] > 0 and full.history[0]["kl_beta"] == 0


def test_gradient_accumulation_matches_one_big_batch(tiny_base, tmp_path):
    """Same global batch as 1, 2 or 4 micro-batches: same loss and same (pre-clip) gradient norm."""
    pairs = _pairs(rps_pairs())
    runs = {}
    for micro in (8, 4, 2):
        # one padded batch per micro-batch: the test isolates accumulation (bucketed padding, whose float
        # rounding differs with the micro-batch's rows, has its own test in test_reward_fast_paths.py)
        train = {"steps": 3, "batch_size": 8, "micro_batch_size": micro, "length_buckets": 1}
        runs[micro] = _train(tiny_base, "gpm", tmp_path / str(micro), pairs, train=train)[1].history
    for micro in (4, 2):
        for ref, got in zip(runs[8], runs[micro], strict=True):
            for key in ("loss", "grad_norm", "prob", "accuracy"):
                # float32 summation order over other micro-batch splits (step 1: 1.1e-6 relative seen on the
                # grad norm here, already at the previous commit); later steps: that noise amplified by Adam
                assert got[key] == pytest.approx(ref[key], rel=1e-5 if ref["step"] == 1 else 1e-3), (
                    micro,
                    key,
                )
    assert runs[8][0]["grad_norm"] > 1.0  # clipping was active, so the norm check covers the whole gradient


def test_stage_cli_writes_model_metrics_and_summary(tiny_base, tmp_path, caplog):
    data = write_reward_data(tmp_path / "data")
    out = tmp_path / "reward" / "bgpm"
    settings = reward_settings(
        {
            "head": {"dim": 4, "bayes": {"kl_warmup_steps": 3}},
            "data": {"max_length": 48},
            "train": {
                "steps": 6,
                "batch_size": 6,
                "micro_batch_size": 3,
                "learning_rate": 1e-3,
                "head_learning_rate": None,
                "warmup_steps": 2,
                "lr_schedule": "cosine",
            },
            "eval": {"batch_size": 4, "train_pairs": 5, "test_pairs": True},
        },
        variant="bgpm",
    )
    config = stage_json(settings)
    args = ["--config", config, "--data", str(data), "--base", str(tiny_base), "--out", str(out)]
    assert main(args) == 0
    assert (out / "model" / "head_config.json").exists() and (out / "model" / "head.safetensors").exists()
    assert not (out / "checkpoints").exists()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 7)) and all(set(r) >= METRIC_KEYS for r in rows)
    # linear warm-up over 2 steps, then cosine decay to 0 at step 6
    expected_lr = [1e-3 * (t / 2 if t < 2 else 0.5 * (1 + math.cos(math.pi * (t - 2) / 4))) for t in range(6)]
    assert [r["lr"] for r in rows] == pytest.approx(expected_lr, rel=1e-6)
    assert [r["kl_beta"] for r in rows[:4]] == pytest.approx([0, 1e-4 / 3, 2e-4 / 3, 1e-4])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["head_type"] == "bgpm" and summary["train_pairs"] == 18
    assert set(summary["accuracy"]["test"]["subsets"]) == {"cyclic-rps", "chat-arith"}
    assert summary["accuracy"]["train"]["n"] == 5
    assert summary["truncated"] == {"pairs": 0, "rows": {}}
    saved = json.loads((out / "config.json").read_text())["config"]
    assert saved["head"]["bayes"]["prior_variance"] == 10.0 and saved == settings.to_dict()
    odd = json.loads(config)
    odd["head"]["dim"] = 3
    bad = [
        "--config",
        json.dumps(odd),
        "--data",
        str(data),
        "--base",
        str(tiny_base),
        "--out",
        str(tmp_path / "bad"),
    ]
    with caplog.at_level(logging.ERROR):
        assert main(bad) == 2
    assert "config.head.dim: 3 is not a multiple of 2" in caplog.text
    assert not (tmp_path / "bad").exists()


def test_two_process_ddp_on_cpu_matches_single_process(tiny_base, tmp_path):
    """The same stage under torchrun (2 CPU processes, gloo): same global batches, so the same metrics."""
    data = write_reward_data(tmp_path / "data")
    config = stage_json(
        reward_settings(
            {
                "head": {"dim": 4},
                "data": {"max_length": 48},
                # The loop alone: a pre-fitted head (main process only, broadcast by DDP's construction) gives
                # the same losses but grad norms only within rel 3e-4 (a fitted head's large, cancelling
                # per-pair gradients summed in another order); the after-fit runs on the main process only.
                "train": {
                    "steps": 3,
                    "batch_size": 8,
                    "micro_batch_size": 2,
                    "learning_rate": 1e-3,
                    "head_fit": {"before_steps": 0, "after_steps": 20},
                },
                "eval": {"batch_size": 4, "train_pairs": 0},
            }
        )
    )
    common = ["--config", config, "--data", str(data), "--base", str(tiny_base)]
    env = stage_env()  # the subprocesses import this checkout's src
    launcher = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        "29533",
    ]
    ddp = subprocess.run([*launcher, "-m", "prefpipe.train_reward", *common, "--out", str(tmp_path / "ddp")],
                         env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    assert main([*common, "--out", str(tmp_path / "single")]) == 0

    def metrics(name):
        return [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]

    single, multi = metrics("single"), metrics("ddp")
    assert [r["step"] for r in multi] == [1, 2, 3]  # one writer: the main process
    for a, b in zip(single, multi, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5) and b["grad_norm"] == pytest.approx(
            a["grad_norm"], rel=1e-5
        )
    worst = {
        key: max(abs(b[key] - a[key]) / abs(a[key]) for a, b in zip(single, multi, strict=True))
        for key in ("loss", "grad_norm")
    }
    print(f"DDP (2 gloo processes) vs 1 process, max relative deviation over {len(single)} steps: {worst}")


def test_lora_and_gradient_checkpointing_train_only_the_adapter_and_head(tiny_base, tmp_path):
    pairs = _pairs(rps_pairs())
    lora = {"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0}
    train = {"steps": 3, "batch_size": 6, "micro_batch_size": 6}
    plain, plain_run = _train(tiny_base, "gpm", tmp_path / "a", pairs, lora=lora, train=train)
    ckpt, ckpt_run = _train(tiny_base, "gpm", tmp_path / "b", pairs, lora=lora, train=train,
                            backbone={"gradient_checkpointing": True})  # fmt: skip
    assert ckpt.backbone.get_base_model().is_activation_checkpointing
    for a, b in zip(plain_run.history, ckpt_run.history, strict=True):  # recomputation changes nothing
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-6) and b["grad_norm"] == pytest.approx(
            a["grad_norm"], rel=1e-5
        )
    init, _ = build_reward(tiny_base, "gpm", lora=lora)
    before, after = init.state_dict(), ckpt.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all("lora_" in k or k.startswith("head.") for k in changed)
    assert any("lora_B" in k for k in changed)


def test_head_grad_norm_is_the_norm_of_the_head_gradients_only(tmp_path):
    """The logged head_grad_norm equals torch's own total norm over the head parameters (and not the backbone)."""
    import torch
    from support.models import build_reward, save_tiny_base

    from prefpipe.reward.train_setup import head_grad_norm

    rm, _ = build_reward(save_tiny_base(tmp_path / "base"), "gpm")
    assert head_grad_norm(rm) is None  # no gradients yet
    batch = rm.encoder.pad(rm.encoder.tokenize_many(["a b", "c d"], ["e", "f g"]))
    out = rm(**batch)
    (out["embedding"].sum() + out["gate"].pow(2).sum()).backward()
    expected = torch.nn.utils.get_total_norm([p.grad for p in rm.head.parameters()])
    assert head_grad_norm(rm) == pytest.approx(float(expected), rel=1e-6)
    everything = torch.nn.utils.get_total_norm([p.grad for p in rm.parameters() if p.grad is not None])
    assert float(everything) > float(expected)  # the backbone's gradients are not counted
