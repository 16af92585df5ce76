"""transformers' Cache API as prefpipe uses it (prefpipe.common.torch_runtime.transformers_api): the KV cache passed under
the name the model's forward declares, read back from either output field, and a tiny GRPO run whose log
carries no deprecation warning (every Python warning shown: PYTHONWARNINGS=always; transformers' own
logger included), full-weight on the fast paths and LoRA on the plain paths."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys

import pytest
import torch
import transformers
from support.models import chat_tokenizer, save_grpo_inputs, tiny_llama
from support.settings import TINY_GRPO_RUN, grpo_settings, stage_json
from support.stages import stage_argv, stage_env
from transformers import DynamicCache

from prefpipe.common.torch_runtime.transformers_api import cache_kwargs, get_peft_model, output_cache


def _lora(model):
    from peft import LoraConfig

    return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, task_type="CAUSAL_LM"))


@pytest.mark.parametrize("wrap", [False, True], ids=["plain", "peft"])
def test_a_step_from_the_returned_cache_gives_the_full_forward_logits(wrap):
    tok = chat_tokenizer()
    model = tiny_llama(tok).eval()
    if wrap:
        model = _lora(model)
    ids = torch.tensor([tok.encode("What is 2 plus 3? 5")])
    with torch.no_grad():
        first = model(input_ids=ids[:, :-1], use_cache=True)
        cache = output_cache(first)
        assert isinstance(cache, DynamicCache) and cache.get_seq_length() == ids.shape[1] - 1
        kwargs = cache_kwargs(model, cache)
        # the name the installed transformers declares (`cache` from 5.24, `past_key_values` before)
        declared = inspect.signature(type(tiny_llama(tok)).forward).parameters
        assert set(kwargs) - {"use_cache"} <= set(declared)
        step = model(input_ids=ids[:, -1:], **kwargs).logits[:, -1]
        full = model(input_ids=ids).logits[:, -1]
    torch.testing.assert_close(step, full, rtol=1e-5, atol=1e-5)


def test_output_cache_reads_either_field_name():
    assert output_cache({"past_key_values": "c"}) == "c" and output_cache({"cache": "c"}) == "c"
    assert output_cache({"logits": 1}) is None


DEPRECATION = re.compile(r"deprecat", re.IGNORECASE)


@pytest.fixture(scope="module")
def grpo_inputs(tmp_path_factory):
    return save_grpo_inputs(tmp_path_factory.mktemp("grpo_warnings"))


@pytest.mark.parametrize(
    ("lora", "fast_paths"), [(False, True), (True, False)], ids=["full-fast", "lora-plain"]
)
def test_a_tiny_grpo_run_logs_no_deprecation_warning(grpo_inputs, tmp_path, lora, fast_paths):
    """Rollouts (prefill + cached decode steps), log-probs with the shared-prompt cache, a reference model
    (beta > 0) and a reward model, in a fresh process so transformers' warn-once notices are not already
    spent."""
    run = {
        **TINY_GRPO_RUN,
        "beta": 0.04,
        "reward_model": "gpm",
        "rewards": [{"type": "reward_model", "weight": 1.0}, {"type": "verifier", "weight": 1.0}],
        "lora": {"enabled": lora, "r": 4, "alpha": 8},
    }
    config = stage_json(grpo_settings(run, run="gpm", seed=0, fast_paths=fast_paths))
    root = grpo_inputs
    argv = stage_argv(
        config, data=root / "data", policy=root / "base", reward_model=root / "rm", out=tmp_path / "out"
    )
    result = subprocess.run(
        [sys.executable, "-m", "prefpipe.train_grpo", *argv],
        env=stage_env(PYTHONWARNINGS="always", TRANSFORMERS_VERBOSITY="warning"),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "out" / "summary.json").exists()
    notices = [line for line in result.stderr.splitlines() if DEPRECATION.search(line)]
    assert not notices, f"transformers {transformers.__version__}: {notices}"


def test_lora_reward_model_builds_saves_and_loads_without_deprecation_warnings(tmp_path):
    """peft reads a deprecated transformers attribute when it wraps or loads an adapter (reward and GRPO
    LoRA both go through prefpipe.common.torch_runtime.transformers_api)."""
    import warnings

    from support.models import lora_reward, save_tiny_base

    from prefpipe.reward.model import load_reward_model, save_reward_model

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rm, _ = lora_reward(save_tiny_base(tmp_path / "base"))
        save_reward_model(rm, tmp_path / "rm")
        load_reward_model(tmp_path / "rm")
    notices = [str(w.message) for w in caught if DEPRECATION.search(str(w.message))]
    assert not notices
