"""The trainer's full weights as a checkpoint would name them (LoRA merged in), and a checksum of a weight set
that does not depend on how an engine lays the tensors out.

Why merge here instead of `merge_adapter()`/`unmerge_adapter()`: merging into the base weights and subtracting
again leaves rounding residue in the trainable model; W + delta is computed on the side and the policy is untouched.

Why sums: an engine fuses tensors (vLLM stores q/k/v as one `qkv_proj`, gate/up as `gate_up_proj`) and pads the
vocabulary with zero rows, so element-wise comparison needs a name map per architecture. Float64 sums of x, x^2
and |x| over every parameter are the same for any concatenation or zero padding, and one missed update of any
tensor moves them far beyond rounding.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

PEFT_PREFIX = "base_model.model."


def full_weights(policy: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(checkpoint name, tensor) of every parameter the policy samples with; LoRA layers yield W + B A * scale
    of their active adapters (detached, on the policy's device)."""
    modules = dict(policy.named_modules())
    for name, param in policy.named_parameters():
        if ".lora_" in name:
            continue
        tensor = param.detach()
        if ".base_layer." in name:
            layer = modules[name.split(".base_layer.")[0]]
            if name.endswith(".base_layer.weight") and not getattr(layer, "merged", False):
                for adapter in layer.active_adapters:
                    if adapter in getattr(layer, "lora_A", {}):
                        tensor = tensor + layer.get_delta_weight(adapter).to(tensor.dtype)
            name = name.replace(".base_layer.", ".")
        if name.startswith(PEFT_PREFIX):
            name = name[len(PEFT_PREFIX) :]
        if "modules_to_save" in name or "original_module" in name:
            raise ValueError(f"LoRA modules_to_save ({name}) are not supported by the rollout engine sync")
        yield name, tensor


def weight_checksum(tensors: Iterable[torch.Tensor], dtype: torch.dtype | None = None) -> torch.Tensor:
    """[sum x, sum x^2, sum |x|] in float64 over all tensors (each first cast to `dtype`, the engine's, so the
    trainer's fp32 weights are compared as the engine stores them)."""
    total = torch.zeros(3, dtype=torch.float64)
    for t in tensors:
        x = (t.to(dtype) if dtype is not None else t).detach().double()
        total += torch.stack([x.sum(), (x * x).sum(), x.abs().sum()]).cpu()
    return total


def checksum_difference(engine: torch.Tensor, trainer: torch.Tensor) -> float:
    """The largest relative difference of the three sums (x is scaled by sum |x|, the others by themselves)."""
    scale = torch.stack([trainer[2], trainer[1], trainer[2]]).clamp(min=1e-30)
    return float(((engine - trainer).abs() / scale).max())
