"""Data-parallel GRPO: under `accelerate launch` (or torchrun) each process generates and scores its share of
a step's prompts, and gradients are summed over processes before the optimizer step.

What keeps N processes equal to one process on the same batch:
- every process selects the same prompts and draws the same (N, max_new_tokens) sampling uniforms from a
  generator seeded by (seed, step), then takes its contiguous slice (whole groups: prompts_per_step must
  divide by the process count), so its rows are sampled exactly as one process would sample them (a vLLM engine
  per process cannot take the uniforms: it seeds each request by the same global row, engines/vllm_engine.py);
- rewards are gathered before advantages, so group and batch scaling see the whole batch;
- the loss normalisers (sequences, loss tokens, micro-batches) are summed over processes, each process
  backpropagates its micro-batches' share of the global loss, and gradients are all-reduced with SUM;
- every process holds the same weights and optimizer state; only process 0 writes files.
One process needs no process group: every collective below is then the identity.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from prefpipe.common.config import ConfigError


class DataParallel:
    def __init__(self) -> None:
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if self.world_size > 1 and not dist.is_initialized():
            from accelerate import PartialState

            PartialState(cpu=not torch.cuda.is_available())  # gloo on CPU, nccl on GPUs

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def device(self, configured: str) -> str:
        """One GPU per process: cuda:<local rank> when several processes share a node's GPUs."""
        if self.enabled and torch.cuda.is_available() and configured in ("auto", "cuda"):
            return f"cuda:{self.local_rank}"
        return configured

    def share(self, n_prompts: int) -> slice:
        """This process's contiguous slice of a step's prompts."""
        if n_prompts % self.world_size:
            raise ConfigError(
                f"grpo prompts_per_step={n_prompts} must divide by the number of processes ({self.world_size})"
            )
        k = n_prompts // self.world_size
        return slice(self.rank * k, (self.rank + 1) * k)

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        if self.enabled:
            values = values.clone()
            dist.all_reduce(values, op=dist.ReduceOp.SUM)
        return values

    def max(self, values: torch.Tensor) -> torch.Tensor:
        if self.enabled:
            values = values.clone()
            dist.all_reduce(values, op=dist.ReduceOp.MAX)
        return values

    def close(self) -> None:
        """Wait for every process, then tear the group down: a process that exits while another is still in a
        gloo collective aborts it ("terminate called without an active exception")."""
        if self.enabled and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()

    def gather_rows(self, values: torch.Tensor) -> torch.Tensor:
        """Concatenate equal-sized row blocks in process order."""
        if not self.enabled:
            return values
        parts = [torch.empty_like(values) for _ in range(self.world_size)]
        dist.all_gather(parts, values.contiguous())
        return torch.cat(parts)

    def sum_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """One all-reduce over a flat buffer of every gradient (a process without loss tokens sends zeros)."""
        if not self.enabled:
            return
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
            offset += n
