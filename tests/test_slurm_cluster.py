"""End to end on a real single-node SLURM brought up by scripts/slurm/local_slurm.sh, through profiles/slurm.

Checks that jobs really are SLURM jobs (ids, partitions, GPU and CPU requests as slurmctld recorded them), that
a job SLURM kills for exceeding its memory is retried with more memory, that a preempted job is requeued and
the run still completes, that a reduced run of the real workflow completes, and that the multi-node launcher
reads its rank and rendezvous from a real allocation. Default tier, about 2-3 minutes: runs where the SLURM
binaries are installed and we are root (CI installs them with scripts/ci_system_deps.sh); skipped with the
reason otherwise. It never installs anything itself.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from support.slurm_cluster import cluster_fixture, slurm, slurm_jobs  # noqa: F401 (the `cluster` fixture)
from support.workflow import repo_copy

REPO = Path(__file__).resolve().parents[1]
MULTINODE = REPO / "scripts" / "slurm" / "accelerate_multinode.sh"
PROFILE_DIR = REPO / "profiles" / "slurm"
TINY_CONFIG = REPO / "tests" / "configs" / "slurm_tiny.yaml"
SUBMITTED = re.compile(r"Job \d+ has been submitted with SLURM jobid (\d+) \(log: (\S+)\)\.")


def _wait_for(what: str, check: Callable[[], object], proc: subprocess.Popen, log: Path, timeout: float):
    """Poll until check() returns something truthy; fail early if Snakemake exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"snakemake exited ({proc.returncode}) while waiting for {what}:\n{log.read_text()}")
        time.sleep(0.5)
    proc.kill()
    pytest.fail(f"timed out after {timeout}s waiting for {what}:\n{log.read_text()}")


# ------------------------------------------------------------------------------------------ Snakemake runs
def _test_profile(dest: Path) -> Path:
    """profiles/slurm as shipped (partitions.yaml included), with only the status polling made faster
    (default first check: 20 s) and successful job logs kept for the assertions."""
    shutil.copytree(PROFILE_DIR, dest)
    profile = yaml.safe_load((dest / "config.yaml").read_text())
    profile.update(
        {
            "slurm-init-seconds-before-status-checks": 2,
            "seconds-between-status-checks": 2,
            "slurm-keep-successful-logs": True,  # the tests read the job logs
            "latency-wait": 5,
            "slurm-no-account": True,  # the local cluster has no accounts (without it the run stops and asks)
        }
    )
    (dest / "config.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return dest


def _start_snakemake(workdir: Path, env: dict, *args: str) -> tuple[subprocess.Popen, Path]:
    log = workdir / "snakemake.out"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "snakemake", "--profile", str(_test_profile(workdir / "profile")), *args],
            cwd=workdir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    return proc, log


def _finish(proc: subprocess.Popen, log: Path, timeout: float) -> str:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()  # the plugin is gone with it; `down` cancels what it left in the queue
        pytest.fail(f"snakemake did not finish within {timeout}s:\n{log.read_text()}")
    text = log.read_text()
    assert proc.returncode == 0, text
    return text


def _submissions(text: str) -> list[tuple[str, str]]:
    """(rule, SLURM job id) for every job the plugin submitted, in order (the log path names the rule)."""
    return [(re.search(r"/rule_(\w+?)/", path).group(1), job) for job, path in SUBMITTED.findall(text)]


def _print_jobs(title: str, submitted: list[tuple[str, str]], jobs: dict[str, dict[str, str]]) -> None:
    """The job list as slurmctld recorded it (shown with `pytest -s`; the issue's closing note quotes it)."""
    print(f"\n{title}")
    for rule, job in submitted:
        r = jobs[job]
        print(
            f"  {job:>4} {rule:<12} {r['JobState']:<13} partition={r['Partition']:<4} mem={r['MinMemoryNode']:<5} "
            f"cpus={r['NumCPUs']} gres={r.get('TresPerJob', '-')} restarts={r['Restarts']}"
        )


def _job_stats(text: str) -> dict[str, int]:
    """The 'Job stats' table Snakemake prints before running: {rule: count}, without the total."""
    block = text.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    rows = [line.split() for line in block.splitlines()[3:] if line.strip()]
    return {name: int(count) for name, count in rows if name != "total"}


# ------------------------------------------------------------------------------------------ tests
HOLD_PY = """import sys, time
size = int(sys.argv[1]) * 2**20
block = bytearray(size)
block[:: 4096] = b"x" * len(range(0, size, 4096))  # touch every page so it is resident
time.sleep(3)
"""

TOY_SNAKEFILE = """
rule all:
    input:
        "preempted.txt",


# Holds 250 MB for 3 s. The job also holds two Snakemake processes, so attempt 1 (300 MB) exceeds its --mem and
# SLURM kills it; attempt 2 asks for 600 MB and finishes.
rule hungry:
    output:
        "hungry.txt",
    resources:
        mem_mb=lambda wildcards, attempt: 300 * attempt,
        runtime=2,
    shell:
        "@PYTHON@ hold.py 250 && squeue -h -j $SLURM_JOB_ID -o %m > {output}"


# Sleeps on its first start only, so the test can preempt it; a requeued start finishes at once.
rule preemptible:
    input:
        "hungry.txt",
    output:
        "preempted.txt",
    resources:
        mem_mb=1000,
        runtime=5,
    shell:
        "restarts=$(scontrol show job -o $SLURM_JOB_ID | grep -o 'Restarts=[0-9]*' | cut -d= -f2); "
        "echo $SLURM_JOB_ID $restarts >> starts.txt; "
        "if [ $restarts = 0 ]; then sleep 120; fi; "
        "echo $SLURM_JOB_ID $restarts > {output}"
"""


def test_memory_retry_and_preemption_through_the_profile(cluster, tmp_path):
    env = cluster
    workdir = tmp_path / "toy"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(TOY_SNAKEFILE.replace("@PYTHON@", sys.executable))
    (workdir / "hold.py").write_text(HOLD_PY)
    proc, log = _start_snakemake(workdir, env)

    def running_preemptible():
        return next(
            (
                j
                for j in slurm_jobs(env).values()
                if j["Comment"] == "rule_preemptible" and j["JobState"] == "RUNNING"
            ),
            None,
        )

    victim = _wait_for("the preemptible job to run", running_preemptible, proc, log, timeout=150)["JobId"]
    starts = workdir / "starts.txt"
    # Preempt only once the rule's own command runs (not just the job's Snakemake wrapper).
    _wait_for(
        "the rule to start", lambda: starts.exists() and starts.read_text() == f"{victim} 0\n", proc, log, 60
    )
    cpus = slurm(env, "sinfo", "-h", "-N", "-o", "%c").split()[0]
    # A job in the high-priority partition that needs every CPU of the node preempts the running one.
    urgent = ["-p", "urgent", f"--cpus-per-task={cpus}", "--mem=100", "-t", "1", "-o", "/dev/null"]
    slurm(env, "sbatch", "--parsable", *urgent, "--wrap", "sleep 1")

    def requeued_and_held():
        job = slurm_jobs(env)[victim]
        return (job["Restarts"], job["JobState"], job["Reason"]) == ("1", "PENDING", "BeginTime")

    _wait_for("the victim to be requeued", requeued_and_held, proc, log, 60)
    # SLURM holds a requeued job back for two minutes; release it now (only that wait is skipped).
    slurm(env, "scontrol", "update", f"JobId={victim}", "StartTime=now")
    text = _finish(proc, log, timeout=150)

    jobs = slurm_jobs(env)
    run_id = re.search(r"SLURM run ID: (\S+)", text).group(1)
    submitted = _submissions(text)
    assert all(jobs[job]["JobName"] == run_id for _, job in submitted), submitted

    _print_jobs("toy workflow (memory retry, preemption):", submitted, jobs)
    hungry = [job for rule, job in submitted if rule == "hungry"]
    assert len(hungry) == 2, submitted
    first, second = (jobs[job] for job in hungry)
    assert (first["MinMemoryNode"], second["MinMemoryNode"]) == ("300M", "600M")
    assert first["JobState"] in {"FAILED", "OUT_OF_MEMORY"}, first
    assert second["JobState"] == "COMPLETED", second
    first_log = next(path for job, path in SUBMITTED.findall(text) if job == hungry[0])
    assert "exceeded memory limit" in Path(first_log).read_text()
    assert (workdir / "hungry.txt").read_text().strip() == "600M"

    assert [job for rule, job in submitted if rule == "preemptible"] == [victim]
    assert jobs[victim]["Requeue"] == "1", "profile's slurm-requeue did not reach sbatch"
    assert jobs[victim]["JobState"] == "COMPLETED", jobs[victim]
    assert starts.read_text().splitlines() == [f"{victim} 0", f"{victim} 1"]


def test_reduced_workflow_runs_every_job_on_slurm(cluster, tmp_path):
    env = cluster
    workdir = repo_copy(tmp_path / "repo", "src")
    target = "results/slurm-tiny/base/summary.json"  # results_dir: results/{experiment}
    proc, log = _start_snakemake(workdir, env, target, "--configfile", str(TINY_CONFIG))
    text = _finish(proc, log, timeout=240)
    assert (workdir / target).is_file()

    stats = _job_stats(text)
    submitted = _submissions(text)
    # Every rule of the run went to SLURM (a local rule would be missing from the submissions).
    assert set(stats) == {rule for rule, _ in submitted}, (stats, submitted)

    jobs = slurm_jobs(env)
    run_id = re.search(r"SLURM run ID: (\S+)", text).group(1)
    _print_jobs("reduced workflow (prep_data, build_base):", submitted, jobs)
    wanted = yaml.safe_load(TINY_CONFIG.read_text())["resources"]
    gpu_rules = {rule for rule, res in wanted.items() if res.get("gpu", 0) > 0}
    assert gpu_rules & set(stats), "the reduced run must include a rule that asks for a GPU"
    for rule, job in submitted:
        record = jobs[job]
        assert record["JobName"] == run_id and record["Comment"] == f"rule_{rule}", record
        # The plugin chose the partition from profiles/slurm/partitions.yaml by the job's GPU request.
        if rule in gpu_rules:
            assert record["Partition"] == "gpu" and record["TresPerJob"] == "gres:gpu:1", record
        else:
            assert record["Partition"] == "cpu" and "TresPerJob" not in record, record
        # Threads from the config reach SLURM as CPUs of the job.
        assert record["NumCPUs"] == str(wanted[rule]["threads"]), (rule, record["NumCPUs"])
    last_attempt = {rule: job for rule, job in submitted}
    assert all(jobs[job]["JobState"] == "COMPLETED" for job in last_attempt.values()), last_attempt


def test_multinode_launcher_reads_the_allocation(cluster, tmp_path):
    """scripts/slurm/accelerate_multinode.sh under srun in a real allocation (one node, its fake GPU): node
    count, rank, process count and rendezvous host come from the environment SLURM gives each task."""
    env = {**cluster, "PREFPIPE_DRY_RUN": "1"}
    out = tmp_path / "launch.txt"
    step = (
        f"cd {shlex.quote(str(REPO))} && srun --ntasks-per-node=1 bash {shlex.quote(str(MULTINODE))} "
        f"--config_file config/accelerate/multi_gpu.yaml -m prefpipe.train_reward --out x > {shlex.quote(str(out))}"
    )
    slurm(env, "sbatch", "--wait", "-p", "gpu", "--nodes=1", "--gpus-per-node=1", "--mem=100", "-t", "1",
           "-o", str(tmp_path / "job.log"), "--wrap", step)  # fmt: skip
    words = shlex.split(out.read_text())
    flags = dict(zip(words[2:12:2], words[3:12:2], strict=True))
    node = slurm(env, "sinfo", "-h", "-N", "-o", "%N").split()[0]
    assert words[:2] == ["accelerate", "launch"]
    assert flags == {
        "--num_machines": "1",
        "--num_processes": "1",  # SLURM_GPUS_ON_NODE of a one-GPU allocation
        "--machine_rank": "0",
        "--main_process_ip": node,
        "--main_process_port": "29500",
    }, words
    assert words[12:] == ["--config_file", "config/accelerate/multi_gpu.yaml", "-m", "prefpipe.train_reward",
                          "--out", "x"]  # fmt: skip
