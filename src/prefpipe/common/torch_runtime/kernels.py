"""How a transformers backbone executes: fused kernels by name (`backbone.kernels`) and torch.compile
(`backbone.compile`), both off by default and chosen by measurement on a GPU (benchmarks/device_check.py).

Liger's Triton kernels replace RMSNorm, the SwiGLU MLP and the rotary embedding of a supported architecture
with fused ones (fewer memory passes per layer). Liger's own patcher is used (a library that keeps pace with
transformers' modelling files), asked for the family of this model instance with the loss patches off: a bare
backbone has no LM head, and Liger's fused cross-entropy would replace the instance's forward. Liger says
only "no kernels for this model type" in a log line when a family is unknown; here that is refused, since a
run asked for the kernels would otherwise measure the plain path under the lever's name.

torch.compile goes through `nn.Module.compile`, which compiles in place: the state dict keeps its keys, so
checkpoints and the saved model do not change.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

import torch

from prefpipe.common.config import ConfigError

KEY = "backbone.kernels"
COMPILE_KEY = "backbone.compile"
LIGER_INSTALL = "pip install liger-kernel (needs a CUDA build of torch with Triton)"
# Liger's switches per family: the backbone's layers only (no cross-entropy: a bare backbone has no LM head).
LIGER_SWITCHES = {
    "rope": True,
    "rms_norm": True,
    "swiglu": True,
    "geglu": True,
    "layer_norm": True,
    "cross_entropy": False,
    "fused_linear_cross_entropy": False,
}
# backbone.compile -> torch.compile's mode (none: the plain eager forward).
COMPILE_MODES = {
    "none": None,
    "default": "default",
    "reduce-overhead": "reduce-overhead",
    "max-autotune": "max-autotune",
}


def _none(model: torch.nn.Module) -> str:
    return "none"


def _liger(model: torch.nn.Module) -> str:
    try:
        patches = importlib.import_module("liger_kernel.transformers.monkey_patch")
    except ImportError as err:
        raise ConfigError(f"{KEY}: liger needs the liger-kernel package ({err}): {LIGER_INSTALL}") from err
    family = getattr(getattr(model, "config", None), "model_type", None)
    table = patches.MODEL_TYPE_TO_APPLY_LIGER_FN
    if family not in table:
        known = ", ".join(sorted(table))
        raise ConfigError(f"{KEY}: liger has no kernels for model type {family!r} (it has: {known})")
    apply = table[family]
    accepted = inspect.signature(apply).parameters
    apply(model=model, **{k: v for k, v in LIGER_SWITCHES.items() if k in accepted})
    return f"liger ({family})"


KERNELS: dict[str, Callable[[torch.nn.Module], str]] = {"none": _none, "liger": _liger}


def apply_kernels(model: torch.nn.Module, name: str, device: torch.device) -> str:
    """Patch `model` in place with the named kernels; returns what was applied (for the run's log)."""
    if name not in KERNELS:
        raise ConfigError(f"{KEY}: {name!r} is not a kernel set (known: {', '.join(KERNELS)})")
    if name != "none" and device.type != "cuda":
        raise ConfigError(
            f"{KEY}: {name} runs Triton kernels on a CUDA device, and this run is on {device.type}; "
            f"set {KEY}: none"
        )
    return KERNELS[name](model)


def compile_backbone(module: torch.nn.Module, mode: str) -> bool:
    """torch.compile the module's forward in place (same parameters, same state-dict keys); True if compiled."""
    if mode not in COMPILE_MODES:
        raise ConfigError(f"{COMPILE_KEY}: {mode!r} is not a mode (known: {', '.join(COMPILE_MODES)})")
    if COMPILE_MODES[mode] is None:
        return False
    module.compile(mode=COMPILE_MODES[mode])
    return True
