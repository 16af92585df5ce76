"""What the reward trainer sets up around its loop: the accelerator (CPU, DDP or DeepSpeed), the precision
(backbone.precision), the backbone's kernels and compilation, the optimizer and its parameter groups (through fp32 master copies under bf16_master), the
schedule, gradient clipping, and moving batches to the device."""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
from accelerate import Accelerator, PartialState
from accelerate.utils import DistributedType, parse_flag_from_env
from transformers import get_scheduler

from prefpipe.common.config import ConfigError
from prefpipe.common.optim.master_weights import MasterWeights
from prefpipe.common.torch_runtime.kernels import apply_kernels, compile_backbone
from prefpipe.reward.network import RewardModel
from prefpipe.settings.reward import RewardSettings, TrainSettings, accumulation_steps

log = logging.getLogger("prefpipe.reward.trainer")

SCHEDULES = {"linear": "linear", "cosine": "cosine", "constant": "constant_with_warmup"}
# backbone.precision -> accelerate's mixed_precision (auto: bf16 autocast on CUDA, none on CPU). bf16_master
# holds the backbone's weights in bf16 itself (precision_setup): no autocast.
MIXED = {"fp32": "no", "bf16": "bf16", "bf16_master": "no"}
# accelerate launch's flags for the engines with their own fp32 master weights: bf16_master is refused there.
OWN_MASTER_WEIGHTS = {"ACCELERATE_USE_DEEPSPEED": "DeepSpeed", "ACCELERATE_USE_FSDP": "FSDP"}


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


def refuse_own_master_weights(precision: str) -> None:
    """bf16_master under DeepSpeed or FSDP: a ConfigError before the process group starts (they keep their own
    fp32 master weights and optimizer state, and would step the bf16 parameters themselves)."""
    engines = [name for flag, name in OWN_MASTER_WEIGHTS.items() if parse_flag_from_env(flag)]
    if precision == "bf16_master" and engines:
        raise ConfigError(
            f"reward backbone.precision: bf16_master cannot run under {engines[0]}, which keeps its own fp32 "
            "master weights and optimizer state; set backbone.precision to bf16 (or auto) and enable bf16 in "
            "the launcher's config (DeepSpeed: bf16.enabled; FSDP: its mixed precision policy)"
        )


def make_accelerator(settings: RewardSettings) -> tuple[Accelerator, int]:
    """Accelerator for this run (create it BEFORE loading the backbone, so DeepSpeed ZeRO-3 with
    zero3_init_flag builds the model sharded) and the gradient-accumulation steps per process."""
    precision = settings.backbone.precision
    refuse_own_master_weights(precision)
    state = distributed_state()
    ga = accumulation_steps(settings.train, state.num_processes)
    mixed = MIXED.get(precision, "bf16" if torch.cuda.is_available() else "no")
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


def metrics_every_for(device: torch.device, train: TrainSettings) -> int:
    """Steps between host reads of the metrics: train.cuda_metrics_every on CUDA, where a read drains the
    device's queue, train.metrics_every elsewhere (on CPU a read costs nothing)."""
    return train.cuda_metrics_every if device.type == "cuda" else train.metrics_every


def deepspeed_param_dtype(acc: Accelerator) -> torch.dtype | None:
    """bf16/fp16 when the DeepSpeed config keeps parameters in half precision (the head must match)."""
    if acc.distributed_type != DistributedType.DEEPSPEED:
        return None
    ds = acc.state.deepspeed_plugin.deepspeed_config
    for key, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        if (ds.get(key) or {}).get("enabled") is True:
            return dtype
    return None


def head_grad_norm(rm: RewardModel) -> torch.Tensor | None:
    """L2 norm of the head's gradients, a 0-d fp32 tensor on their device (read with the step's other metrics:
    no host sync); None where they are not materialised, e.g. DeepSpeed partitions."""
    grads = [p.grad for p in rm.head.parameters() if p.grad is not None]
    if not grads:
        return None
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))


def clip_gradients(acc: Accelerator, model: Any, optimizer: Any, max_norm: float) -> torch.Tensor | None:
    """Clip to max_norm; the total norm before clipping as a device tensor (None where DeepSpeed gives none).
    Under bf16_master the fp32 gradients of the master copies are clipped (the norm computed in fp32)."""
    if isinstance(optimizer, MasterWeights):
        return optimizer.clip_grad_norm_(max_norm)
    norm = acc.clip_grad_norm_(model.parameters(), max_norm)
    if norm is None or isinstance(norm, torch.Tensor):
        return norm
    return torch.tensor(float(norm), device=acc.device)  # DeepSpeed's engine gives a number


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


def make_optimizer(
    rm: RewardModel, settings: RewardSettings, acc: Accelerator
) -> torch.optim.Optimizer | MasterWeights:
    """AdamW over param_groups; the fused kernel (one op for all parameters) where torch has it for the
    device, foreach otherwise. DeepSpeed swaps in its own optimizer step, so it gets the plain one. Under
    bf16_master the AdamW steps fp32 copies of the same groups (its state fp32 too) and the model gets them
    rounded after each step; the copies are saved with every checkpoint (register_for_checkpointing)."""
    t = settings.train
    fused = acc.distributed_type != DistributedType.DEEPSPEED and acc.device.type in ("cpu", "cuda")
    kind = {"fused": True} if fused else {"foreach": acc.distributed_type != DistributedType.DEEPSPEED}
    groups = param_groups(rm, settings)
    if settings.backbone.precision != "bf16_master":
        return torch.optim.AdamW(groups, lr=t.learning_rate, **kind)
    params = [p for g in groups for p in g["params"]]

    def on_copies(master: list[torch.Tensor]) -> torch.optim.AdamW:
        it = iter(master)
        copies = [{**g, "params": [next(it) for _ in g["params"]]} for g in groups]
        return torch.optim.AdamW(copies, lr=t.learning_rate, **kind)

    optimizer = MasterWeights(params, on_copies)
    acc.register_for_checkpointing(optimizer)
    return optimizer


def make_scheduler(
    optimizer: torch.optim.Optimizer | MasterWeights, settings: RewardSettings, steps: int
) -> Any:
    """train.lr_schedule after train.warmup_steps of linear warm-up (on the inner AdamW under bf16_master)."""
    t = settings.train
    inner = optimizer.inner if isinstance(optimizer, MasterWeights) else optimizer
    return get_scheduler(
        SCHEDULES[t.lr_schedule], inner, num_warmup_steps=t.warmup_steps, num_training_steps=steps
    )


def precision_setup(rm: RewardModel, settings: RewardSettings) -> None:
    """bf16_master: the backbone's parameters in bf16 (its buffers, e.g. rotary frequencies, stay as they are;
    the head stays fp32 and runs outside autocast in its own dtype, RewardModel.score_features)."""
    if settings.backbone.precision != "bf16_master":
        return
    for p in rm.backbone.parameters():
        p.data = p.data.to(torch.bfloat16)


@torch.no_grad()
def full_precision(rm: RewardModel, optimizer: Any) -> None:
    """After bf16_master training: the backbone back in fp32, its trained parameters set to the fp32 master
    copies (so the saved model and the head refit read the copies, not their bf16 rounding); frozen parameters
    (LoRA's base) come back as their bf16 values widened."""
    if not isinstance(optimizer, MasterWeights):
        return
    copies = {id(p): m for p, m in zip(optimizer.params, optimizer.master, strict=True)}
    for p in rm.backbone.parameters():
        p.data = copies[id(p)].detach().clone() if id(p) in copies else p.data.float()


def execution_setup(rm: RewardModel, settings: RewardSettings, device: torch.device) -> dict[str, Any]:
    """backbone.kernels and backbone.compile on the backbone about to train (after precision_setup, so
    compilation sees the dtype it will run in); returns what was applied, for the run's log."""
    s = settings.backbone
    applied = apply_kernels(rm.backbone, s.kernels, device)
    compiled = compile_backbone(rm.backbone, s.compile)
    if applied != "none" or compiled:
        log.info("backbone execution: kernels %s, torch.compile %s", applied, s.compile)
    return {"kernels": applied, "compile": s.compile if compiled else "none"}


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
