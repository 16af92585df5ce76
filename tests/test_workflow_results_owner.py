"""One experiment never overwrites another's results (issue 39), with real Snakemake on the tiny config: each
experiment gets its own folder by default; forcing two into one folder stops before any job, names both
experiments and the folder, and deletes nothing unless replace_results says so; report.compare refuses this
run's own folder and a folder named twice."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from support.workflow import run_snakemake, workflow_copy

OWN = "results/tiny-full"  # results_dir: results/{experiment}; tests/configs/tiny_full.yaml is `tiny-full`
DATA = f"{OWN}/data/summary.json"


def _snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return run_snakemake(workdir, "--cores", "1", *args, timeout=300)


def _hashes(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A workflow copy whose tiny-full folder holds finished prep_data outputs."""
    workdir = workflow_copy(tmp_path_factory.mktemp("owner") / "wf", "tiny_full.yaml")
    result = _snakemake(workdir, DATA)
    assert result.returncode == 0, result.output[-4000:]
    return workdir


def test_each_experiment_writes_under_its_own_folder(finished):
    result = _snakemake(finished, "-n", DATA.replace("tiny-full", "other"), "--config", "experiment=other")
    assert result.returncode == 0, result.output[-4000:]
    assert "results/other/data/summary.json" in result.output and f"{OWN}/data" not in result.stdout


def test_a_second_experiment_forced_into_the_folder_stops_and_deletes_nothing(finished):
    before = _hashes(finished / OWN)
    for extra in ((), ("-n",)):  # a real run and a dry run both stop while the Snakefile is read
        result = _snakemake(finished, *extra, "--config", "experiment=other", f"results_dir={OWN}")
        assert result.returncode != 0
        message = next(line for line in result.output.splitlines() if "holds finished outputs" in line)
        assert f"results_dir '{OWN}' holds finished outputs of experiment 'tiny-full'" in message, message
        assert "this run is experiment 'other'" in message and "replace_results: true" in message
        assert "Job stats" not in result.output
    assert _hashes(finished / OWN) == before


def test_replace_results_deletes_only_when_the_run_starts(finished, tmp_path):
    workdir = tmp_path / "wf"  # a copy of the finished run (links kept): this test replaces its outputs
    shutil.copytree(finished, workdir, symlinks=True)
    before = _hashes(workdir / OWN)
    replace = ("--config", "experiment=other", f"results_dir={OWN}", "replace_results=True")
    dry = _snakemake(workdir, "-n", DATA, *replace)
    assert dry.returncode == 0, dry.output[-4000:]
    assert _hashes(workdir / OWN) == before  # a dry run deletes nothing
    done = _snakemake(workdir, DATA, *replace)
    assert done.returncode == 0, done.output[-4000:]
    recorded = (workdir / OWN / "data" / "config.json").read_text()
    assert '"experiment": "other"' in recorded
    # the folder holds one experiment again: the next run of `other` needs no flag
    assert (
        _snakemake(workdir, "-n", DATA, "--config", "experiment=other", f"results_dir={OWN}").returncode == 0
    )


@pytest.mark.parametrize(
    ("compare", "message"),
    [
        ({"me": OWN}, f"report.compare.me: {OWN} is this run's own results folder"),
        (
            {"a": "results/other", "b": "results/other/"},
            "report.compare.b: results/other/ is the folder report.compare.a already names",
        ),
    ],
    ids=["own-folder", "duplicate"],
)
def test_report_compare_refuses_its_own_folder_and_a_duplicate(finished, tmp_path, compare, message):
    (finished / "results" / "other").mkdir(exist_ok=True)
    override = tmp_path / "compare.yaml"
    override.write_text(yaml.safe_dump({"report": {"compare": compare}}))
    result = _snakemake(finished, "-n", "--configfile", str(override))
    assert result.returncode != 0 and message in result.output, result.output[-4000:]
