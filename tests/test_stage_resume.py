"""Kill-and-resume at the stage level: the real stage CLIs (`python -m prefpipe.train_reward` and
`python -m prefpipe.train_grpo`) as subprocesses, SIGTERM once a training step has been logged (what SLURM sends
before preemption or time-out), the same command again, and the end result compared with an uninterrupted run
of the same seed: every metrics.jsonl row (timing fields excluded), the summary and the saved weights agree
within TOL. In between, a rerun with a changed config must refuse the checkpoint (exit 2, folder named,
nothing touched).
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file
from support.models import save_tiny_base, save_tiny_policy
from support.rows import rl_rows, write_reward_data
from support.settings import grpo_settings, reward_settings, stage_json
from support.stages import stage_env

from prefpipe.common.io import write_jsonl
from prefpipe.settings.merge import deep_merge

TOL = 1e-6  # absolute and relative tolerance for every compared number (observed: exact equality)
# Wall-clock fields differ between any two runs; everything else must match.
TIMING = {"time", "step_time", "gen_time", "score_time", "train_time", "tokens_per_second", "wall_time_s",
          "seconds_per_step", "resumed_from_step"}  # fmt: skip


# ------------------------------------------------------------------------------------------ helpers
def _command(module: str, config: str, out: Path, **paths: Path) -> list[str]:
    args = [sys.executable, "-m", module, "--config", config, "--out", str(out)]
    for flag, path in paths.items():
        args += [f"--{flag.replace('_', '-')}", str(path)]
    return args


def _run(cmd: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=stage_env(), capture_output=True, text=True, timeout=timeout)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _sigterm_mid_run(cmd: list[str], metrics: Path, after_rows: int = 2, timeout: float = 300) -> int:
    """Start the stage, send SIGTERM as soon as `after_rows` steps are logged, return its exit code."""
    proc = subprocess.Popen(cmd, env=stage_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + timeout
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"stage ended ({proc.returncode}) before it could be interrupted:\n{proc.stdout.read()}"
                )
            if metrics.exists() and len(metrics.read_text().splitlines()) >= after_rows:
                proc.send_signal(signal.SIGTERM)
                break
            if time.monotonic() > deadline:
                pytest.fail("no training step logged in time")
            time.sleep(0.01)
        output, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, output[-3000:]
    return proc.returncode


def _max_deviation(a, b, path: str = "") -> float:
    """Largest absolute difference between two JSON-like values; fails on any structural or non-numeric
    difference and on numeric differences beyond TOL. Keys in TIMING are skipped at every depth."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys_a, keys_b = set(a) - TIMING, set(b) - TIMING
        assert keys_a == keys_b, f"{path}: keys differ {sorted(keys_a ^ keys_b)}"
        return max([_max_deviation(a[k], b[k], f"{path}.{k}") for k in keys_a], default=0.0)
    if isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{path}: {len(a)} != {len(b)} items"
        return max(
            [_max_deviation(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(a, b, strict=True))],
            default=0.0,
        )
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, int | float):
        assert a == b, f"{path}: {a!r} != {b!r}"
        return 0.0
    if math.isnan(a) and math.isnan(b):
        return 0.0
    assert b == pytest.approx(a, rel=TOL, abs=TOL), f"{path}: {a} != {b}"
    return abs(a - b)


def _weights_deviation(a: Path, b: Path) -> float:
    ta, tb = load_file(str(a)), load_file(str(b))
    assert set(ta) == set(tb)
    worst = max(float((ta[k].double() - tb[k].double()).abs().max()) for k in ta)
    assert worst <= TOL, worst
    return worst


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def _refuses_other_config(cmd: list[str], out: Path, checkpoint: Path) -> None:
    """A rerun with another config stops before touching anything and names the checkpoint folder."""
    before, metrics = _snapshot(checkpoint), (out / "metrics.jsonl").read_text()
    result = _run(cmd)
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
        return _command("prefpipe.train_reward", config, out, data=data, base=base)

    done = _run(cmd(full))
    assert done.returncode == 0, done.stderr[-3000:]

    _sigterm_mid_run(cmd(cut), cut / "metrics.jsonl")
    pointer = json.loads((cut / "checkpoints" / "latest.json").read_text())
    stopped_at = pointer["step"]
    assert 2 <= stopped_at < REWARD_STEPS, pointer
    checkpoint = cut / "checkpoints" / pointer["path"]
    assert len(_rows(cut / "metrics.jsonl")) == stopped_at and not (cut / "model").exists()

    _refuses_other_config(cmd(cut, _reward_config(train={"learning_rate": 2e-3})), cut, checkpoint)

    # Bookkeeping (evaluation batch size) is not part of the fingerprint: the run still resumes.
    resumed = _run(cmd(cut, _reward_config(eval={"batch_size": 5})))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = _summary(cut)
    assert summary["resumed_from_step"] == stopped_at
    assert not (cut / "checkpoints").exists()  # removed once the model is saved (keep_checkpoints false)

    rows_full, rows_cut = _rows(full / "metrics.jsonl"), _rows(cut / "metrics.jsonl")
    assert [r["step"] for r in rows_cut] == list(range(1, REWARD_STEPS + 1))
    deviations = {
        "metrics": _max_deviation(rows_full, rows_cut),
        "summary": _max_deviation(_summary(full), summary),
        "head": _weights_deviation(full / "model" / "head.safetensors", cut / "model" / "head.safetensors"),
    }
    backbone = sorted((full / "model").rglob("model.safetensors"))
    assert backbone, "no backbone weights saved"
    for path in backbone:
        deviations["backbone"] = _weights_deviation(path, cut / path.relative_to(full))
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
    full, cut = tmp_path / "full", tmp_path / "cut"

    def cmd(out: Path, config: str = _grpo_config()) -> list[str]:
        return _command("prefpipe.train_grpo", config, out, data=data, policy=policy)

    done = _run(cmd(full))
    assert done.returncode == 0, done.stderr[-3000:]

    _sigterm_mid_run(cmd(cut), cut / "metrics.jsonl")
    checkpoint = cut / "checkpoint"
    stopped_at = json.loads((checkpoint / "latest.json").read_text())["step"]
    assert 2 <= stopped_at < GRPO["steps"]
    assert len(_rows(cut / "metrics.jsonl")) == stopped_at and not (cut / "policy").exists()

    _refuses_other_config(cmd(cut, _grpo_config(beta=0.1)), cut, checkpoint)

    resumed = _run(cmd(cut, _grpo_config(keep_checkpoint=True)))  # bookkeeping key: still resumes
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = _summary(cut)
    assert summary["resumed_from_step"] == stopped_at

    rows_full, rows_cut = _rows(full / "metrics.jsonl"), _rows(cut / "metrics.jsonl")
    assert [r["step"] for r in rows_cut] == list(range(GRPO["steps"]))
    deviations = {
        "metrics": _max_deviation(rows_full, rows_cut),
        "summary": _max_deviation(_summary(full), summary),
        "samples": _max_deviation(_rows(full / "samples.jsonl"), _rows(cut / "samples.jsonl")),
        "policy": _weights_deviation(
            full / "policy" / "model.safetensors", cut / "policy" / "model.safetensors"
        ),
    }
    print(f"GRPO stage: SIGTERM after step {stopped_at}; max |full - resumed| {deviations}")
