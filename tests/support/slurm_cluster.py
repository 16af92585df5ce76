"""A real single-node SLURM for tests (scripts/slurm/local_slurm.sh): the module-scoped `cluster` fixture and
small helpers. Used by tests/test_slurm_cluster.py and tests/faults/test_slurm_faults.py. Skips with the reason
where SLURM cannot run here, except under CI (CI=true), where missing SLURM programs are a failure: CI installs
them (scripts/ci_system_deps.sh)."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from support.tiers import need

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "slurm" / "local_slurm.sh"
ETC_CONF = Path("/etc/slurm/slurm.conf")
# One local cluster per machine at a time (it links /etc/slurm/slurm.conf): concurrent test runs skip.
LOCK = Path(tempfile.gettempdir()) / "prefpipe-slurm-test.lock"
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo", "srun")


def missing_programs() -> list[str]:
    """SLURM and munge programs not installed (daemons live in /usr/sbin, which a user PATH may lack)."""
    return [p for p in PROGRAMS if shutil.which(p) is None and not Path("/usr/sbin", p).exists()]


def skip_reason() -> str | None:
    if not sys.platform.startswith("linux"):
        return "a local SLURM needs Linux"
    missing = missing_programs()
    if missing:
        return (
            f"SLURM/munge programs not installed ({', '.join(missing)}); as root on Debian run "
            "scripts/ci_system_deps.sh (apt-get install slurmctld slurmd slurm-client munge)"
        )
    if os.geteuid() != 0:
        return "needs root: slurmd starts jobs as their owner (run as root, e.g. in a container)"
    if ETC_CONF.exists():
        return f"{ETC_CONF} exists (a SLURM of this machine, or a local cluster still up): not touching it"
    return None


def _free_port_pair() -> int:
    """A port P with P and P+1 free (slurmctld and slurmd)."""

    def free(port: int) -> bool:
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                return False
        return True

    for port in range(6817, 7017, 2):
        if free(port) and free(port + 1):
            return port
    raise RuntimeError("no free port pair in 6817-7017 for slurmctld/slurmd")


def live(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


@pytest.fixture(scope="module", name="cluster")
def cluster_fixture():
    """Environment (SLURM_CONF included) of a running single-node SLURM; torn down after the module."""
    need(skip_reason())
    lock = LOCK.open("w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        pytest.skip(f"another local SLURM test holds {LOCK}: one cluster per machine at a time")
    state = Path(tempfile.mkdtemp(prefix="prefpipe-slurm-", dir="/tmp"))
    env = {
        **os.environ,
        "PREFPIPE_SLURM_DIR": str(state),
        "PREFPIPE_SLURM_PORT": str(_free_port_pair()),
        "PREFPIPE_SLURM_GPUS": "2",  # two fake GPUs: a multi-GPU rule can be scheduled
        "PREFPIPE_SLURM_INSTALL": "0",  # installing is CI's job (scripts/ci_system_deps.sh), not the test's
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
    }
    env.pop("SNAKEMAKE_PROFILE", None)
    up = subprocess.run(["bash", str(SCRIPT), "up"], env=env, capture_output=True, text=True, timeout=120)
    if up.returncode != 0:
        shutil.rmtree(state, ignore_errors=True)
        lock.close()
        pytest.fail(f"SLURM bring-up failed:\n{up.stderr}")
    env["SLURM_CONF"] = up.stdout.strip().removeprefix("export SLURM_CONF=")
    started = {int(pid) for _, pid in (line.split() for line in (state / "pids").read_text().splitlines())}
    try:
        yield env
    finally:
        down = subprocess.run(
            ["bash", str(SCRIPT), "down"], env=env, capture_output=True, text=True, timeout=120
        )
        still = sorted(pid for pid in started if live(pid))
        shutil.rmtree(state, ignore_errors=True)
        lock.close()
        assert down.returncode == 0, down.stderr
        assert not still, f"daemons still running after down: {still}"
        assert not ETC_CONF.is_symlink(), "down left the /etc/slurm/slurm.conf link behind"


def slurm(env: dict, *args: str) -> str:
    return subprocess.run(list(args), env=env, capture_output=True, text=True, check=True, timeout=30).stdout


def slurm_jobs(env: dict) -> dict[str, dict[str, str]]:
    """Every job slurmctld still holds (MinJobAge=600 keeps finished ones): {job id: {field: value}}."""
    jobs = {}
    for line in slurm(env, "scontrol", "show", "job", "-o").splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if "JobId" in fields:
            jobs[fields["JobId"]] = fields
    return jobs
