"""The run-wide keys every stage receives beside its own section."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, TypeVar

S = TypeVar("S", bound="RunSettings")


@dataclass
class WandbSettings:
    enabled: bool
    mode: str  # offline | online | disabled
    project: str


@dataclass
class RunSettings:
    """Base of every stage's settings: the experiment's name and seed, tracking, the speed-path switch and the
    rule's threads.

    `torch_threads` is the Snakemake rule's `threads` (null in the provenance copy, which must not change
    when only the thread count does)."""

    experiment: str
    seed: int
    wandb: WandbSettings
    fast_paths: bool  # False: every optimised path takes its plain reference path instead (same decisions)
    torch_threads: int | None

    @classmethod
    def from_stage_config(cls: type[S], values: dict[str, Any], key: str) -> S:
        """This stage's settings from its --config mapping, schema-checked (what prefpipe.common.stage calls)."""
        from prefpipe.settings.pipeline import load_stage  # pipeline imports this module: import on use

        return load_stage(cls, values, key)


# experiment, seed, wandb, fast_paths, torch_threads
RUN_WIDE_KEYS = tuple(f.name for f in fields(RunSettings))
