"""Meaningless settings are refused where settings are checked (issue 50, item 3; prefpipe.settings.cross_keys):
one test per rule of the table, each refused in one line naming the key, and the interval minimum computed
independently (the count of resamples beyond each end of a percentile interval)."""

from __future__ import annotations

import numpy as np
import pytest
from support.settings import pipeline, reward_settings

from prefpipe.common.config import ConfigError
from prefpipe.settings.cross_keys import MIN_TAIL, RULES, min_resamples
from prefpipe.settings.evaluation import EvalSettings
from prefpipe.settings.pipeline import load_stage

HYPOTHESES = {
    "baseline": "verifier",
    "bootstrap_samples": 100,
    "confidence": 0.99,
    "tail_steps": 10,
    "tests": {"H01": {"factor": "verifier -> GPM reward", "runs": ["gpm"]}},
}

CASES = {  # rule -> (overlay, the refused key and value)
    "length_head_warmup": (  # the case: the length terms reached 0.4% of their weight
        {
            "reward": {
                "defaults": {
                    "train": {"steps": 20},
                    "head": {"length_head": {"enabled": True, "warmup_steps": 5000}},
                }
            }
        },
        r"head\.length_head\.warmup_steps = 5000 is longer than train\.steps = 20: the length terms would reach "
        r"only 0\.4% of full weight",
    ),
    "uncertainty_resamples": (  # the case: the schema minimum of 1
        {"eval": {"uncertainty": {"resamples": 1}}},
        r"^eval\.eval\.uncertainty\.resamples = 1: too few resamples for a 95% percentile interval.* at least 100$",
    ),
    "length_resamples": (
        {"eval": {"length_bootstrap_resamples": 50}},
        r"^eval\.eval\.length_bootstrap_resamples = 50: too few .* at least 100 \(or 0 for no intervals\)$",
    ),
    "policy_eval_resamples": (
        {"grpo": {"defaults": {"eval": {"bootstrap_samples": 400, "confidence": 0.99}}}},
        r"^grpo\.runs\.\w+\.eval\.bootstrap_samples = 400: too few resamples for a 99% .* at least 500$",
    ),
    "ablation_resamples": (
        {"ablation": {"bootstrap_resamples": 100, "confidence": 0.99}},
        r"^ablation\.bootstrap_resamples = 100: too few resamples for a 99% .* at least 500$",
    ),
    "compile_decode_engine": (  # a vLLM engine samples: the plain decode it compiles never runs
        {"grpo": {"defaults": {"rollout": {"engine": "vllm", "compile_decode": "reduce-overhead"}}}},
        r"^grpo\.runs\.\w+\.rollout\.compile_decode = 'reduce-overhead' with rollout\.engine = 'vllm': .* set it to none$",
    ),
    "compile_decode_fast_paths": (
        {"fast_paths": False, "grpo": {"defaults": {"rollout": {"compile_decode": "default"}}}},
        r"^grpo\.runs\.\w+\.rollout\.compile_decode = 'default' with fast_paths = false: ",
    ),
    "hypotheses_resamples": (
        {"grpo": {"hypotheses": HYPOTHESES}},
        r"^grpo\.hypotheses\.bootstrap_samples = 100: too few resamples for a 99% .* at least 500$",
    ),
}


@pytest.mark.parametrize("rule", list(CASES))
def test_each_rule_refuses_in_one_line_naming_the_key(rule):
    overlay, match = CASES[rule]
    with pytest.raises(ConfigError, match=match) as info:
        pipeline(overlay)
    assert "\n" not in str(info.value)


def test_every_settings_class_with_rules_has_a_case():
    """RULES is keyed by class name (settings.run calls it, so it cannot import the classes): every name is a
    stage settings class that exists."""
    import prefpipe.settings.pipeline  # noqa: F401  (imports every stage settings class)
    from prefpipe.settings.run import RunSettings

    def subclasses(cls):
        return {c.__name__ for c in cls.__subclasses__()} | {
            n for c in cls.__subclasses__() for n in subclasses(c)
        }

    assert set(RULES) <= subclasses(RunSettings)
    assert set(RULES) == {
        "RewardSettings",
        "GrpoSettings",
        "EvalSettings",
        "AblationStageSettings",
        "HypothesesSettings",
    }


def test_the_boundaries_are_accepted():
    pipeline({"reward": {"defaults": {"train": {"steps": 20, "warmup_steps": 20}}}})
    pipeline({"eval": {"uncertainty": {"resamples": 100}, "length_bootstrap_resamples": 0}})
    pipeline({"ablation": {"bootstrap_resamples": 500, "confidence": 0.99}})
    # train.steps null (epochs): the length of training is known only from the data, so the stage decides
    reward_settings({"train": {"steps": None, "warmup_steps": 10**6}})


def test_a_stage_started_by_hand_is_checked_too():
    values = pipeline().stage_json(pipeline().eval, None)
    import json

    mapping = json.loads(values)
    mapping["eval"]["uncertainty"]["resamples"] = 1
    with pytest.raises(ConfigError, match=r"^--config\.eval\.uncertainty\.resamples = 1: too few"):
        load_stage(EvalSettings, mapping, "--config")


@pytest.mark.parametrize("confidence", [0.8, 0.9, 0.95, 0.99])
def test_min_resamples_leaves_min_tail_resamples_beyond_each_end(confidence):
    """Counted, not by the formula: of B sorted resamples, np.quantile's lower end at (1 - c) / 2 lies at
    position (B - 1) (1 - c) / 2; at the minimum B there are at least MIN_TAIL - 1 whole resamples below it
    (the end itself interpolates between its neighbours), one fewer below the count the rule refuses."""
    need = min_resamples(confidence)
    assert need * (1 - confidence) / 2 >= MIN_TAIL - 1e-9 > (need - 1) * (1 - confidence) / 2
    draws = np.arange(need, dtype=float)  # the sorted resampled figures 0, 1, ..., B - 1
    low = np.quantile(draws, (1 - confidence) / 2)
    assert (draws < low).sum() >= MIN_TAIL - 1
    assert {0.95: 100, 0.99: 500}.get(confidence, need) == need
