"""Rollout engines for GRPO, chosen by `grpo.<run>.rollout.engine`: who samples the completions.

  plain  prefpipe's own decode (grpo/rollout.py; the fast path on CPU and the default)
  vllm   a vLLM engine colocated in the trainer's process; its weights are replaced by the trainer's after every
         step, and a probe of its log-probs against the trainer's proves it (engines/vllm_engine.py)

The trainer always re-scores the completions itself; an engine that reports its own log-probs lets it log the
engine-trainer gap and correct for it (engines/correction.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from prefpipe.grpo.engines.base import PlainEngine, RolloutEngine
from prefpipe.settings.grpo import GrpoSettings

EngineFactory = Callable[[GrpoSettings, torch.nn.Module, object, Path], RolloutEngine]


def _plain(settings: GrpoSettings, policy: torch.nn.Module, tokenizer, work_dir: Path) -> RolloutEngine:
    return PlainEngine(settings)


def _vllm(settings: GrpoSettings, policy: torch.nn.Module, tokenizer, work_dir: Path) -> RolloutEngine:
    from prefpipe.grpo.engines.vllm_engine import VllmEngine  # vllm is optional: imported only when chosen

    return VllmEngine(settings, policy, tokenizer, work_dir)


ENGINES: dict[str, EngineFactory] = {"plain": _plain, "vllm": _vllm}


# Engines that run in one trainer process only: vLLM in-process sets up its own torch.distributed group, which
# would collide with data-parallel GRPO's (an engine per process is not supported yet).
SINGLE_PROCESS = {"vllm"}


def build_engine(
    settings: GrpoSettings, policy: torch.nn.Module, tokenizer, work_dir: Path, processes: int = 1
) -> RolloutEngine:
    """The run's engine; `processes`: data-parallel trainer processes."""
    name = settings.rollout.engine
    if name not in ENGINES:
        raise ValueError(f"grpo.{settings.run}.rollout.engine must be one of {sorted(ENGINES)}, got {name!r}")
    if processes > 1 and name in SINGLE_PROCESS:
        raise ValueError(
            f"grpo.{settings.run}.rollout.engine: {name} runs in one trainer process only, not {processes} "
            "data-parallel processes (not supported yet)"
        )
    return ENGINES[name](settings, policy, tokenizer, work_dir)
