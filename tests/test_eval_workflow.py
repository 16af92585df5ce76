"""config/experiments/shared_rewardbench.yaml through real Snakemake on a toy-sized run of the real workflow.

Over a finished default run the experiment must only add evaluation jobs (no retraining), dry-run on a machine
without ../shared, fail there with an error naming the config key and path, and with the file present give
every variant's summary a RewardBench section table for it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from support.workflow import repo_copy

REPO = Path(__file__).resolve().parents[1]
EXPERIMENT = REPO / "config" / "experiments" / "shared_rewardbench.yaml"
TINY = REPO / "tests" / "configs" / "slurm_tiny.yaml"  # the real rules at toy sizes
RESULTS = "results/slurm-tiny"  # results_dir: results/{experiment}, the tiny config's experiment
TARGET = f"{RESULTS}/eval/bt/summary.json"
# Toy reward training and evaluation on top of the tiny data and base model.
FAST = {
    "reward": {
        "defaults": {
            "data": {"max_length": 64},
            "train": {"steps": 2, "batch_size": 8, "micro_batch_size": 8, "warmup_steps": 0},
            "eval": {"train_pairs": 0},
        }
    },
    "eval": {"mc_samples": 100, "batch_size": 32},
}


def _workflow(tmp_path: Path) -> Path:
    """Workflow files copied, this checkout's src linked (jobs import it via PYTHONPATH); nothing else."""
    wf = repo_copy(tmp_path / "wf", link_src=True)
    (wf / "fast.yaml").write_text(yaml.safe_dump(FAST))
    return wf


def _snakemake(
    wf: Path, *args: str, experiment: bool = False, extra: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    configs = [str(TINY), "fast.yaml"] + ([str(EXPERIMENT)] if experiment else []) + list(extra)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
    }
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", *args, TARGET, "--configfile", *configs]
    return subprocess.run(cmd, cwd=wf, env=env, capture_output=True, text=True, timeout=600)


def _planned(result: subprocess.CompletedProcess) -> dict[str, int]:
    """Job counts from Snakemake's "Job stats" table ({} when nothing is to be done)."""
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    table = out.split("Job stats:", 1)[1].split("total", 1)[0] if "Job stats:" in out else ""
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", table, re.MULTILINE)}


def _is_eval_output(wf: Path, path: Path) -> bool:
    parts = path.relative_to(wf / RESULTS).parts
    return parts[0] == "eval" or (parts[0] == "benchmarks" and parts[1].startswith("eval_rewardbench"))


def test_experiment_adds_only_evaluation_and_needs_the_file_only_when_it_runs(tmp_path, shared_data):
    wf = _workflow(tmp_path)
    first = _snakemake(wf)
    assert first.returncode == 0, first.stdout + first.stderr
    before = {p: p.stat().st_mtime_ns for p in (wf / RESULTS).rglob("*") if p.is_file()}
    summary = json.loads((wf / TARGET).read_text())
    assert set(summary["benchmarks"]) == {"synthetic"}

    # No ../shared beside this copy: the dry run still works and plans evaluation only.
    assert not (tmp_path / "shared").exists()
    assert _planned(_snakemake(wf, "-n", experiment=True)) == {"eval_rewardbench": 1}
    failed = _snakemake(wf, experiment=True)
    assert failed.returncode != 0
    log = (wf / RESULTS / "eval" / "bt" / "eval_rewardbench.log").read_text()
    assert (
        "eval.benchmarks.rewardbench_real: benchmark file '../shared/data/rewardbench_real_subsets.jsonl'"
        in log
    )
    assert "does not exist" in log
    assert not (wf / TARGET).exists()  # Snakemake removed the failed job's outputs

    # With the data beside the workflow (linked, never copied) only the evaluation runs.
    (tmp_path / "shared").symlink_to(shared_data.parent, target_is_directory=True)
    assert _planned(_snakemake(wf, "-n", experiment=True)) == {"eval_rewardbench": 1}
    done = _snakemake(wf, experiment=True)
    assert done.returncode == 0, done.stdout + done.stderr
    untouched = {p: t for p, t in before.items() if not _is_eval_output(wf, p)}
    assert untouched and all(p.stat().st_mtime_ns == t for p, t in untouched.items())  # data, base, reward

    summary = json.loads((wf / TARGET).read_text())
    assert summary["primary_benchmark"] == "synthetic"
    real = summary["benchmarks"]["rewardbench_real"]
    assert real["n_pairs"] == 663 and real["data"]["rows_skipped"] == 0
    assert real["sections"]["chat_hard"]["n"] == 419 and real["sections"]["safety"]["n"] == 244
    # RewardBench's official map (the file's default): no false "partial"/"missing" flags for what the file
    # cannot hold; Chat and Reasoning are listed as not in this benchmark.
    assert set(real["sections"]) == {"chat_hard", "safety"} and real["missing_sections"] == []
    assert not any(s["partial"] for s in real["sections"].values())
    assert real["sections_not_in_benchmark"][:2] == ["chat", "reasoning"]
    assert {"length_split", "longer_pick_rate", "longer_wins_baseline"} <= set(real)
    assert real["truncation"]["max_length"] > 0  # the reward model's encoder counts cut pairs
    assert real["batch_size"] == 32  # the workflow's eval settings reach the stage
    recorded = json.loads((wf / RESULTS / "eval/bt/config.json").read_text())["config"]
    assert {k: v["source"] for k, v in recorded["eval"]["benchmarks"].items()} == {
        "rewardbench_real": "../shared/data/rewardbench_real_subsets.jsonl",
        "synthetic": "synthetic",
    }
    assert recorded["benchmark_order"] == ["synthetic", "rewardbench_real"]
    # Up to date afterwards, with and without the experiment's benchmark recorded as an input.
    assert _planned(_snakemake(wf, "-n", experiment=True)) == {}

    # Every rule records its settings (the `provenance` param): editing one variant's head reruns that
    # variant's training and evaluation only; editing the data section reruns everything downstream.
    (wf / "tau.yaml").write_text(yaml.safe_dump({"reward": {"variants": {"bt": {"head": {"tau": 0.5}}}}}))
    assert _planned(_snakemake(wf, "-n", experiment=True, extra=("tau.yaml",))) == {
        "train_reward_model": 1,
        "eval_rewardbench": 1,
    }
    (wf / "seed.yaml").write_text(yaml.safe_dump({"data": {"synthetic": {"demo_error_rate": 0.25}}}))
    planned = _planned(_snakemake(wf, "-n", experiment=True, extra=("seed.yaml",)))
    assert planned == {"prep_data": 1, "build_base": 1, "train_reward_model": 1, "eval_rewardbench": 1}
