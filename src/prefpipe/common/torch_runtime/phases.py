"""Where a training step's time goes: wall seconds per named phase, the device synchronised at each boundary.

Why the synchronisation: CUDA kernels run asynchronously, so without it a phase's clock stops when its kernels are
queued and the next phase is billed for them. One synchronisation per phase boundary (a handful per step) costs
microseconds against steps of tenths of seconds; on the CPU there is nothing to wait for. The shares are what
OpenRLHF and verl log per step (rollout, reward, log-probs, update, weight sync), so a run shows which part to
speed up.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import torch


class PhaseClock:
    """Accumulates seconds per phase over one step; `metrics` turns them into `<prefix><phase>_s` and
    `<prefix><phase>_share` (of the step's wall time), plus the unclaimed rest as `other`."""

    def __init__(self, device: torch.device | str, prefix: str = "phase/") -> None:
        self.cuda = torch.device(device).type == "cuda"
        self.prefix = prefix
        self.seconds: dict[str, float] = {}

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self._sync()
        start = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def metrics(self, step_seconds: float) -> dict[str, float]:
        """Seconds and shares of `step_seconds` per phase; `other` is what no phase claimed (never negative)."""
        parts = {**self.seconds, "other": max(step_seconds - sum(self.seconds.values()), 0.0)}
        total = max(step_seconds, 1e-9)
        out: dict[str, float] = {}
        for name, seconds in parts.items():
            out[f"{self.prefix}{name}_s"] = seconds
            out[f"{self.prefix}{name}_share"] = seconds / total
        return out
