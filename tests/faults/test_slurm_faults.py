"""Faults of a SLURM run and of the job environment.

Fast tier (dry runs of the real workflow, the package metadata, wandb offline):
- eval_rewardbench / eval_policy with gpu > 1 are refused (they run one process on one GPU);
- a multi-GPU reward training asks for one node (`nodes=1`, which the plugin turns into `--nodes=1`);
- workflow/envs/prefpipe.yaml lists every runtime dependency of pyproject.toml and the deepspeed extra;
- wandb runs are named experiment/stage/variant-or-run, with no `reinit` deprecation warning;
- a missing account is one message naming where to set it.
Slow tier (PREFPIPE_SLOW=1; a real local SLURM from scripts/slurm/local_slurm.sh, as root, with two fake GPUs): the
job's comment in `squeue` carries rule and wildcards; no account stops the run before any submission; killing
slurmctld ends Snakemake with exit code 1 within the documented bound (PREFPIPE_SLURM_CONTROLLER_TIMEOUT); the real
workflow's train_reward_model with `--set-resources train_reward_model:gpu=2` is submitted with `--nodes=1` and
slurmctld records one node and two GPUs for it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import tomllib
import warnings
from pathlib import Path

import pytest
import yaml
from support.slurm_cluster import cluster_fixture, slurm, slurm_jobs  # noqa: F401 (the `cluster` fixture)
from support.workflow import WITH_PROFILES, repo_copy

from prefpipe.common import slurm_guard
from prefpipe.common.run_record import RunRecord

REPO = Path(__file__).resolve().parents[2]


def _dry_run(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--profile", "slurm", *args],
        cwd=workdir, capture_output=True, text=True, timeout=180,
    )  # fmt: skip


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return repo_copy(tmp_path_factory.mktemp("repo") / "repo", *WITH_PROFILES)


@pytest.mark.parametrize("rule", ["eval_rewardbench", "eval_policy"])
def test_single_gpu_evaluation_refuses_several_gpus(workdir, rule):
    result = _dry_run(workdir, "--set-resources", f"{rule}:gpu=2")
    assert result.returncode != 0
    assert (
        f"{rule} asks for gpu=2, but its stage runs one process on one GPU" in result.stdout + result.stderr
    )


def test_multi_gpu_reward_training_asks_for_one_node(workdir):
    result = _dry_run(workdir, "--set-resources", "train_reward_model:gpu=4", "--printshellcmds")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    blocks = result.stdout.split("\nrule ")
    reward = [b for b in blocks if b.startswith("train_reward_model:")]
    assert reward, result.stdout[-3000:]
    for block in reward:
        resources = dict(
            pair.strip().split("=", 1) for pair in re.search(r"resources: (.*)", block).group(1).split(", ")
        )
        assert resources["gpu"] == "4" and resources["nodes"] == "1", resources
        assert "accelerate launch" in block and "--num_processes 4" in block


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_the_conda_env_lists_every_runtime_dependency():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"]} | {
        _name(r) for r in project["optional-dependencies"]["deepspeed"]
    }
    env = yaml.safe_load((REPO / "workflow" / "envs" / "prefpipe.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    listed = {_name(r) for r in pip}
    assert wanted <= listed, f"missing from workflow/envs/prefpipe.yaml: {sorted(wanted - listed)}"
    assert {"deepspeed", "pygments"} <= listed


def test_wandb_runs_carry_experiment_stage_and_member_without_a_deprecation_warning(tmp_path):
    base = {"experiment": "exp1", "wandb": {"enabled": True, "mode": "offline", "project": "prefpipe-test"}}
    names = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for stage, extra, out in [
            ("train_reward", {"variant": "gpm"}, "reward/gpm"),
            ("train_grpo", {"run": "verifier"}, "grpo/verifier"),
            ("eval_rewardbench", {}, "eval/bgpm"),  # no member in the config: the output folder names it
        ]:
            record = RunRecord(tmp_path / out, stage, {**base, **extra})
            names.append(record._wandb.name)
            record.finish({})
    assert names == ["exp1/train_reward/gpm", "exp1/train_grpo/verifier", "exp1/eval_rewardbench/bgpm"]
    deprecations = [str(w.message) for w in caught if "reinit" in str(w.message)]
    assert deprecations == []


def test_a_missing_account_is_one_message_saying_where_to_set_it():
    message = slurm_guard.account_problem(["train_grpo", "prep_data", "train_grpo"], no_account=False)
    assert message.startswith("SLURM: no account for rule(s) prep_data, train_grpo: set `slurm_account`")
    assert "profiles/slurm/config.yaml" in message and "slurm-no-account: true" in message
    assert slurm_guard.account_problem(["prep_data"], no_account=True) is None
    assert slurm_guard.account_problem([], no_account=False) is None


# ------------------------------------------------------------------------------------------ real SLURM (slow)
# The Snakefile's own hook (workflow/rules/common.smk: onstart -> slurm_guard.start) on a one-rule workflow
# whose job runs until the test is done with it.
TOY = f"""
import sys
sys.path.insert(0, {str(REPO / "src")!r})
from prefpipe.common import slurm_guard


onstart:
    slurm_guard.start(workflow)


rule all:
    input:
        "done_alpha.txt",


rule sleeper:
    output:
        "done_{{name}}.txt",
    resources:
        mem_mb=500,
        runtime=5,
    shell:
        "sleep 600; touch {{output}}"
"""


def _toy(tmp_path: Path, **profile_extra) -> Path:
    (tmp_path / "Snakefile").write_text(TOY)
    profile = {
        "executor": "slurm",
        "jobs": 2,
        "latency-wait": 5,
        "default-resources": {"mem_mb": 500, "runtime": 5},
        "slurm-status-command": "squeue",
        "slurm-init-seconds-before-status-checks": 2,
        "seconds-between-status-checks": 2,
        **profile_extra,
    }
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile" / "config.yaml").write_text(yaml.safe_dump(profile))
    return tmp_path


@pytest.mark.slow
def test_no_account_stops_before_any_submission(cluster, tmp_path):
    workdir = _toy(tmp_path)
    before = slurm(cluster, "squeue", "-h", "-t", "all", "-o", "%i").split()
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", "profile"],
        cwd=workdir, env=cluster, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert "SLURM: no account for rule(s) sleeper: set `slurm_account`" in done.stdout + done.stderr
    assert slurm(cluster, "squeue", "-h", "-t", "all", "-o", "%i").split() == before  # nothing submitted


@pytest.mark.slow
def test_job_names_in_squeue_and_a_lost_controller_ends_the_run_in_bounded_time(cluster, tmp_path):
    bound = 15
    workdir = _toy(tmp_path, **{"slurm-no-account": True})
    env = {**cluster, slurm_guard.CONTROLLER_TIMEOUT_ENV: str(bound)}
    log = workdir / "snakemake.out"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "snakemake", "--profile", "profile"],
            cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        run_id, deadline = None, time.monotonic() + 120
        while run_id is None and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            found = re.search(r"SLURM run ID: (\S+)", log.read_text())
            rows = slurm(env, "squeue", "-h", "-t", "RUNNING", "-o", "%j|%k") if found else ""
            if found and rows.strip():
                run_id = found.group(1)
            time.sleep(0.5)
        assert run_id, log.read_text()
        # The documented format shows each job's rule and wildcards (the job name is the run's id).
        shown = slurm(env, "squeue", "--name", run_id, "--format", "%.10i %.9P %.45k %.10T %.10M %.6D %R")
        print(shown)
        assert "rule_sleeper_wildcards_alpha" in shown, shown

        pid_file = Path(env["PREFPIPE_SLURM_DIR"]) / "run" / "slurmctld.pid"
        ctld = int(pid_file.read_text().strip())
        assert Path(f"/proc/{ctld}/comm").read_text().strip() == "slurmctld"
        subprocess.run(["kill", "-9", str(ctld)], check=True)
        killed = time.monotonic()
        limit = bound + slurm_guard.PING_INTERVAL_S + slurm_guard.PING_TIMEOUT_S
        code = proc.wait(timeout=limit + 30)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
        # Bring the controller back (same state) so the fixture's `down` cancels the job and stops everything.
        subprocess.run(["/usr/sbin/slurmctld", "-f", env["SLURM_CONF"]], env=env, check=False)
        time.sleep(2)
        subprocess.run(["scancel", "--name", run_id or "none"], env=env, check=False)
    text = log.read_text()
    print(f"Snakemake exited {took:.1f} s after slurmctld was killed (bound {bound} s, limit {limit:.0f} s)")
    assert code == 1, text
    assert bound <= took <= limit, took
    assert (
        f"SLURM controller unreachable for {bound}" in text or "SLURM controller unreachable for" in text
    ), text
    assert f"squeue --name {run_id}" in text, text
    assert not (workdir / ".snakemake" / "locks").exists() or not any(
        (workdir / ".snakemake" / "locks").iterdir()
    )


@pytest.mark.slow
def test_a_two_gpu_reward_training_is_submitted_to_one_node(cluster, tmp_path):
    """The real rule through profiles/slurm: its inputs are built locally first (not what is tested), then the
    SLURM run submits train_reward_model alone; the plugin's sbatch call (logged with --verbose) and slurmctld's
    job record must both say one node with two GPUs. The job itself is cancelled once checked."""
    env = {**cluster, "OMP_NUM_THREADS": "1"}
    workdir = repo_copy(tmp_path / "repo", *WITH_PROFILES)
    tiny = ["--configfile", str(REPO / "tests" / "configs" / "slurm_tiny.yaml")]
    target = "results/slurm-tiny/reward/bt/summary.json"  # results_dir: results/{experiment}
    upstream = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", *tiny, "--omit-from", "train_reward_model", target],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert upstream.returncode == 0, upstream.stdout[-3000:] + upstream.stderr[-3000:]
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    profile.update({"slurm-no-account": True, "retries": 0, "slurm-init-seconds-before-status-checks": 2})
    (workdir / "test-profile").mkdir()
    (workdir / "test-profile" / "config.yaml").write_text(yaml.safe_dump(profile))
    shutil.copy(REPO / "profiles" / "slurm" / "partitions.yaml", workdir / "test-profile")
    log = workdir / "snakemake.out"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "snakemake", target, "--profile", "test-profile", *tiny, "--verbose",
             "--set-resources", "train_reward_model:gpu=2"],
            cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    job = None
    try:
        deadline = time.monotonic() + 120
        while job is None and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-5000:]
            found = re.search(r"SLURM jobid (\d+)", log.read_text())
            job = found.group(1) if found else None
            time.sleep(0.5)
        assert job, log.read_text()[-5000:]
        record = slurm_jobs(env)[job]
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        if job:
            subprocess.run(["scancel", job], env=env, check=False)
    text = log.read_text()
    call = re.search(r"sbatch call: (.*)", text).group(1)
    print(f"sbatch call: {call}\nscontrol: " + " ".join(
        f"{key}={record.get(key)}" for key in ("JobId", "JobName", "Comment", "Partition", "NumNodes", "NumCPUs",
                                               "TresPerJob", "TresPerNode", "TRES")))  # fmt: skip
    assert "--nodes=1" in call.split() or "--nodes 1" in call, call
    assert record["Comment"] == "rule_train_reward_model_wildcards_bt", record
    assert record["Partition"] == "gpu", record
    assert record["NumNodes"] in ("1", "1-1"), record
    assert "gpu:2" in record.get("TresPerJob", "") + record.get("TresPerNode", ""), record
