"""The trainer's full weights as a checkpoint would name them (LoRA merged in), for a rollout engine's sync.

Why merge here instead of `merge_adapter()`/`unmerge_adapter()`: merging into the base weights and subtracting
again leaves rounding residue in the trainable model; W + delta is computed on the side and the policy is untouched.
"""

from __future__ import annotations

from collections.abc import Iterator

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
