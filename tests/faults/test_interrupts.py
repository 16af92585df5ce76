"""Faults: SIGINT (Ctrl-C) and SIGTERM (SLURM, Snakemake) of the real training stages, as processes.

Each signal arrives once a step is logged. Expected outcome for both stages and both signals: exit 128 + signal
with one log line naming the signal, the step and the checkpoint (no traceback); a complete checkpoint at that
step and no temporary folder; metrics.jsonl holding whole lines only, one per finished step; no final model.
Rerunning the same command resumes, and the end result equals an uninterrupted run bit for bit (every metric
row but wall-clock fields, the summary, the saved weights).
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from support.interrupts import (
    jsonl_rows,
    max_deviation,
    run_stage_process,
    signal_mid_run,
    stage_command,
    summary,
)
from support.models import save_tiny_base, save_tiny_policy
from support.rows import rl_rows, write_reward_data
from support.settings import grpo_settings, reward_settings, stage_json
from support.stages import stage_env

from prefpipe.common.io import write_jsonl

# SIGTERM of both stages is also in the default tier through tests/test_stage_resume.py.
SIGNALS = [
    pytest.param(signal.SIGINT, id="SIGINT"),
    pytest.param(signal.SIGTERM, id="SIGTERM", marks=pytest.mark.slow),
]

REWARD = {
    "head": {"dim": 4},
    "data": {"max_length": 48},
    "train": {"steps": 40, "batch_size": 4, "micro_batch_size": 2, "learning_rate": 1e-3, "warmup_steps": 2,
              "checkpoint_every": 0},
    "eval": {"batch_size": 8, "train_pairs": 4},
}  # fmt: skip
GRPO = {
    "steps": 30,
    "prompts_per_step": 2,
    "num_generations": 2,
    "max_new_tokens": 4,
    "learning_rate": 1e-2,
    "beta": 0.04,
    "micro_batch_size": 4,
    "sample_every": 5,
    "checkpoint_every": 0,
    "rewards": [{"type": "verifier", "weight": 1.0}, {"type": "format", "weight": 0.5, "pattern": "[0-9]"}],
}


def _setup(kind: str, root: Path) -> tuple:
    """(command for an output folder, metrics file name, checkpoint root name, weights file)."""
    if kind == "reward":
        base, data = save_tiny_base(root / "base"), write_reward_data(root / "data")
        config = stage_json(reward_settings(REWARD, variant="gpm", seed=11))

        def cmd(out: Path) -> list[str]:
            return stage_command("prefpipe.train_reward", config, out, data=data, base=base)

        return cmd, "checkpoints", Path("model") / "head.safetensors"
    policy = save_tiny_policy(root / "policy", seed=2)
    data = root / "data"
    write_jsonl(data / "rl_prompts_train.jsonl", rl_rows())
    write_jsonl(
        data / "rl_prompts_heldout.jsonl", rl_rows()
    )  # the learning curve reads it, as prep_data writes it
    config = stage_json(grpo_settings(GRPO, run="stop", seed=4))

    def cmd(out: Path) -> list[str]:
        return stage_command("prefpipe.train_grpo", config, out, data=data, policy=policy)

    return cmd, "checkpoint", Path("policy") / "model.safetensors"


@pytest.fixture(scope="module", params=["reward", "grpo"])
def uninterrupted(request, tmp_path_factory):
    """An uninterrupted run of the stage, shared by both signals."""
    root = tmp_path_factory.mktemp(request.param)
    cmd, ckpt_name, weights = _setup(request.param, root)
    done = run_stage_process(cmd(root / "full"))
    assert done.returncode == 0, done.stderr[-3000:]
    return request.param, root, cmd, ckpt_name, weights


def _whole_lines(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n"), f"{path} ends in a partial line: {text[-200:]!r}"
    return [json.loads(line) for line in text.splitlines()]  # every line parses: no torn row


@pytest.mark.parametrize("signum", SIGNALS)
def test_a_stop_signal_checkpoints_and_the_rerun_equals_an_uninterrupted_run(uninterrupted, signum):
    kind, root, cmd, ckpt_name, weights = uninterrupted
    full, cut = root / "full", root / f"cut-{signum.name}"

    output = signal_mid_run(cmd(cut), cut / "metrics.jsonl", signum)
    assert "Traceback" not in output, output[-3000:]
    stop_lines = [line for line in output.splitlines() if f"interrupted by {signum.name}" in line]
    stop_lines += [line for line in output.splitlines() if f"stopped by {signum.name}" in line]
    assert len(stop_lines) == 1 and "rerun the same command to resume" in stop_lines[0], output[-3000:]

    checkpoints = cut / ckpt_name
    pointer = json.loads((checkpoints / "latest.json").read_text())
    stopped_at = pointer["step"]
    assert str(checkpoints) in stop_lines[0]
    assert [p.name for p in checkpoints.iterdir()] != [] and not list(checkpoints.glob(".*.tmp"))
    assert sorted(p.name for p in checkpoints.iterdir()) == sorted([pointer["path"], "latest.json"])
    rows = _whole_lines(cut / "metrics.jsonl")
    first = 1 if kind == "reward" else 0  # reward rows count finished steps, GRPO rows number them from 0
    assert [r["step"] for r in rows] == list(range(first, first + stopped_at)), rows
    assert not (cut / weights).exists() and not (cut / "summary.json").exists()

    resumed = run_stage_process(cmd(cut))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert summary(cut)["resumed_from_step"] == stopped_at
    assert max_deviation(jsonl_rows(full / "metrics.jsonl"), _whole_lines(cut / "metrics.jsonl")) == 0.0
    assert max_deviation(summary(full), summary(cut)) == 0.0
    a, b = load_file(str(full / weights)), load_file(str(cut / weights))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "weights differ after resume"
    print(f"{kind} {signum.name}: stopped after step {stopped_at}, resumed run bit-identical")


# ------------------------------------------------------------------------------------------ SIGKILL of Snakemake
SNAKEFILE = """
rule train:
    output:
        "out/summary.json",
    log:
        "train.log",
    shell:
        {command!r}
"""


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_sigkill_of_snakemake_stops_the_stage_with_a_checkpoint(tmp_path):
    """The rule runs the stage as the workflow's rules do (`exec python -m ...`, so Snakemake is its parent);
    Snakemake is SIGKILLed mid-training; the stage gets SIGTERM from the kernel, checkpoints and exits."""
    base, data = save_tiny_base(tmp_path / "base"), write_reward_data(tmp_path / "data")
    train = {**REWARD["train"], "steps": 400}
    config = stage_json(reward_settings({**REWARD, "train": train}, variant="gpm", seed=11))
    src = Path(__file__).resolve().parents[2] / "src"
    command = (
        (  # as the workflow's rules run a stage; {{ }} keep the JSON's braces from Snakemake's formatting
            f"PYTHONPATH={shlex.quote(str(src))} OMP_NUM_THREADS=1 exec python -m prefpipe.train_reward"
            f" --config {shlex.quote(config)} --data {shlex.quote(str(data))} --base {shlex.quote(str(base))}"
            " --out out > {log:q} 2>&1"
        )
        .replace("{", "{{")
        .replace("}", "}}")
        .replace("{{log:q}}", "{log:q}")
    )
    (tmp_path / "Snakefile").write_text(SNAKEFILE.format(command=command))
    snakemake = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "-c1", "--quiet"],
        cwd=tmp_path, env=stage_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    metrics, deadline = tmp_path / "out" / "metrics.jsonl", time.monotonic() + 180
    try:
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
            assert snakemake.poll() is None and time.monotonic() < deadline, "no training step logged"
            time.sleep(0.05)
        [stage] = _children(snakemake.pid)
        assert "prefpipe.train_reward" in Path(f"/proc/{stage}/cmdline").read_text()
        snakemake.kill()
        snakemake.wait(timeout=30)
        killed = time.monotonic()
        while Path(f"/proc/{stage}").exists():
            assert time.monotonic() - killed < 60, "the stage kept running after Snakemake was killed"
            time.sleep(0.05)
    finally:
        if snakemake.poll() is None:
            snakemake.kill()
    log = (tmp_path / "train.log").read_text()
    assert "interrupted by SIGTERM" in log and "Traceback" not in log, log[-3000:]
    pointer = json.loads((tmp_path / "out" / "checkpoints" / "latest.json").read_text())
    assert 2 <= pointer["step"] < train["steps"]
    assert len(_whole_lines(metrics)) == pointer["step"]
    print(
        f"stage stopped {time.monotonic() - killed:.1f} s after Snakemake's SIGKILL, checkpoint at step {pointer['step']}"
    )
