"""Which torch device a stage runs on: one resolution of the config's `device` keys (auto | cpu | cuda | cuda:N),
and what a finished stage records about the device it actually used (versions.json `ran_on`)."""

from __future__ import annotations

from typing import Any

import torch

from prefpipe.common.config import ConfigError


def resolve_device(name: str, key: str = "device") -> torch.device:
    """auto: the first CUDA device when one is visible, else the CPU; a CUDA device asked for by name must exist
    (an error naming the config key, not a late CUDA error inside a model call)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ConfigError(f"{key}: {name!r} is not a device (auto | cpu | cuda | cuda:N)") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{key} is {name!r} but no CUDA device is available")
    return device


def ran_on() -> dict[str, Any]:
    """The device this process's torch work used: the CUDA devices it allocated memory on (name, peak GiB), or the
    CPU when it touched none. Read at the end of a stage, so it reports what ran, not what was configured."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {"device": "cpu"}
    used = [
        {
            "device": f"cuda:{i}",
            "name": torch.cuda.get_device_name(i),
            "peak_memory_gib": round(torch.cuda.max_memory_allocated(i) / 2**30, 3),
        }
        for i in range(torch.cuda.device_count())
        if torch.cuda.max_memory_allocated(i) > 0
    ]
    if not used:
        return {"device": "cpu"}
    return {"device": used[0]["device"], "cuda": used}
