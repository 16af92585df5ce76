"""What the reward trainer sets up around its loop: the accelerator (CPU, DDP or DeepSpeed), the optimizer
and its parameter groups, the schedule's length, and moving batches to the device."""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
from accelerate import Accelerator, PartialState
from accelerate.utils import DistributedType, parse_flag_from_env

from prefpipe.reward.network import RewardModel
from prefpipe.settings.reward import RewardSettings, TrainSettings, accumulation_steps

log = logging.getLogger("prefpipe.reward.trainer")

SCHEDULES = {"linear": "linear", "cosine": "cosine", "constant": "constant_with_warmup"}


def use_cpu() -> bool:
    """No CUDA: run on CPU, which also lets torchrun start multi-process CPU (gloo) training. DeepSpeed,
    when the launcher asks for it, picks its own accelerator (its CPU one on CUDA-less machines)."""
    return not torch.cuda.is_available() and not parse_flag_from_env("ACCELERATE_USE_DEEPSPEED")


def distributed_state() -> PartialState:
    """Process-group state (the same singleton the Accelerator uses). Under DeepSpeed without CUDA,
    accelerate finds no device backend and would count one process while DeepSpeed's CPU accelerator joins
    all of them: name DeepSpeed's own backend (gloo, or oneCCL where installed) so both agree."""
    if parse_flag_from_env("ACCELERATE_USE_DEEPSPEED") and not torch.cuda.is_available():
        from deepspeed.accelerator import get_accelerator

        return PartialState(cpu=False, backend=get_accelerator().communication_backend_name())
    return PartialState(cpu=use_cpu())


def make_accelerator(settings: RewardSettings) -> tuple[Accelerator, int]:
    """Accelerator for this run (create it BEFORE loading the backbone, so DeepSpeed ZeRO-3 with
    zero3_init_flag builds the model sharded) and the gradient-accumulation steps per process."""
    state = distributed_state()
    ga = accumulation_steps(settings.train, state.num_processes)
    precision = settings.backbone.precision
    mixed = {"fp32": "no", "bf16": "bf16"}.get(precision, "bf16" if torch.cuda.is_available() else "no")
    acc = Accelerator(
        gradient_accumulation_steps=ga,
        mixed_precision=mixed,
        step_scheduler_with_optimizer=False,
        cpu=use_cpu(),
    )
    if acc.distributed_type == DistributedType.DEEPSPEED:  # no dataloader is prepared: give DS the sizes
        ds = acc.state.deepspeed_plugin.deepspeed_config
        ds["train_micro_batch_size_per_gpu"] = settings.train.micro_batch_size
        ds["train_batch_size"] = settings.train.batch_size
        ds["gradient_clipping"] = settings.train.max_grad_norm
    log.info("accelerate: %s, %d process(es), %d accumulation step(s), mixed precision %s",
             acc.distributed_type, acc.num_processes, ga, mixed)  # fmt: skip
    return acc, ga


def length_buckets_for(device: torch.device, train: TrainSettings) -> int:
    """Backbone passes per micro-batch at most: few on CUDA, where a pass costs far more than the padding it
    saves (benchmarks/gpu_buckets.py), the CPU-tuned length buckets elsewhere."""
    return train.cuda_length_buckets if device.type == "cuda" else train.length_buckets


def deepspeed_param_dtype(acc: Accelerator) -> torch.dtype | None:
    """bf16/fp16 when the DeepSpeed config keeps parameters in half precision (the head must match)."""
    if acc.distributed_type != DistributedType.DEEPSPEED:
        return None
    ds = acc.state.deepspeed_plugin.deepspeed_config
    for key, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        if (ds.get(key) or {}).get("enabled") is True:
            return dtype
    return None


def head_grad_norm(rm: RewardModel) -> float | None:
    """L2 norm of the head's gradients (None where they are not materialised, e.g. DeepSpeed partitions)."""
    grads = [p.grad for p in rm.head.parameters() if p.grad is not None]
    if not grads:
        return None
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])))


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """A (bucketed) batch on `device`: tensors, tensor dicts (the packed rows) and lists of tensor dicts
    (the buckets)."""
    out: dict[str, Any] = {}
    for k, v in batch.items():
        if isinstance(v, dict):
            out[k] = to_device(v, device)
        elif isinstance(v, list):
            out[k] = [{n: x.to(device, non_blocking=True) for n, x in b.items()} for b in v]
        else:
            out[k] = v.to(device, non_blocking=True)
    return out


def make_optimizer(rm: RewardModel, settings: RewardSettings, acc: Accelerator) -> torch.optim.Optimizer:
    """AdamW over param_groups; the fused kernel (one op for all parameters) where torch has it for the
    device, foreach otherwise. DeepSpeed swaps in its own optimizer step, so it gets the plain one."""
    t = settings.train
    fused = acc.distributed_type != DistributedType.DEEPSPEED and acc.device.type in ("cpu", "cuda")
    kind = {"fused": True} if fused else {"foreach": acc.distributed_type != DistributedType.DEEPSPEED}
    return torch.optim.AdamW(param_groups(rm, settings), lr=t.learning_rate, **kind)


def total_steps(settings: RewardSettings, n_pairs: int) -> int:
    t = settings.train
    return t.steps if t.steps is not None else max(1, math.ceil(t.epochs * n_pairs / t.batch_size))


def param_groups(rm: RewardModel, settings: RewardSettings) -> list[dict[str, Any]]:
    """Backbone and head groups (own learning rates); no weight decay on biases and norm weights."""
    t = settings.train
    groups = []
    for prefix, lr in (("backbone.", t.learning_rate), ("head.", t.head_learning_rate or t.learning_rate)):
        named = [(n, p) for n, p in rm.named_parameters() if n.startswith(prefix) and p.requires_grad]
        decay = [p for _, p in named if p.ndim >= 2]
        no_decay = [p for _, p in named if p.ndim < 2]
        groups += [
            {"params": decay, "lr": lr, "weight_decay": t.weight_decay},
            {"params": no_decay, "lr": lr, "weight_decay": 0.0},
        ]
    return [g for g in groups if g["params"]]
