"""Guards for a run through the SLURM executor plugin (snakemake-executor-plugin-slurm 2.8), started by the
Snakefile's `onstart` in the main Snakemake process only (never in a job, never in a dry run).

Why: two failures of the plugin that a user cannot see or stop.
- Account: with no `slurm_account` the plugin guesses one from `sacct` (a command line that fails on every
  SLURM it was tried on, "sacct: invalid option"), logs a warning and submits without. A cluster that needs
  an account then rejects jobs with a message that does not say why. `account_problem` stops the run before
  the first submission with one line saying where to set the account, unless the profile says the cluster has
  none (`slurm-no-account: true`).
- Lost controller: when slurmctld stops answering, every status query fails, the plugin drops the jobs from its
  list and Snakemake waits forever for them, ignoring SIGTERM and SIGINT ("will exit after finishing running
  jobs"). `ControllerWatch` pings the controller (`scontrol ping`) every `interval` seconds; when it has not
  answered for `bound` seconds it logs one error line (how long, what to do, how to find the run's jobs) and
  ends the Snakemake process with exit code 1 after releasing its lock. The bound is
  PREFPIPE_SLURM_CONTROLLER_TIMEOUT seconds (default CONTROLLER_TIMEOUT_S; 0 switches the watch off); the
  run ends at most bound + interval + PING_TIMEOUT_S seconds after the controller's last answer.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable

CONTROLLER_TIMEOUT_ENV = "PREFPIPE_SLURM_CONTROLLER_TIMEOUT"
CONTROLLER_TIMEOUT_S = 300.0  # a controller restart (failover, upgrade) takes well under this
PING_INTERVAL_S = 10.0
PING_TIMEOUT_S = 20.0
SLURM_EXECUTORS = ("slurm",)


def account_problem(rules_without_account: Iterable[str], no_account: bool) -> str | None:
    """The error for jobs with no `slurm_account` on a cluster not declared account-free; None when fine."""
    missing = sorted(set(rules_without_account))
    if not missing or no_account:
        return None
    return (
        f"SLURM: no account for rule(s) {', '.join(missing)}: set `slurm_account` under default-resources in "
        "profiles/slurm/config.yaml (your accounts: `sacctmgr -n show assoc user=$USER format=account`), "
        "or `slurm-no-account: true` there if your cluster has no accounts. The plugin's own guess (from "
        "sacct) fails silently, so it is not relied on"
    )


def controller_timeout() -> float:
    """The bound from PREFPIPE_SLURM_CONTROLLER_TIMEOUT (seconds, 0 = no watch); ValueError if not a number."""
    raw = os.environ.get(CONTROLLER_TIMEOUT_ENV)
    if raw is None or raw.strip() == "":
        return CONTROLLER_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError as err:
        raise ValueError(f"{CONTROLLER_TIMEOUT_ENV}={raw!r}: not a number of seconds") from err
    if value < 0 or value != value:
        raise ValueError(f"{CONTROLLER_TIMEOUT_ENV}={raw!r}: must be >= 0 seconds (0 switches the watch off)")
    return value


def ping_controller() -> tuple[bool, str]:
    """(controller answers, what `scontrol ping` said)."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return False, "scontrol not found"
    try:
        done = subprocess.run([scontrol, "ping"], capture_output=True, text=True, timeout=PING_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, f"scontrol ping did not answer within {PING_TIMEOUT_S:.0f} s"
    lines = (done.stdout + done.stderr).strip().splitlines()
    said = lines[0].strip() if lines else f"scontrol ping exit code {done.returncode}"
    return done.returncode == 0 and " UP" in done.stdout, said


class ControllerWatch(threading.Thread):
    """Daemon thread: calls `on_lost(message)` once the controller has not answered for `bound` seconds."""

    def __init__(
        self,
        bound: float,
        on_lost: Callable[[str], None],
        run_id: str | None = None,
        interval: float = PING_INTERVAL_S,
        ping: Callable[[], tuple[bool, str]] = ping_controller,
    ) -> None:
        super().__init__(name="prefpipe-slurm-controller-watch", daemon=True)
        self.bound, self.on_lost, self.run_id, self.interval, self.ping = (
            bound,
            on_lost,
            run_id,
            interval,
            ping,
        )
        self.stopped = threading.Event()

    def run(self) -> None:
        last_answer = time.monotonic()
        while not self.stopped.wait(self.interval):
            up, said = self.ping()
            now = time.monotonic()
            if up:
                last_answer = now
            elif now - last_answer >= self.bound:
                self.on_lost(self.message(now - last_answer, said))
                return

    def message(self, silent_for: float, said: str) -> str:
        jobs = f"`squeue --name {self.run_id}`" if self.run_id else "`squeue --me`"
        return (
            f"SLURM controller unreachable for {silent_for:.0f} s ({said}); ending this run with an error "
            f"instead of waiting for job states that cannot arrive ({CONTROLLER_TIMEOUT_ENV}={self.bound:g} s). "
            f"Jobs already submitted may still run: once the controller is back, list them with {jobs} and rerun "
            "the same command (rerun-incomplete redoes jobs that were cut off)"
        )


def start(workflow) -> None:
    """The Snakefile's onstart hook. Through the SLURM executor only (not in a job: that one runs the
    slurm-jobstep executor; not in a dry run: onstart does not run): raise on a missing account, else start
    the controller watch."""
    from snakemake.exceptions import WorkflowError
    from snakemake.logging import logger

    plugin = workflow.executor_plugin
    if plugin is None or plugin.name not in SLURM_EXECUTORS:
        return
    submitted = [job for job in workflow.dag.needrun_jobs() if not (job.is_local or job.is_norun)]
    without = [job.rule.name for job in submitted if not job.resources.get("slurm_account")]
    problem = account_problem(without, getattr(workflow.executor_settings, "no_account", False))
    if problem:
        raise WorkflowError(problem)
    bound = controller_timeout()
    if bound <= 0:
        return
    executor = getattr(workflow.scheduler, "_executor", None)

    def lost(message: str) -> None:
        logger.error(message)
        try:
            workflow.persistence.unlock()  # the next run needs no --unlock
        finally:
            os._exit(1)  # Snakemake ignores SIGTERM while it waits for the jobs it lost

    ControllerWatch(bound, lost, getattr(executor, "run_uuid", None)).start()
    logger.info(f"SLURM controller watch: the run ends with an error after {bound:g} s without an answer")
