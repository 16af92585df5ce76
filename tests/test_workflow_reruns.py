"""Reruns right (issue 32, item 2), with real Snakemake on the tiny config reading a user's preference file:
the file is a declared input of prep_data (editing it plans prep_data and everything downstream; deleting it
fails the dry run naming the key and the file), nothing absolute reaches a rule's params or the recorded
provenance (a moved clone with finished results plans no job), and versions.json records the code revision."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from support.workflow import run_snakemake, workflow_copy

RESULTS = "results/tiny-full"  # results_dir: results/{experiment}; the tiny config's experiment
TARGET = f"{RESULTS}/eval/gpm/summary.json"  # prep_data -> build_base -> train_reward_model -> eval
PREFS = "prefs.jsonl"
OVERRIDE = {
    "data": {"source": "jsonl", "external": {"path": PREFS, "test_fraction": 0.25}},
    "eval": {"benchmarks": {"heldout": "heldout"}},  # the synthetic benchmark needs data.source synthetic
}


def _rows(n: int, tag: str = "") -> str:
    rows = [
        {
            "prompt": f"What is {i} plus {i}?{tag}",
            "chosen": f"{2 * i}",
            "rejected": f"{2 * i + 1}",
            "subset": "arith",
        }
        for i in range(n)
    ]
    return "".join(json.dumps(row) + "\n" for row in rows)


def _snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return run_snakemake(workdir, "--cores", "2", *args, TARGET, "--configfile", "prefs.yaml")


def _planned(result: subprocess.CompletedProcess) -> dict[str, int]:
    assert result.returncode == 0, result.output[-4000:]
    if "Job stats:" not in result.output:
        return {}
    table = result.output.split("Job stats:", 1)[1].split("total", 1)[0]
    return {
        p[0]: int(p[1])
        for p in (line.split() for line in table.splitlines())
        if len(p) == 2 and p[1].isdigit()
    }


@pytest.fixture(scope="module")
def moved(tmp_path_factory) -> Path:
    """A finished run of TARGET on a preference file, then the whole clone moved to another folder."""
    root = tmp_path_factory.mktemp("reruns")
    first = workflow_copy(root / "first", "tiny_full.yaml")
    (first / PREFS).write_text(_rows(32), encoding="utf-8")
    (first / "prefs.yaml").write_text(yaml.safe_dump(OVERRIDE), encoding="utf-8")
    done = _snakemake(first)
    assert done.returncode == 0, done.output[-6000:]
    second = root / "elsewhere" / "clone"
    second.parent.mkdir()
    shutil.move(str(first), str(second))  # mtimes, .snakemake/ metadata and results travel with it
    return second


def test_a_moved_clone_with_finished_results_plans_no_job(moved):
    assert _planned(_snakemake(moved, "-n")) == {}


def test_versions_json_records_the_code_revision(moved):
    code = json.loads((moved / RESULTS / "data" / "versions.json").read_text())["code"]
    assert len(code["source_sha256"]) == 64
    if "git_commit" in code:  # the tests import this checkout's src: a git worktree here
        assert len(code["git_commit"]) == 40 and isinstance(code["git_dirty"], bool)


def test_editing_the_preference_file_plans_prep_data_and_downstream(moved):
    (moved / PREFS).write_text(_rows(32, " (edited)"), encoding="utf-8")
    planned = _planned(_snakemake(moved, "-n"))
    assert planned == {"prep_data": 1, "build_base": 1, "train_reward_model": 1, "eval_rewardbench": 1}


def test_a_missing_preference_file_fails_the_dry_run_naming_key_and_file(moved, tmp_path):
    (moved / PREFS).rename(tmp_path / PREFS)
    try:
        result = _snakemake(moved, "-n")
    finally:
        (tmp_path / PREFS).rename(moved / PREFS)
    assert result.returncode != 0
    assert f"data.external.path: {PREFS} does not exist (prep_data reads it)" in result.output, result.output
