"""Launching a test worker in N processes the way `accelerate launch` does, through torch.distributed.run (gloo on
CPU), with this interpreter (so a vLLM test launches the vLLM virtualenv's python)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


@dataclass
class Launch:
    proc: subprocess.Popen
    log: Path  # stdout and stderr of every process: a file, so launches side by side never block on a pipe


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(worker: Path, processes: int, log: Path, *args: str) -> Launch:
    """Start `worker args...` in `processes` processes (one torch thread each, no GPU); wait with `finish`."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
        "--master_port", str(_free_port()), str(worker), *args,
    ]  # fmt: skip
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:  # the children keep their own copy of the descriptor
        return Launch(
            subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True), log
        )


def finish(launch: Launch, timeout: float = 2400) -> None:
    """Wait for a launch (a vLLM launch takes about 2 min on 2 free cores, and over 15 min niced on a busy
    machine: hence the long limit); a failure shows the end of its output."""
    try:
        launch.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(launch.proc.pid, signal.SIGKILL)  # the launcher and its workers: its own session
        launch.proc.wait()
        raise
    assert launch.proc.returncode == 0, launch.log.read_text(errors="replace")[-3000:]
