"""Pin the CPU kernels, so one seed gives the same bits on every x86-64 CPU with AVX2.

Measured (README, Reproducibility): with everything else equal, PyTorch's ATen kernels pick their vector width
from the CPU (AVX-512 on one machine, AVX2 on another), and the float sums they compute in a different order
drift apart in the last bits, which training then amplifies; MKL's matrix products pick a code path by CPU the
same way. Two runs on one CPU type are bit-identical; across CPU types they were not. So every stage (the stage
frame calls `pin_cpu_kernels` before any tensor op) asks for the AVX2 kernels of both libraries, the widest
level every x86-64 CPU of the last decade has, which on an AVX-512 machine measured no slower. A value the user
set in the environment is kept (set `ATEN_CPU_CAPABILITY=avx512`, `MKL_CBWR=AUTO` to opt out). A CPU without
AVX2 (or not x86) is left unpinned: its results match within the documented tolerance, not bit for bit.
"""

from __future__ import annotations

import os
import platform
from typing import Any

# env var -> the value prefpipe sets unless the user set one
PINS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}
# what a CPU needs for the pinned kernels (x86 flags in /proc/cpuinfo)
REQUIRED_FLAGS = ("avx2", "fma")
CPUINFO = "/proc/cpuinfo"


def cpu_flags(path: str = CPUINFO) -> set[str]:
    """The first CPU's feature flags (empty where /proc/cpuinfo is missing, e.g. macOS)."""
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_model(path: str = CPUINFO) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def pin_cpu_kernels(environ: Any = os.environ, flags: set[str] | None = None) -> dict[str, str]:
    """Set each of PINS that the user has not set, where the CPU has the instructions; return what was set.

    Must run before the first tensor op of the process (both libraries read their variable once)."""
    flags = cpu_flags() if flags is None else flags
    if not all(flag in flags for flag in REQUIRED_FLAGS):
        return {}
    applied = {}
    for name, value in PINS.items():
        if name not in environ:
            environ[name] = value
            applied[name] = value
    return applied


def cpu_kernel_facts() -> dict[str, Any]:
    """What a run record keeps about the kernels: the capability ATen runs with, the variables, the CPU."""
    flags = cpu_flags()
    facts: dict[str, Any] = {
        "cpu": cpu_model(),
        "cpu_vector_flags": sorted(
            f for f in flags if f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile")
        ),
        "env": {name: os.environ.get(name) for name in (*PINS, "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS")},
        "pinned": all(os.environ.get(name) == value for name, value in PINS.items()),
    }
    try:
        import torch

        facts["aten_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except ImportError:
        facts["aten_cpu_capability"] = None
    return facts
