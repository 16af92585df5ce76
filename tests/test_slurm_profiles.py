"""The SLURM and local profiles as Snakemake reads them: lookup by name, placement, attempt scaling.

Fast tier: real Snakemake dry runs of the real workflow on a copy of the repository (no cluster needed; the
end-to-end run on a real SLURM is tests/test_slurm_cluster.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from support.workflow import WITH_PROFILES, repo_copy

REPO = Path(__file__).resolve().parents[1]
SLURM_PROFILE = REPO / "profiles" / "slurm" / "config.yaml"
LOCAL_PROFILE = REPO / "profiles" / "local" / "config.yaml"


def _snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "SNAKEMAKE_PROFILE"},
    )


def _dry_run(workdir: Path, *args: str) -> dict[str, dict[str, str]]:
    """`snakemake -n` and the resources it prints for each rule: {rule: {resource: value}}."""
    result = _snakemake(workdir, "-n", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    jobs: dict[str, dict[str, str]] = {}
    rule = None
    for line in result.stdout.splitlines():
        head = re.match(r"^(?:local)?rule (\w+):$", line)
        if head:
            rule = head.group(1)
        elif rule and line.strip().startswith("resources:"):
            pairs = line.split("resources:", 1)[1].split(", ")
            jobs[rule] = dict(p.strip().split("=", 1) for p in pairs)
            rule = None
    assert jobs, f"no jobs parsed from the dry run:\n{result.stdout}"
    return jobs


def _workflow_rules(workdir: Path) -> set[str]:
    result = _snakemake(workdir, "--list-rules")
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


def test_profile_name_resolves_from_the_repository_root():
    """`snakemake --profile slurm` searches the current directory: ./slurm must lead to profiles/slurm."""
    from snakemake.cli import get_profile_dir

    assert (REPO / "slurm").resolve() == (REPO / "profiles" / "slurm").resolve()
    cwd = os.getcwd()
    try:
        os.chdir(REPO)
        found = get_profile_dir("slurm")
    finally:
        os.chdir(cwd)
    assert found is not None, "snakemake did not find a profile named 'slurm' from the repository root"
    assert Path(found[1]).resolve() == SLURM_PROFILE.resolve()


def test_site_settings_live_in_the_profile_folder():
    """Account in default-resources, partitions in partitions.yaml (read by the plugin itself); no per-rule
    GPU placement in the profile, so an experiment config's GPU counts are never overridden."""
    from snakemake_executor_plugin_slurm.partitions import read_partition_file

    profile = yaml.safe_load(SLURM_PROFILE.read_text())
    assert profile["executor"] == "slurm"
    assert "slurm_account" in profile["default-resources"]
    assert "slurm_partition" not in profile["default-resources"]  # a default would disable the choice
    assert "set-resources" not in profile
    partitions = {
        p.name: p.limits
        for p in read_partition_file(SLURM_PROFILE.parent / profile["slurm-partition-config"])
    }
    assert any(limits.max_gpu > 0 for limits in partitions.values()), partitions
    assert any(limits.max_gpu == 0 for limits in partitions.values()), partitions
    assert profile["slurm-requeue"] is True
    assert profile["retries"] >= 1
    # Without accounting, sacct fails and the plugin would poll forever: the profile must poll with squeue.
    assert profile["slurm-status-command"] == "squeue"


def test_slurm_profile_takes_gpus_from_the_config_and_scales_with_the_attempt(tmp_path):
    workdir = repo_copy(tmp_path / "repo", *WITH_PROFILES)
    first = _dry_run(workdir, "--profile", "slurm")
    third = _dry_run(workdir, "--profile", "slurm", "--attempt", "3")
    workflow_rules = set(first) - {"all"}
    assert workflow_rules, first
    for rule in workflow_rules:
        res = first[rule]
        # The CPU-sized default asks for no GPU and pins no partition (the plugin picks one per job).
        assert res.get("gpu", "0") == "0" and "slurm_partition" not in res, (rule, res)
        # A retry asks SLURM for proportionally more memory and time (the rules multiply by the attempt).
        assert int(third[rule]["mem_mb"]) == 3 * int(res["mem_mb"]), (rule, res, third[rule])
        assert int(third[rule]["runtime"]) == 3 * int(res["runtime"]), (rule, res, third[rule])


def test_config_pins_a_partition_and_sets_gpu_counts(tmp_path):
    workdir = repo_copy(tmp_path / "repo", *WITH_PROFILES)
    extra = workdir / "pin.yaml"
    extra.write_text(
        "resources:\n  train_grpo: {gpu: 1, slurm_partition: big-gpu}\n  train_reward_model: {gpu: 2}\n"
    )
    jobs = _dry_run(workdir, "--profile", "slurm", "--configfile", "pin.yaml")
    assert jobs["train_grpo"]["slurm_partition"] == "big-gpu" and jobs["train_grpo"]["gpu"] == "1"
    assert jobs["train_reward_model"]["gpu"] == "2" and "slurm_partition" not in jobs["train_reward_model"]
    assert "slurm_partition" not in jobs["prep_data"]


def test_single_process_stage_refuses_several_gpus(tmp_path):
    """eval_policy runs one process: several GPUs would sit idle, so even a dry run stops with the reason;
    train_grpo spreads over them (accelerate launch, one node)."""
    workdir = repo_copy(tmp_path / "repo", *WITH_PROFILES)
    result = _snakemake(workdir, "-n", "--profile", "slurm", "--set-resources", "eval_policy:gpu=2")
    assert result.returncode != 0
    assert "eval_policy asks for gpu=2" in result.stdout + result.stderr
    result = _snakemake(workdir, "-n", "-p", "--profile", "slurm", "--set-resources", "train_grpo:gpu=2")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "accelerate launch --multi_gpu --num_processes 2 -m prefpipe.train_grpo" in result.stdout


def _unknown_rule_names(workdir: Path, rules: set[str]) -> dict[str, list[str]]:
    """Rule names used in profiles (set-resources, set-threads) and config/test configs (`resources:`, the
    resources schema) that are not rules of the workflow: a renamed rule would silently lose its settings."""
    found: dict[str, set[str]] = {}
    for profile in sorted(workdir.glob("profiles/*/config.yaml")):
        data = yaml.safe_load(profile.read_text()) or {}
        for key in ("set-resources", "set-threads", "set-resource-scopes"):
            found.setdefault(f"{profile.relative_to(workdir)}:{key}", set()).update(data.get(key) or {})
    configs = [
        workdir / "config" / "config.yaml",
        *sorted((workdir / "config" / "experiments").glob("*.yaml")),
    ]
    configs += sorted((workdir / "tests" / "configs").glob("*.yaml"))
    for config in configs:
        data = yaml.safe_load(config.read_text()) or {}
        found[f"{config.relative_to(workdir)}:resources"] = set(data.get("resources") or {}) - {"default"}
    schema = yaml.safe_load((workdir / "workflow" / "schemas" / "resources.schema.yaml").read_text())
    found["resources.schema.yaml"] = set(schema["properties"]) - {"default"}
    return {where: sorted(names - rules) for where, names in found.items() if names - rules}


def test_every_rule_named_in_profiles_and_configs_exists(tmp_path):
    workdir = repo_copy(tmp_path / "repo", *WITH_PROFILES)
    shutil.copytree(REPO / "tests" / "configs", workdir / "tests" / "configs")
    rules = _workflow_rules(workdir)
    assert {"prep_data", "train_reward_model", "train_grpo", "report"} <= rules, rules
    assert _unknown_rule_names(workdir, rules) == {}
    # Every rule can be given resources in the config (the schema lists each one).
    schema = yaml.safe_load((workdir / "workflow" / "schemas" / "resources.schema.yaml").read_text())
    assert rules - {"all"} <= set(schema["properties"]), sorted(rules - set(schema["properties"]))
    # The check is live: a typo in a profile is reported.
    local = workdir / "profiles" / "local" / "config.yaml"
    local.write_text(local.read_text() + "set-resources:\n  train_reward: {gpu: 1}\n")
    assert _unknown_rule_names(workdir, rules) == {
        "profiles/local/config.yaml:set-resources": ["train_reward"]
    }


def test_local_profile_keeps_config_resources(tmp_path):
    workdir = repo_copy(tmp_path / "repo", *WITH_PROFILES)
    jobs = _dry_run(workdir, "--profile", "profiles/local")
    local = yaml.safe_load(LOCAL_PROFILE.read_text())
    for rule, res in jobs.items():
        assert "slurm_partition" not in res, (rule, res)
        if "mem_mb" in res:  # the local pool caps what a job may take
            assert int(res["mem_mb"]) <= local["resources"]["mem_mb"], (rule, res)
