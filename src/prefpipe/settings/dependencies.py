"""Optional packages a setting needs, checked when the config is checked (the workflow's parse, a dry run),
so `rollout.engine: vllm` without vLLM stops before anything runs, naming the key and the install command,
instead of a ModuleNotFoundError in the training stage hours later.

NEEDS is the table: a package, how to install it, and which settings ask for it. Only whether the package can
be found is asked (importlib.util.find_spec): nothing is imported.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from prefpipe.common.config import ConfigError

if TYPE_CHECKING:
    from prefpipe.settings.pipeline import PipelineSettings


@dataclass(frozen=True)
class Need:
    module: str  # the import name looked up
    install: str  # what to run
    keys: Callable[[PipelineSettings], Iterator[str]]  # the config keys (with values) that ask for it


def _vllm_keys(s: PipelineSettings) -> Iterator[str]:
    for name, run in s.grpo.items():
        if run.rollout.engine == "vllm":
            yield f"grpo.runs.{name}.rollout.engine = vllm"


def _gguf_keys(s: PipelineSettings) -> Iterator[str]:
    for name in s.models:
        yield f"models.{name}.gguf"


def _deepspeed_keys(s: PipelineSettings) -> Iterator[str]:
    """An accelerate config that launches DeepSpeed, used when reward training gets several GPUs."""
    path = s.accelerate_config
    if not path or int(s.resources("train_reward_model").get("gpu") or 0) < 2:
        return
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return  # the launch names the missing file itself
    if "deepspeed" in text.lower():
        yield f"launch.accelerate_config = {path} (DeepSpeed, resources.train_reward_model.gpu > 1)"


def _liger_keys(s: PipelineSettings) -> Iterator[str]:
    for name, variant in s.reward.items():
        if variant.backbone.kernels == "liger":
            yield f"reward.variants.{name}.backbone.kernels = liger"


NEEDS = (
    Need("vllm", "PREFPIPE_VLLM_VENV=.venv-vllm bash scripts/vllm_env.sh (or pip install vllm)", _vllm_keys),
    Need("gguf", "pip install gguf", _gguf_keys),
    Need("deepspeed", "pip install deepspeed", _deepspeed_keys),
    Need("liger_kernel", "pip install liger-kernel (a CUDA build of torch with Triton)", _liger_keys),
)


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def check_dependencies(settings: PipelineSettings) -> None:
    """ConfigError naming the first key whose package is not installed, and the install command."""
    for need in NEEDS:
        keys = list(need.keys(settings))
        if keys and not installed(need.module):
            more = f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""
            raise ConfigError(
                f"{keys[0]}{more} needs the {need.module!r} package, which is not installed here: {need.install}"
            )
