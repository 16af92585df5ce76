"""The reward trainer's metrics between host reads (`train.metrics_every`, on CUDA `train.cuda_metrics_every`).

A step leaves its metrics on the device: the per-pair sums of SUMMED and the gradient norms as tensors, the
host-side values (KL weight, learning rate, epoch) as numbers. Nothing in a step reads a device value, so on CUDA
the host prepares the next step while the device still runs this one. Every `every` steps (and before a
checkpoint, at the last step, on a stop signal) `read` reduces the window's sums over processes in one
collective, brings the whole window to the host in one transfer, and returns the metrics.jsonl rows a per-step
read gives: the same keys in the same order and the same values (float64 sums divided by the pairs of the step,
the fp32 norms widened exactly). A row's step_time is the window's wall time spread evenly over its steps (per
step read: the step's own time, the read included). `reads` counts the host reads (the only host syncs of the
training loop), which tests and benchmarks/device_check.py check.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from prefpipe.reward.metrics import GRAD_NORM, HEAD_GRAD_NORM, KL_BETA, LOSS, STEP, SUMMED


@dataclass
class _Pending:
    step: int  # 1-based, as logged
    sums: torch.Tensor  # (len(SUMMED),) float64 on the device, this process's micro-batches
    norms: list[torch.Tensor | None]  # grad_norm, head_grad_norm (None where not materialised)
    host: dict[str, Any]  # kl_beta, lr, epoch


@dataclass
class StepMetrics:
    every: int  # steps per read
    batch_size: int  # pairs per optimizer step over all processes: the divisor of the sums
    reduce: Any  # accelerate's reduce (sum over processes; the identity on one)
    pending: list[_Pending] = field(default_factory=list)
    reads: int = 0
    _since: float = 0.0

    def begin_step(self) -> None:
        """Mark the start of a step; the first of a window starts its clock."""
        if not self.pending:
            self._since = time.time()

    def add(self, step: int, sums: torch.Tensor, norms: list[torch.Tensor | None], **host: Any) -> None:
        self.pending.append(
            _Pending(step, sums.detach(), [None if n is None else n.detach() for n in norms], host)
        )

    def due(self, step: int, last: int) -> bool:
        """Whether the window ends after 1-based `step` (its every-th step, or the run's last)."""
        return step % self.every == 0 or step == last

    def read(self) -> list[dict[str, Any]]:
        """The window's rows, in step order (one reduce, one host transfer)."""
        if not self.pending:
            return []
        sums = self.reduce(torch.stack([p.sums for p in self.pending]), reduction="sum") / self.batch_size
        zero = sums.new_zeros(())
        norms = torch.stack(
            [torch.stack([zero if n is None else n.double() for n in p.norms]) for p in self.pending]
        )
        with host_read(sums.device):
            values = torch.cat([sums, norms], dim=1).tolist()
        self.reads += 1
        spent = round((time.time() - self._since) / len(self.pending), 4)
        rows = [self._row(p, v, spent) for p, v in zip(self.pending, values, strict=True)]
        self.pending = []
        return rows

    @staticmethod
    def _row(p: _Pending, values: list[float], spent: float) -> dict[str, Any]:
        k = len(SUMMED)
        grad, head = (None if n is None else v for n, v in zip(p.norms, values[k:], strict=True))
        row: dict[str, Any] = dict(zip(SUMMED, values[:k], strict=True))
        row.update({STEP: p.step, KL_BETA: p.host["kl_beta"], GRAD_NORM: grad, HEAD_GRAD_NORM: head})
        row.update(lr=p.host["lr"], epoch=p.host["epoch"], step_time=spent)
        return row


def first_non_finite(rows: list[dict[str, Any]]) -> tuple[int, str] | None:
    """(row index, metric) of the first row whose loss or gradient norm is NaN or infinite; None when all are
    finite."""
    for i, row in enumerate(rows):
        for key in (LOSS, GRAD_NORM):
            value = row.get(key)
            if value is not None and not math.isfinite(value):
                return i, key
    return None


def non_finite_error(row: dict[str, Any], key: str, every: int) -> FloatingPointError:
    return FloatingPointError(
        f"reward training: non-finite {key} ({row[key]}) at step {row[STEP]} (loss {row[LOSS]}, grad_norm "
        f"{row[GRAD_NORM]}, lr {row['lr']}); stopped at the metrics read after it (train.metrics_every: "
        f"{every}). Lower train.learning_rate or train.max_grad_norm, or check the pairs of that step"
    )


@contextlib.contextmanager
def host_read(device: torch.device) -> Iterator[None]:
    """The training loop's sanctioned host sync: a CUDA sync-debug mode (torch.cuda.set_sync_debug_mode, set by
    benchmarks/device_check.py to catch any other sync) is lifted around it."""
    if device.type != "cuda":
        yield
        return
    mode = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode(0)
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(mode)
