"""Optional packages a setting needs are checked when the config is checked (issue 50, item 4;
prefpipe.settings.dependencies): `rollout.engine: vllm` without vLLM stops the parse naming the key and the
install command, not a ModuleNotFoundError in the training stage."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.settings import pipeline

from prefpipe.common.config import ConfigError
from prefpipe.settings.dependencies import NEEDS, installed

DEEPSPEED = str(Path(__file__).resolve().parents[2] / "config" / "accelerate" / "deepspeed_zero2.yaml")
VLLM = {"grpo": {"only": ["verifier"], "defaults": {"rollout": {"engine": "vllm"}}}}


@pytest.mark.skipif(installed("vllm"), reason="vllm is installed here: nothing to refuse")
def test_vllm_engine_without_vllm_is_refused_at_parse_time_naming_key_and_install():
    with pytest.raises(ConfigError) as info:
        pipeline(VLLM)
    message = str(info.value)
    assert message.startswith("grpo.runs.verifier.rollout.engine = vllm needs the 'vllm' package")
    assert "scripts/vllm_env.sh" in message and "pip install vllm" in message and "\n" not in message


@pytest.mark.skipif(installed("vllm"), reason="vllm is installed here: nothing to refuse")
def test_the_check_is_left_to_the_rules_own_environment_when_they_have_one():
    from prefpipe.config_checks import checked_pipeline
    from prefpipe.settings.pipeline import load_config

    settings = checked_pipeline(load_config(VLLM), threads=1, packages=False)
    assert settings.grpo["verifier"].rollout.engine == "vllm"


def test_each_need_names_the_keys_that_ask_for_it():
    plain = pipeline()
    assert {need.module: list(need.keys(plain)) for need in NEEDS} == {
        "vllm": [],
        "gguf": [],
        "deepspeed": [],
        "liger_kernel": [],
    }
    multi_gpu = pipeline(
        {
            "launch": {"accelerate_config": DEEPSPEED},
            "resources": {"train_reward_model": {"gpu": 2}},
        }
    )
    (deepspeed,) = [need for need in NEEDS if need.module == "deepspeed"]
    assert list(deepspeed.keys(multi_gpu)) == [
        f"launch.accelerate_config = {DEEPSPEED} (DeepSpeed, resources.train_reward_model.gpu > 1)"
    ]
    one_gpu = pipeline({"launch": {"accelerate_config": DEEPSPEED}})
    assert list(deepspeed.keys(one_gpu)) == []


def test_installed_reads_the_environment():
    assert installed("json") and not installed("prefpipe_no_such_package") and not installed("no.such.sub")


@pytest.mark.skipif(installed("liger_kernel"), reason="liger-kernel is installed here: nothing to refuse")
def test_liger_kernels_without_the_package_are_refused_at_parse_time():
    with pytest.raises(ConfigError) as info:
        pipeline(
            {
                "reward": {"only": ["bt"], "defaults": {"backbone": {"kernels": "liger"}}},
                "grpo": {"only": ["verifier"]},
            }
        )
    message = str(info.value)
    assert message.startswith("reward.variants.bt.backbone.kernels = liger needs the 'liger_kernel' package")
    assert "pip install liger-kernel" in message
