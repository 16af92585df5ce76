"""Stopping a stage cleanly: SIGTERM (SLURM preemption or time-out, Snakemake cancelling a job, a parent that
died) and SIGINT (Ctrl-C) are handled alike, and a stage never dies mid-write.

- Outside training (`raise_on_stop_signals`, installed by the stage frame): either signal raises
  StageInterrupted, so the `finally` clauses of the atomic writers remove their temporary files and the
  stage exits 128 + signal (143 SIGTERM, 130 SIGINT) with one log line.
- During training (`StopRequest`, installed by a trainer): either signal only sets a flag; the trainer
  finishes the current step, writes a checkpoint and then raises StageInterrupted. Repeated signals (Ctrl-C
  reaches Snakemake and the stage together, and Snakemake then sends SIGTERM) do not cut the checkpoint short.
- `die_with_parent`: on Linux the kernel sends SIGTERM when the process that started the stage dies, so a
  SIGKILLed Snakemake leaves no training running (it checkpoints and stops instead). The rules `exec` the stage
  so that its parent is Snakemake, not a shell. A launcher that is not ours (`accelerate launch`) is started as
  `python -m prefpipe.common.interrupts accelerate launch ...`, which sets the same request and execs it (the
  request survives exec), and the launcher then stops its workers.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
from typing import Any

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class StageInterrupted(RuntimeError):
    """A stop signal ended the stage (after a checkpoint when a trainer was running); it exits 128 + signal."""

    def __init__(self, message: str, signum: int = signal.SIGTERM) -> None:
        super().__init__(message)
        self.signum = int(signum)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def signal_name(signum: int | None) -> str:
    return signal.Signals(signum).name if signum else "a signal"


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def raise_on_stop_signals() -> None:
    """Make SIGTERM and SIGINT raise StageInterrupted (instead of dying outright or KeyboardInterrupt)."""
    if not _in_main_thread():
        return

    def handler(signum: int, frame: Any) -> None:
        raise StageInterrupted(f"stopped by {signal_name(signum)} (no training step in progress)", signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, handler)


class StopRequest:
    """While active (a `with` block in the main thread), SIGTERM and SIGINT only record that a stop was asked
    for; the trainer polls `requested` after each step."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal_name(self.signum)

    def _handler(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
            log.warning("%s received: checkpointing after the current step, then stopping", self.name)
        else:
            log.warning("%s received again: still finishing the step and its checkpoint", signal_name(signum))

    def __enter__(self) -> StopRequest:
        if _in_main_thread():
            self._previous = {s: signal.signal(s, self._handler) for s in STOP_SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}


def die_with_parent(signum: int = signal.SIGTERM) -> bool:
    """Ask Linux to send `signum` when the parent process exits (prctl PR_SET_PDEATHSIG; kept across exec).
    Returns False where that is not available (other systems), which only loses this safety net."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


if (
    __name__ == "__main__"
):  # python -m prefpipe.common.interrupts PROGRAM ARGS...: run it, dying with our parent
    if len(sys.argv) < 2:
        sys.exit("usage: python -m prefpipe.common.interrupts PROGRAM [ARGS...]")
    die_with_parent()
    os.execvp(sys.argv[1], sys.argv[1:])
