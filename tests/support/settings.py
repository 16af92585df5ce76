"""Typed settings for tests, built the way the workflow builds them: config/config.yaml with an overlay,
validated against the schema and typed by prefpipe.settings. No test writes its own defaults."""

from __future__ import annotations

from typing import Any

from prefpipe.config_checks import checked_pipeline
from prefpipe.settings.base import BaseSettings
from prefpipe.settings.data import DataSettings
from prefpipe.settings.evaluation import EvalSettings
from prefpipe.settings.grpo import GrpoSettings
from prefpipe.settings.pipeline import PipelineSettings, load_config
from prefpipe.settings.report import ReportSettings
from prefpipe.settings.reward import RewardSettings


def pipeline(*overlays: dict[str, Any] | str, threads: int | None = 1) -> PipelineSettings:
    """The whole experiment's settings: config/config.yaml with each overlay (a mapping or a file) merged,
    checked as the workflow checks them (prefpipe.config_checks)."""
    return checked_pipeline(load_config(*overlays), threads=threads)


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
    """The data stage's settings. Unless `top` names `grpo`, the runs are the default's single-turn ones: a data
    test reads the built-in world's files, and a run on the multi-hop world (the default's search runs) would add
    its questions and 2000 demonstrations (data.multihop_alongside; tests/test_multihop_alongside.py passes grpo)."""
    if "grpo" not in top:
        top["grpo"] = {"only": single_turn_runs()}
    return pipeline({"data": overrides or {}, **top}).data


def single_turn_runs() -> list[str]:
    """The default's GRPO runs that train on data.prompts (grpo.<run>.prompts: main)."""
    return [name for name, run in pipeline().grpo.items() if run.prompts == "main"]


def base_settings(overrides: dict[str, Any] | None = None, **top: Any) -> BaseSettings:
    return pipeline({"base": overrides or {}, **top}).base


def report_settings(overrides: dict[str, Any] | None = None, **top: Any) -> ReportSettings:
    settings = pipeline({"report": overrides or {}, **top}).report
    assert settings is not None, "report.enabled is false"
    return settings


def stage_json(settings: Any, threads: int | None = 1) -> str:
    """What the workflow passes to a stage as --config."""
    return pipeline().stage_json(settings, threads)


# A GRPO run a test finishes in seconds on the tiny policy of support/models.py (merged over a run's settings): a
# random tiny policy rarely ends a completion within max_new_tokens, so it trains on truncated ones.
TINY_GRPO_RUN: dict[str, Any] = {
    "steps": 2,
    "prompts_per_step": 2,
    "num_generations": 4,
    "max_new_tokens": 6,
    "mask_truncated_completions": False,
}


# A small, fast reward variant for tests on the tiny backbones of support/models.py: a 4-dim head, short
# sequences, a few constant-rate steps without warm-up, no train-accuracy pass.
TINY_REWARD: dict[str, Any] = {
    "head": {"dim": 4},
    "data": {"max_length": 64},
    "train": {
        "steps": 4,
        "batch_size": 8,
        "micro_batch_size": 8,
        "learning_rate": 1e-2,
        "warmup_steps": 0,
        "lr_schedule": "constant",
        "head_fit": {"before_steps": 20, "after_steps": 20},  # the default's path, cheaply
    },
    "eval": {"batch_size": 8, "train_pairs": 0},
}


def tiny_reward_settings(head: str = "gpm", /, **overrides: Any) -> RewardSettings:
    """The default `head` variant (bt, gpm or bgpm) with TINY_REWARD and then `overrides` (head={"dim": 6},
    train={...}) deep-merged over it; a bgpm head warms its KL up over 2 steps."""
    from prefpipe.settings.merge import deep_merge

    tiny = deep_merge(TINY_REWARD, {"head": {"bayes": {"kl_warmup_steps": 2}}} if head == "bgpm" else {})
    if head in ("bt", "gpm", "bgpm"):  # the default variant of that name
        return reward_settings(deep_merge(tiny, overrides), variant=head)
    # any other registered head: the gpm variant with that head type
    return reward_settings(deep_merge(deep_merge(tiny, {"head": {"type": head}}), overrides))


def world_settings(
    *,
    pairs: tuple[int, int],
    triples: tuple[int, int],
    rl_prompts: tuple[int, int],
    demonstrations: int,
    demo_error_rate: float,
    **synthetic: Any,
):
    """`data.synthetic` (SyntheticWorldSettings, what build_world takes) sized for a test: pairs per subset,
    cyclic triples and RL prompts as (train, test/held-out); other keys (kinds) merged over the default."""
    sizes = {
        "pairs_per_subset_train": pairs[0],
        "pairs_per_subset_test": pairs[1],
        "cyclic_triples_train": triples[0],
        "cyclic_triples_test": triples[1],
        "rl_prompts_train": rl_prompts[0],
        "rl_prompts_heldout": rl_prompts[1],
        "demonstrations": demonstrations,
        "demo_error_rate": demo_error_rate,
    }
    return data_settings({"synthetic": {**sizes, **synthetic}}).synthetic


def external_settings(**external: Any):
    """`data.external` (ExternalSourceSettings, what load_external_pairs takes) with `external` merged over
    the default."""
    return data_settings({"external": external}).external


def reward_spec(type_: str, **overrides: Any) -> dict[str, Any]:
    """A complete `grpo.rewards` entry as the settings layer passes it: the schema fills each default."""
    from prefpipe.settings import schema

    run = {"rewards": [{"type": type_, **overrides}]}
    schema.validate(run, "grpo.schema.yaml#/$defs/grpo_run", "test")
    return run["rewards"][0]
