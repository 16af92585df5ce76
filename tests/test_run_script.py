"""The README's run command, `bash scripts/run.sh [snakemake args]`, for real in a copy of the workflow: one
target, a forced rerun and an experiment config all reach Snakemake as written (run.sh adds no --configfile of
its own, so a target is never read as a second config file and no 'extended config' notice appears)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.bootstrap_stamp import bootstrapped_for
from support.workflow import REPO, workflow_copy

EXTENDED = "is extended by additional config"
RESULTS = "results/tiny-full"  # results_dir: results/{experiment}, the tiny config's experiment
DATA_SUMMARY = f"{RESULTS}/data/summary.json"


def _venv() -> Path:
    """This checkout's virtualenv (the one running the tests), so bootstrap.sh in the copy reuses it."""
    return Path(sys.prefix)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    venv = _venv()
    if not bootstrapped_for(venv) or not (REPO / "scripts" / "bootstrap.sh").exists():
        pytest.skip(
            f"run.sh needs a bootstrapped virtualenv (scripts/bootstrap.sh dev,slurm); {venv} is not one"
        )
    dest = workflow_copy(tmp_path_factory.mktemp("run_script") / "wf", "tiny_full.yaml")
    shutil.copytree(REPO / "scripts", dest / "scripts")
    shutil.copy2(REPO / "pyproject.toml", dest / "pyproject.toml")  # bootstrap.sh's stamp is its hash
    return dest


def run_sh(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFPIPE_VENV": str(_venv()), "PREFPIPE_CORES": "1"}
    result = subprocess.run(
        ["bash", "scripts/run.sh", *args], cwd=workdir, env=env, capture_output=True, text=True, timeout=300
    )
    result.output = result.stdout + result.stderr
    assert "[bootstrap]" not in result.output, "run.sh reinstalled the virtualenv instead of reusing it"
    return result


def job_counts(output: str) -> dict[str, int]:
    """Snakemake's 'Job stats' table as {rule: count} (without the total row)."""
    lines = output.splitlines()
    if "Job stats:" not in lines:
        return {}
    start = lines.index("Job stats:") + 3  # header, rule line
    counts = {}
    for line in lines[start:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    counts.pop("total", None)
    return counts


@pytest.fixture(scope="module")
def one_target(workdir: Path) -> subprocess.CompletedProcess:
    return run_sh(workdir, DATA_SUMMARY)


def test_one_target_builds_only_that_target(workdir, one_target):
    assert one_target.returncode == 0, one_target.output
    assert job_counts(one_target.output) == {"prep_data": 1}
    assert (workdir / DATA_SUMMARY).is_file()
    assert not (workdir / RESULTS / "base").exists() and not (workdir / RESULTS / "reward").exists()
    assert EXTENDED not in one_target.output  # the Snakefile's configfile: is the only config


def test_rerun_flag_forces_the_rule_again(workdir, one_target):
    assert one_target.returncode == 0, one_target.output
    up_to_date = run_sh(workdir, "-n", DATA_SUMMARY)
    assert up_to_date.returncode == 0 and "Nothing to be done" in up_to_date.output, up_to_date.output
    before = (workdir / DATA_SUMMARY).stat().st_mtime_ns
    rerun = run_sh(workdir, DATA_SUMMARY, "-R", "prep_data")  # -R takes every following word: target first
    assert rerun.returncode == 0, rerun.output
    assert job_counts(rerun.output) == {"prep_data": 1} and "Forced execution" in rerun.output
    assert (workdir / DATA_SUMMARY).stat().st_mtime_ns > before
    # The README form, `run.sh -R RULE` alone: the rule and everything downstream of it are scheduled.
    downstream = run_sh(workdir, "-n", "-R", "prep_data")
    assert downstream.returncode == 0, downstream.output
    counts = job_counts(downstream.output)
    assert counts["prep_data"] == 1 and {"build_base", "train_reward_model"} <= set(counts), counts


@pytest.mark.parametrize("form", ["separate", "equals"])
def test_experiment_config_and_a_target(workdir, form):
    """`--configfile X` is what the README shows; with a target, `--configfile=X` keeps the two apart."""
    experiment = "config/experiments/shared_rewardbench.yaml"
    args = (
        ["--configfile", experiment] if form == "separate" else [f"--configfile={experiment}", DATA_SUMMARY]
    )
    result = run_sh(workdir, "-n", *args)
    assert result.returncode == 0, result.output
    files = next(line for line in result.output.splitlines() if "Config file(s):" in line)
    assert "'config/config.yaml'" in files and experiment in files, files
    if form == "equals":
        assert set(job_counts(result.output)) <= {"prep_data"}
