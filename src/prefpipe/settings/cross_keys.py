"""Conditions between keys that no schema can state, in one table, checked wherever settings are built
(`build_stage`: the workflow's parse, a dry run, and a stage's own --config), so a setting that would give a
meaningless result stops the run naming both keys instead of running to a result that says nothing.

Learning-rate warm-ups longer than a run are not refused: a short smoke run of a config tuned for long ones is a
legitimate use and its result still means what it says (a length head whose terms never reach their weight does not).

RULES maps a settings class (by name) to its rules; each rule returns (key, message) for what it refuses, or None.

Percentile intervals: an interval at confidence c from B resamples takes its ends at the (1 - c) / 2 and
(1 + c) / 2 quantiles of the B resampled figures; with fewer than 2.5 resamples beyond each end the ends are
the one or two most extreme resamples, not quantiles (at B = 1 the "interval" is a single resample, and it
excluded its own estimate in 86% of trials of a 40-pair accuracy; at B = 5, 7%). MIN_TAIL = 2.5 gives
B >= 100 at 95% (the minimum the ablation and hypotheses schemas already hold) and B >= 500 at 99%.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from prefpipe.common.config import ConfigError

MIN_TAIL = 2.5  # resamples beyond each end of a percentile interval
LENGTH_CONFIDENCE = 0.95  # the length figures' interval level (prefpipe.evaluation.length_control.CONFIDENCE)
Refusal = tuple[str, str] | None


def min_resamples(confidence: float) -> int:
    """The fewest resamples whose percentile interval at `confidence` has MIN_TAIL resamples beyond each end."""
    return math.ceil(MIN_TAIL / ((1 - confidence) / 2) - 1e-9)


def _resamples(key: str, count: int, confidence: float, zero_is_off: bool = False) -> Refusal:
    if zero_is_off and count == 0:
        return None
    need = min_resamples(confidence)
    if count >= need:
        return None
    off = " (or 0 for no intervals)" if zero_is_off else ""
    return key, (
        f"{count}: too few resamples for a {confidence:.0%} percentile interval: its ends would be single "
        f"resamples, not quantiles (it can exclude its own estimate); use at least {need}{off}"
    )


def _warmup(key: str, warmup: int, steps_key: str, steps: int | None, what: str) -> Refusal:
    if steps is None or warmup <= steps:
        return None
    return key, (
        f"{warmup} is longer than {steps_key} = {steps}: {what} would reach only {steps / warmup:.1%} of full "
        f"weight by the last step; use at most {steps} (or more steps)"
    )


def _reward_rules(s: Any) -> list[Refusal]:  # RewardSettings
    t, head = s.train, s.head
    found: list[Refusal] = []
    length = getattr(head, "length_head", None)
    if length is not None and length.enabled:
        found.append(
            _warmup(
                "head.length_head.warmup_steps",
                length.warmup_steps,
                "train.steps",
                t.steps,
                "the length terms",
            )
        )
    return found


def _episode_rules(s: Any) -> list[Refusal]:  # GrpoSettings with episodes
    if not s.episodes.enabled:
        return []
    found: list[Refusal] = []
    if s.uses_reward_model():
        found.append(
            (
                "episodes.enabled",
                "true with a reward_model reward: episodes are scored on their final answer by rule rewards "
                "(verifier, exact_match, token_f1); drop the reward_model reward (or episodes.enabled: false)",
            )
        )
    return found


def _compile_decode(s: Any) -> Refusal:  # GrpoSettings
    """rollout.compile_decode acts on the single-turn decode of the plain engine's fast path only."""
    if s.rollout.compile_decode == "none":
        return None
    unused = (
        (s.rollout.engine != "plain", f"rollout.engine = {s.rollout.engine!r}"),
        (not s.fast_paths, "fast_paths = false"),
        (s.episodes.enabled, "episodes.enabled = true"),
    )
    where = next((why for hit, why in unused if hit), None)
    if where is None:
        return None
    return "rollout.compile_decode", (
        f"{s.rollout.compile_decode!r} with {where}: it compiles the plain engine's single-turn decode with "
        "fast_paths on, which this run does not use; set it to none"
    )


def _grpo_rules(s: Any) -> list[Refusal]:  # GrpoSettings
    return [
        _resamples("eval.bootstrap_samples", s.eval.bootstrap_samples, s.eval.confidence),
        *_episode_rules(s),
        _compile_decode(s),
    ]


def _eval_rules(s: Any) -> list[Refusal]:  # EvalSettings
    e = s.eval
    return [
        _resamples("eval.uncertainty.resamples", e.uncertainty.resamples, e.uncertainty.confidence),
        _resamples("eval.length_bootstrap_resamples", e.length_bootstrap_resamples, LENGTH_CONFIDENCE, True),
    ]


# Keyed by the settings class's name: the classes import settings.run, whose build_stage calls this table, so
# the table cannot import them back (tests/test_settings_layer.py keeps the settings free of import circles).
RULES: dict[str, Callable[[Any], list[Refusal]]] = {
    "RewardSettings": _reward_rules,
    "GrpoSettings": _grpo_rules,
    "EvalSettings": _eval_rules,
    "AblationStageSettings": lambda s: [
        _resamples("bootstrap_resamples", s.bootstrap_resamples, s.confidence)
    ],
    "HypothesesSettings": lambda s: [_resamples("bootstrap_samples", s.bootstrap_samples, s.confidence)],
}


def check_cross_keys(settings: Any) -> None:
    """ConfigError naming the first key a RULES entry for `settings`' class refuses (the caller prefixes the
    section, e.g. reward.variants.bt.)."""
    rules = RULES.get(type(settings).__name__)
    for refusal in rules(settings) if rules is not None else []:
        if refusal is not None:
            key, message = refusal
            raise ConfigError(f"{key} = {message}")
