"""The transformers and peft names that moved inside the versions pyproject admits, in one place.

- The KV cache: transformers 5.24 renamed the forward argument and output field `past_key_values` to `cache`
  (the old name warns and goes in 5.40); earlier 5.x releases know only `past_key_values`. Either way the object
  is a `Cache` (a `DynamicCache` for the models here), never a legacy tuple: `cache_kwargs` passes it under the
  name the model's forward declares and `output_cache` reads it back.
- peft 0.21 (`get_peft_model`, `PeftModel.from_pretrained`) reads `model.is_gradient_checkpointing`, which
  transformers 5.24 deprecates in favour of `is_activation_checkpointing`: `get_peft_model` and
  `load_peft_adapter` here silence that one warning (peft's call, not ours), so a run's log carries no
  deprecation notice.

Tests: tests/test_transformers_api.py (a tiny GRPO run's log has no deprecation warning).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import warnings
from collections.abc import Iterator
from typing import Any

import torch


def unwrap_peft(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model inside a peft wrapper (the model itself when it has none)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


@functools.cache
def _cache_argument(model_class: type) -> str:
    """`cache` where the model's forward declares it (transformers >= 5.24), else `past_key_values`."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def cache_kwargs(model: torch.nn.Module, cache: Any) -> dict[str, Any]:
    """Forward keyword arguments that continue from `cache` (a `Cache` a previous forward returned)."""
    return {_cache_argument(type(unwrap_peft(model))): cache, "use_cache": True}


def output_cache(output: Any) -> Any:
    """The `Cache` a forward with use_cache=True returned, under either field name; None when the model
    returned none (e.g. with gradient checkpointing in training mode)."""
    keys = output.keys()
    for name in ("cache", "past_key_values"):
        if name in keys:
            return output[name]
    return None


@contextlib.contextmanager
def _peft_reads_deprecated_attribute() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning
        )
        yield


def get_peft_model(model: torch.nn.Module, config: Any) -> torch.nn.Module:
    """peft's get_peft_model without the deprecation warning its own attribute read raises (see the module
    docstring)."""
    from peft import get_peft_model as wrap

    with _peft_reads_deprecated_attribute():
        return wrap(model, config)


def load_peft_adapter(model: torch.nn.Module, folder: str | os.PathLike, **kwargs: Any) -> torch.nn.Module:
    """peft's PeftModel.from_pretrained (a saved adapter on `model`), without that same warning."""
    from peft import PeftModel

    with _peft_reads_deprecated_attribute():
        return PeftModel.from_pretrained(model, folder, **kwargs)


def set_activation_checkpointing(model: torch.nn.Module, on: bool) -> None:
    """Turn gradient (activation) checkpointing of a transformers model, or the one inside a peft wrapper, on
    or off under the name this transformers version has (`activation_checkpointing_*` from 5.x, before that
    `gradient_checkpointing_*`). Non-reentrant: a frozen base under a LoRA adapter needs no input gradients."""
    target = unwrap_peft(model)
    if on:
        if hasattr(target, "activation_checkpointing_enable"):
            target.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            target.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    elif hasattr(target, "activation_checkpointing_disable"):
        target.activation_checkpointing_disable()
    else:
        target.gradient_checkpointing_disable()
