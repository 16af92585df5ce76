"""Typed settings for tests, built the way the workflow builds them: config/config.yaml with an overlay,
validated against the schema and typed by prefpipe.settings. No test writes its own defaults."""

from __future__ import annotations

from typing import Any

from prefpipe.settings.base import BaseSettings
from prefpipe.settings.data import DataSettings
from prefpipe.settings.evaluation import EvalSettings
from prefpipe.settings.grpo import GrpoSettings
from prefpipe.settings.pipeline import PipelineSettings, load_config
from prefpipe.settings.report import ReportSettings
from prefpipe.settings.reward import RewardSettings


def pipeline(*overlays: dict[str, Any] | str, threads: int | None = 1) -> PipelineSettings:
    """The whole experiment's settings: config/config.yaml with each overlay (a mapping or a file) merged."""
    return PipelineSettings.from_config(load_config(*overlays), threads=threads)


def reward_settings(
    overrides: dict[str, Any] | None = None, variant: str = "gpm", **top: Any
) -> RewardSettings:
    """One reward variant's settings: the default `variant` with `overrides` deep-merged over it.
    `top` sets run-wide keys (seed=3)."""
    overlay = {"reward": {"variants": {variant: overrides or {}}, "only": None}, **top}
    return pipeline(overlay).reward[variant]


def grpo_settings(overrides: dict[str, Any] | None = None, run: str = "verifier", **top: Any) -> GrpoSettings:
    """One GRPO run's settings: the default `run` with `overrides` deep-merged over it."""
    overlay = {"grpo": {"runs": {run: overrides or {}}, "only": None}, **top}
    return pipeline(overlay).grpo[run]


def eval_settings(overrides: dict[str, Any] | None = None, **top: Any) -> EvalSettings:
    """The eval stage's settings; `overrides` merge into the `eval` section (a `benchmarks` mapping is
    merged too: pass the default's `synthetic: synthetic` key explicitly to keep or replace it)."""
    return pipeline({"eval": overrides or {}, **top}).eval


def data_settings(overrides: dict[str, Any] | None = None, **top: Any) -> DataSettings:
    return pipeline({"data": overrides or {}, **top}).data


def base_settings(overrides: dict[str, Any] | None = None, **top: Any) -> BaseSettings:
    return pipeline({"base": overrides or {}, **top}).base


def report_settings(overrides: dict[str, Any] | None = None, **top: Any) -> ReportSettings:
    settings = pipeline({"report": overrides or {}, **top}).report
    assert settings is not None, "report.enabled is false"
    return settings


def stage_json(settings: Any, threads: int | None = 1) -> str:
    """What the workflow passes to a stage as --config."""
    return pipeline().stage_json(settings, threads)
