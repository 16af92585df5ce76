"""Kill-and-resume at the stage level: the real stage CLIs (`python -m prefpipe.train_reward` and
`python -m prefpipe.train_grpo`) as subprocesses, SIGTERM once a training step has been logged (what SLURM sends
before preemption or time-out), the same command again, and the end result compared with an uninterrupted run
of the same seed: every metrics.jsonl row (timing fields excluded), the summary and the saved weights agree
within TOL. In between, a rerun with a changed config must refuse the checkpoint (exit 2, folder named,
nothing touched).
"""

from __future__ import annotations

import json
from pathlib import Path

from support.interrupts import (
    jsonl_rows,
    max_deviation,
    run_stage_process,
    signal_mid_run,
    stage_command,
    summary,
    weights_deviation,
)
from support.models import save_tiny_base, save_tiny_policy
from support.rows import rl_rows, write_reward_data
from support.settings import grpo_settings, reward_settings, stage_json

from prefpipe.common.io import write_jsonl
from prefpipe.settings.merge import deep_merge


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def _refuses_other_config(cmd: list[str], out: Path, checkpoint: Path) -> None:
    """A rerun with another config stops before touching anything and names the checkpoint folder."""
    before, metrics = _snapshot(checkpoint), (out / "metrics.jsonl").read_text()
    result = run_stage_process(cmd)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "different config" in result.stderr and str(checkpoint) in result.stderr, result.stderr[-3000:]
    assert _snapshot(checkpoint) == before
    assert (out / "metrics.jsonl").read_text() == metrics  # the record was not restarted
    assert not (out / "summary.json").exists()


# ------------------------------------------------------------------------------------------ reward stage
# 18 pairs, batch 4: batches cross epoch boundaries; SIGTERM-only checkpoints (checkpoint_every 0)
REWARD = {
    "head": {"dim": 4, "bayes": {"kl_warmup_steps": 20}},
    "data": {"max_length": 48},
    "train": {"steps": 60, "batch_size": 4, "micro_batch_size": 2, "learning_rate": 1e-3, "warmup_steps": 5,
              "checkpoint_every": 0},
    "eval": {"batch_size": 4, "train_pairs": 8},
}  # fmt: skip
REWARD_STEPS = REWARD["train"]["steps"]


def _reward_config(**changes: dict) -> str:
    """The bgpm variant with REWARD and `changes` (train={...}) merged over it, as the stage's --config."""
    return stage_json(reward_settings(deep_merge(REWARD, changes), variant="bgpm", seed=3))


def test_reward_stage_killed_and_rerun_ends_as_an_uninterrupted_run(tmp_path):
    base = save_tiny_base(tmp_path / "base")
    data = write_reward_data(tmp_path / "data")
    full, cut = tmp_path / "full", tmp_path / "cut"

    def cmd(out: Path, config: str = _reward_config()) -> list[str]:
        return stage_command("prefpipe.train_reward", config, out, data=data, base=base)

    done = run_stage_process(cmd(full))
    assert done.returncode == 0, done.stderr[-3000:]

    signal_mid_run(cmd(cut), cut / "metrics.jsonl")
    pointer = json.loads((cut / "checkpoints" / "latest.json").read_text())
    stopped_at = pointer["step"]
    assert 2 <= stopped_at < REWARD_STEPS, pointer
    checkpoint = cut / "checkpoints" / pointer["path"]
    assert len(jsonl_rows(cut / "metrics.jsonl")) == stopped_at and not (cut / "model").exists()

    _refuses_other_config(cmd(cut, _reward_config(train={"learning_rate": 2e-3})), cut, checkpoint)

    # Bookkeeping (evaluation batch size) is not part of the fingerprint: the run still resumes.
    resumed = run_stage_process(cmd(cut, _reward_config(eval={"batch_size": 5})))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    resumed_summary = summary(cut)
    assert resumed_summary["resumed_from_step"] == stopped_at
    assert not (cut / "checkpoints").exists()  # removed once the model is saved (keep_checkpoints false)

    rows_full, rows_cut = jsonl_rows(full / "metrics.jsonl"), jsonl_rows(cut / "metrics.jsonl")
    assert [r["step"] for r in rows_cut] == list(range(1, REWARD_STEPS + 1))
    deviations = {
        "metrics": max_deviation(rows_full, rows_cut),
        "summary": max_deviation(summary(full), resumed_summary),
        "head": weights_deviation(full / "model" / "head.safetensors", cut / "model" / "head.safetensors"),
    }
    backbone = sorted((full / "model").rglob("model.safetensors"))
    assert backbone, "no backbone weights saved"
    for path in backbone:
        deviations["backbone"] = weights_deviation(path, cut / path.relative_to(full))
    print(f"reward stage: SIGTERM after step {stopped_at}; max |full - resumed| {deviations}")


# ------------------------------------------------------------------------------------------ GRPO stage
GRPO = {
    "steps": 40,
    "prompts_per_step": 2,
    "num_generations": 4,
    "max_new_tokens": 6,
    "learning_rate": 1e-2,
    "beta": 0.04,
    "num_iterations": 2,
    "micro_batch_size": 5,
    "sample_every": 7,
    "checkpoint_every": 0,
    "rewards": [{"type": "verifier", "weight": 1.0}, {"type": "format", "weight": 0.5, "pattern": "[0-9]"}],
}
PROMPTS = [
    ("What is 2 plus 3?", "5", "add"),
    ("What is 7 plus 1?", "8", "add"),
    ("Repeat cat:", "cat", "repeat"),
    ("Say yes.", "yes", "repeat"),
    ("What is 4 plus 4?", "8", "add"),
]


def _grpo_config(**changes) -> str:
    """Run `resume`: the verifier run's defaults with GRPO and `changes` over them, as the stage's --config."""
    return stage_json(grpo_settings({**GRPO, **changes}, run="resume", seed=5))


def test_grpo_stage_killed_and_rerun_ends_as_an_uninterrupted_run(tmp_path):
    policy = save_tiny_policy(tmp_path / "policy", seed=1)
    data = tmp_path / "data"
    write_jsonl(data / "rl_prompts_train.jsonl", rl_rows(PROMPTS))
    write_jsonl(
        data / "rl_prompts_heldout.jsonl", rl_rows(PROMPTS)
    )  # the learning curve reads it, as prep_data writes it
    full, cut = tmp_path / "full", tmp_path / "cut"

    def cmd(out: Path, config: str = _grpo_config()) -> list[str]:
        return stage_command("prefpipe.train_grpo", config, out, data=data, policy=policy)

    done = run_stage_process(cmd(full))
    assert done.returncode == 0, done.stderr[-3000:]

    signal_mid_run(cmd(cut), cut / "metrics.jsonl")
    checkpoint = cut / "checkpoint"
    stopped_at = json.loads((checkpoint / "latest.json").read_text())["step"]
    assert 2 <= stopped_at < GRPO["steps"]
    assert len(jsonl_rows(cut / "metrics.jsonl")) == stopped_at and not (cut / "policy").exists()

    _refuses_other_config(cmd(cut, _grpo_config(beta=0.1)), cut, checkpoint)

    # bookkeeping key: still resumes
    resumed = run_stage_process(cmd(cut, _grpo_config(keep_checkpoint=True)))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    resumed_summary = summary(cut)
    assert resumed_summary["resumed_from_step"] == stopped_at

    rows_full, rows_cut = jsonl_rows(full / "metrics.jsonl"), jsonl_rows(cut / "metrics.jsonl")
    assert [r["step"] for r in rows_cut] == list(range(GRPO["steps"]))
    deviations = {
        "metrics": max_deviation(rows_full, rows_cut),
        "summary": max_deviation(summary(full), resumed_summary),
        "samples": max_deviation(jsonl_rows(full / "samples.jsonl"), jsonl_rows(cut / "samples.jsonl")),
        "policy": weights_deviation(
            full / "policy" / "model.safetensors", cut / "policy" / "model.safetensors"
        ),
    }
    print(f"GRPO stage: SIGTERM after step {stopped_at}; max |full - resumed| {deviations}")
