"""Rollout engines for GRPO, chosen by `grpo.<run>.rollout.engine`: who samples the completions.

  plain  prefpipe's own decode (grpo/rollout/completions.py; the fast path on CPU and the default)
  vllm   a vLLM engine colocated in the trainer's process; its weights are replaced by the trainer's after every
         step, and a probe of its log-probs against the trainer's proves it (engines/vllm_engine.py); with
         data-parallel processes one engine per process, joined to their process group

Both roll out multi-turn episodes too (`episode_decoder`; the vLLM engine's: engines/vllm_episodes.py).
The trainer always re-scores the completions itself; an engine that reports its own log-probs lets it log the
engine-trainer gap and correct for it (engines/correction.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from prefpipe.common.registry import registrar
from prefpipe.grpo.data_parallel import DataParallel
from prefpipe.grpo.rollout.engines.base import PlainEngine, RolloutEngine
from prefpipe.settings.grpo import GrpoSettings

EngineFactory = Callable[[GrpoSettings, torch.nn.Module, object, Path, DataParallel], RolloutEngine]
ENGINES: dict[str, EngineFactory] = {}


# `@register_engine("name")`: `grpo.runs.<run>.rollout.engine: name` builds the run's engine with the factory
# `(settings, policy, tokenizer, work_dir, dp) -> RolloutEngine`; the config checks refuse another name.
register_engine = registrar(ENGINES, "rollout engine")


@register_engine("plain")
def _plain(
    settings: GrpoSettings, policy: torch.nn.Module, tokenizer, work_dir: Path, dp: DataParallel
) -> RolloutEngine:
    return PlainEngine(settings)


@register_engine("vllm")
def _vllm(
    settings: GrpoSettings, policy: torch.nn.Module, tokenizer, work_dir: Path, dp: DataParallel
) -> RolloutEngine:
    from prefpipe.grpo.rollout.engines.vllm_engine import (
        VllmEngine,
    )  # vllm is optional: imported only when chosen

    return VllmEngine(settings, policy, tokenizer, work_dir, dp)


def build_engine(
    settings: GrpoSettings, policy: torch.nn.Module, tokenizer, work_dir: Path, dp: DataParallel | None = None
) -> RolloutEngine:
    """The run's engine; `dp`: the data-parallel processes (one engine each; None = this process alone)."""
    name = settings.rollout.engine
    if name not in ENGINES:
        raise ValueError(f"grpo.{settings.run}.rollout.engine must be one of {sorted(ENGINES)}, got {name!r}")
    return ENGINES[name](settings, policy, tokenizer, work_dir, dp or DataParallel())
