"""The workflow validates its config before anything runs: real Snakemake, real schema."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import SHARED_DATA
from support.workflow import repo_copy

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def _workflow_copy(tmp_path: Path) -> Path:
    """A copy of the workflow files (src linked: the Snakefile imports prefpipe.settings), so a test never
    touches the checkout's results/."""
    return repo_copy(tmp_path / "wf", link_src=True)


def _dry_run(workdir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SNAKEMAKE, "-n", "--cores", "1", *extra], cwd=workdir, capture_output=True, text=True, timeout=300
    )


def _write_override(workdir: Path, override: dict) -> str:
    path = workdir / "override.yaml"
    path.write_text(yaml.safe_dump(override))
    return str(path)


def test_default_config_dry_runs(tmp_path):
    workdir = _workflow_copy(tmp_path)
    result = _dry_run(workdir)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "prep_data" in result.stdout


@pytest.mark.parametrize(
    "experiment", sorted((REPO / "config" / "experiments").glob("*.yaml")), ids=lambda p: p.name
)
def test_experiment_configs_dry_run(tmp_path, experiment):
    workdir = _workflow_copy(tmp_path)
    # ../shared/data as beside a checkout: a data file an experiment names is an input, so a missing one would
    # fail its dry run (naming the key and the file)
    if SHARED_DATA.is_dir():
        (tmp_path / "shared").symlink_to(SHARED_DATA.parent, target_is_directory=True)
    result = _dry_run(workdir, "--configfile", str(workdir / "config" / "experiments" / experiment.name))
    assert result.returncode == 0, result.stderr + result.stdout


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ({"data": {"not_a_key": 1}}, ["config.data: Additional properties", "'not_a_key' was unexpected"]),
        ({"base": {"sft": {"steps": "many"}}}, ["config.base.sft.steps: 'many' is not of type 'integer'"]),
        ({"data": {"source": "ftp"}}, ["config.data.source: 'ftp' is not one of"]),
        ({"seed": -1}, ["config.seed: -1 is less than the minimum of 0"]),
    ],
    ids=["unknown-key", "wrong-type", "bad-enum", "out-of-range"],
)
def test_bad_config_names_the_key_and_writes_nothing(tmp_path, override, expected):
    workdir = _workflow_copy(tmp_path)
    result = subprocess.run(
        [*SNAKEMAKE, "--cores", "1", "--configfile", _write_override(workdir, override)],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    output = result.stderr + result.stdout
    for fragment in expected:
        assert fragment in output, output
    assert not (workdir / "results").exists()


@pytest.mark.parametrize(
    ("only", "expected"),
    [
        (["bt", "gpm", "bgpm"], None),
        (["gpm", "nope"], "reward.only names ['nope'], which are not in reward.variants"),
        (["gpm"], "grpo.runs.bgpm_risk.reward_model = 'bgpm' is narrowed away by reward.only"),
    ],
    ids=["narrowed", "unknown-name", "grpo-needs-a-dropped-variant"],
)
def test_reward_only_selects_variants(tmp_path, only, expected):
    """An experiment cannot delete the default's variants by merging; reward.only selects, and names errors."""
    workdir = _workflow_copy(tmp_path)
    result = _dry_run(workdir, "--configfile", _write_override(workdir, {"reward": {"only": only}}))
    output = result.stderr + result.stdout
    if expected is None:
        assert result.returncode == 0, output
        trained = re.findall(r"results/synthetic-default/reward/([\w.-]+)/summary\.json", result.stdout)
        assert set(trained) == set(only), trained
    else:
        assert result.returncode != 0 and expected in output, output
    assert not (workdir / "results").exists()


@pytest.mark.parametrize(
    ("override", "runs", "report"),
    [
        ({"grpo": {"only": ["verifier"]}}, {"verifier"}, True),
        ({"grpo": {"enabled": False}, "report": {"enabled": False}}, set(), False),
    ],
    ids=["grpo-only", "grpo-and-report-off"],
)
def test_grpo_only_and_stage_switches_select_jobs(tmp_path, override, runs, report):
    """grpo.only trains just the runs it names (and their policy evaluations); the switches leave stages out."""
    workdir = _workflow_copy(tmp_path)
    result = _dry_run(workdir, "--configfile", _write_override(workdir, override))
    assert result.returncode == 0, result.stderr + result.stdout
    assert set(re.findall(r"results/synthetic-default/grpo/([\w.-]+)/summary\.json", result.stdout)) == runs
    assert (
        set(re.findall(r"results/synthetic-default/policy_eval/([\w.-]+)/summary\.json", result.stdout))
        == runs
    )
    assert ("results/synthetic-default/report/report.html" in result.stdout) is report
    assert "results/synthetic-default/eval/bt/summary.json" in result.stdout  # the reward side is untouched


def test_reward_models_that_grpo_uses_are_scheduled_first(tmp_path):
    """The default's GRPO runs use bt, gpm and bgpm (rm_bt, gpm, bgpm_risk, ...): those variants (and the GRPO
    jobs) carry a priority, so the RL chain starts early; the others (the Bayesian ablation) carry none."""
    result = _dry_run(_workflow_copy(tmp_path))
    assert result.returncode == 0, result.stderr
    priority: dict[str, str] = {}
    for block in result.stdout.split("\nrule ")[1:]:
        name = block.split(":", 1)[0]
        wildcards = [line.split(": ", 1)[1] for line in block.splitlines() if "wildcards:" in line]
        level = [
            line.split(": ", 1)[1] for line in block.splitlines() if line.strip().startswith("priority:")
        ]
        priority[f"{name} {wildcards[0] if wildcards else ''}".strip()] = level[0] if level else "0"
    assert priority["train_reward_model variant=gpm"] == priority["train_reward_model variant=bgpm"] == "10"
    assert priority["train_reward_model variant=bt"] == "10"  # rm_bt
    assert priority["train_reward_model variant=bgpm-broken"] == "0"
    assert priority["train_grpo run=verifier"] == priority["eval_policy run=gpm"] == "10"
    assert priority["build_base"] == "10"  # the policy the RL chain starts from


@pytest.mark.parametrize(
    ("only", "inputs"),
    [
        (None, 12),  # bgpm, bgpm-broken and the ten single-fix variants
        (["gpm", "bgpm", "bgpm-broken", "bgpm-fix-prior", "bgpm-no-prior"], 4),
        (["gpm", "bgpm"], 0),  # no row has both of its variants: no ablation job
    ],
    ids=["default", "narrowed", "none"],
)
def test_the_ablation_job_reads_the_evaluations_of_its_rows(tmp_path, only, inputs):
    workdir = _workflow_copy(tmp_path)
    # GRPO runs whose reward model the narrowed list drops (rm_bt) are left out with grpo.only
    override = {
        "reward": {"only": only},
        "grpo": {"only": None if only is None else ["verifier", "gpm", "bgpm_risk"]},
    }
    result = _dry_run(workdir, "--configfile", _write_override(workdir, override))
    assert result.returncode == 0, result.stderr + result.stdout
    blocks = [b for b in result.stdout.split("\nrule ")[1:] if b.startswith("ablation:")]
    assert len(blocks) == (1 if inputs else 0)
    if inputs:
        read = re.findall(
            r"results/synthetic-default/eval/([\w.-]+)/per_example\.parquet", blocks[0].split("output:")[0]
        )
        assert len(set(read)) == inputs
        report = [b for b in result.stdout.split("\nrule ")[1:] if b.startswith("report:")][0]
        assert "results/synthetic-default/ablation/summary.json" in report.split("output:")[0]
