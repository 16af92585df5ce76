"""The rollout-engine pieces that need no vLLM: the registry, the trainer's full weights with LoRA merged in and the
truncated importance weights (each against an independent
computation). The vLLM engine itself: tests/test_grpo_vllm.py."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from support.models import chat_tokenizer, tiny_smollm2
from support.settings import grpo_settings

from prefpipe.grpo.data_parallel import DataParallel
from prefpipe.grpo.rollout.engines import build_engine
from prefpipe.grpo.rollout.engines.base import PlainEngine
from prefpipe.grpo.rollout.engines.correction import gap_metrics, importance_weights
from prefpipe.grpo.rollout.engines.weights import full_weights


def _lora_policy():
    from peft import LoraConfig, get_peft_model

    policy = get_peft_model(
        tiny_smollm2(chat_tokenizer(), seed=1),
        LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"),
    )
    with torch.no_grad():  # a trained adapter: B != 0
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    return policy


def test_registry_builds_the_plain_engine_by_default_and_names_the_key_on_a_wrong_one(tmp_path):
    settings = grpo_settings()
    assert settings.rollout.engine == "plain"
    assert isinstance(build_engine(settings, None, None, tmp_path), PlainEngine)
    bad = grpo_settings({"rollout": {"engine": "plain"}})
    bad.rollout.engine = "sglang"
    with pytest.raises(ValueError, match=r"grpo\.verifier\.rollout\.engine must be one of"):
        build_engine(bad, None, None, tmp_path)


def test_full_weights_of_a_lora_policy_equal_peft_merge_and_unload():
    policy = _lora_policy()
    merged = copy.deepcopy(policy).merge_and_unload()
    expected = dict(merged.named_parameters())
    got = dict(full_weights(policy))
    assert set(got) == set(expected)  # checkpoint names, tied lm_head listed once
    for name, tensor in got.items():
        torch.testing.assert_close(tensor, expected[name].detach(), rtol=0, atol=1e-6)
    assert any(not torch.equal(got[n], p) for n, p in tiny_smollm2(chat_tokenizer(), 1).named_parameters())


def test_full_weights_of_a_plain_policy_are_its_parameters():
    model = tiny_smollm2(chat_tokenizer())
    got = dict(full_weights(model))
    assert {n: t.data_ptr() for n, t in got.items()} == {n: p.data_ptr() for n, p in model.named_parameters()}


def test_truncated_importance_weights_and_gap_metrics():
    old = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -0.1, -9.0]])
    engine = torch.tensor([[-1.5, -1.0, -0.5], [-0.5, -0.2, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    w = importance_weights(old, engine, mask, "token_truncate", 3.0)
    # by hand: exp(0.5)=1.6487, exp(-1)=0.3679, 1, exp(-2.5)=0.0821, exp(0.1)=1.1052; padding -> 1
    expected = torch.tensor([[1.6487213, 0.3678794, 1.0], [0.0820850, 1.1051709, 1.0]])
    torch.testing.assert_close(w, expected, rtol=1e-6, atol=1e-6)
    assert importance_weights(old, engine, mask, "none", 3.0) is None
    capped = importance_weights(old, engine - 5.0, mask, "token_truncate", 3.0)
    assert float(capped[mask.bool()].max()) == 3.0
    m = gap_metrics(old, engine, mask, "token_truncate", 3.0, DataParallel())
    assert m["engine_logprob_gap_mean"] == pytest.approx((0.5 + 1.0 + 0.0 + 2.5 + 0.1) / 5)
    assert m["engine_logprob_gap_max"] == pytest.approx(2.5)
    assert m["is_weight_mean"] == pytest.approx(float(expected[mask.bool()].mean()), rel=1e-6)
    assert m["is_truncated_ratio"] == 0.0


def test_sampler_weights_scale_the_surrogate_only():
    from prefpipe.grpo.algorithm.losses import BatchNorms, grpo_loss

    torch.manual_seed(0)
    logp = torch.randn(2, 3, requires_grad=True)
    ref, adv, mask = torch.randn(2, 3), torch.tensor([1.0, -0.5]), torch.ones(2, 3)
    w = torch.tensor([[0.5, 1.0, 3.0], [2.0, 0.1, 1.0]])
    norms = BatchNorms(2, 6, 1, 3)
    kw = dict(
        loss_type="dapo",
        eps_low=0.2,
        eps_high=0.28,
        ref_logp=ref,
        kl_estimator="k3",
        log_ratio_clamp=None,
        objective="ppo_clip",
    )
    out = grpo_loss(logp, logp.detach(), adv, mask, norms, beta=0.1, sampler_weights=w, **kw)
    # rho = 1 (old = logp detached): the surrogate per token is -A; k3 by hand
    kl = torch.exp(ref - logp) - (ref - logp) - 1
    expected = ((-adv[:, None] * w) + 0.1 * kl).sum() / 6
    torch.testing.assert_close(out.loss, expected)
    assert float(out.policy_loss) == pytest.approx(float((-adv[:, None] * w).sum() / 6))


def test_vllm_engines_of_data_parallel_processes_join_the_launchers_group(monkeypatch):
    """One process: vLLM's own executor. Several: external_launcher over the launcher's env:// rendezvous,
    tensor parallel 1; without the launcher's variables, a one-line error naming them (before vLLM starts)."""
    from prefpipe.grpo.rollout.engines.vllm_engine import _launcher_args

    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    dp = DataParallel()
    assert _launcher_args(dp) == {}
    dp.world_size = 2  # the launch's process count; the group itself is not needed to choose the executor
    with pytest.raises(
        RuntimeError, match=r"2 processes needs the launcher's RANK, LOCAL_RANK, .*MASTER_PORT"
    ):
        _launcher_args(dp)
    for key, value in {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert _launcher_args(dp) == {
        "distributed_executor_backend": "external_launcher",
        "tensor_parallel_size": 1,
    }


def test_vllm_engine_length_past_the_models_positions_is_allowed_with_a_warning(monkeypatch, caplog):
    """The tiny catalog config asks for 128 prompt + 8 new tokens of a 128-position model: the trainer and the
    plain engine run it (rotary positions extend), so the vLLM engine gets the same length and allows it (found by
    running the train_grpo stage end to end with engine vllm), with a warning naming the keys."""
    from prefpipe.grpo.rollout.engines.vllm_engine import _allow_model_len

    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    policy = tiny_smollm2(chat_tokenizer())  # max_position_embeddings 256
    fits = grpo_settings({"max_prompt_length": 200, "max_new_tokens": 56})
    assert _allow_model_len(fits, policy) == 256
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" not in os.environ
    longer = grpo_settings({"max_prompt_length": 250, "max_new_tokens": 16})
    with caplog.at_level("WARNING"):
        assert _allow_model_len(longer, policy) == 266
    assert os.environ["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] == "1"
    assert "exceeds the policy's max_position_embeddings (256)" in caplog.text
    # a multi-turn run samples a whole episode after the prompt: max_episode_tokens, not max_new_tokens
    multi = grpo_settings(
        {"max_prompt_length": 100, "max_new_tokens": 8, "episodes": {"enabled": True, "max_episode_tokens": 150},
         "rewards": [{"type": "exact_match", "weight": 1.0}]}
    )  # fmt: skip
    assert _allow_model_len(multi, policy) == 250


def test_vllm_episode_request_seeds_are_distinct_per_row_and_round():
    """Each (row of the step, request round) of a vLLM episode step gets its own seed, the same on any process
    count (it depends on the row's index in the whole step), and a valid torch seed."""
    from prefpipe.grpo.rollout.engines.vllm_episodes import request_seed

    seeds = [request_seed(s, row, r) for s in (0, 7, 100_003) for row in range(64) for r in range(16)]
    assert len(set(seeds)) == len(seeds) and all(0 <= x < 2**63 for x in seeds)
