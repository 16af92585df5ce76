"""The reference policy: none at beta 0, disable_adapter for a fresh LoRA, frozen copies otherwise."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model
from support.models import chat_tokenizer, tiny_llama
from support.settings import grpo_settings

from prefpipe.grpo.logprobs import completion_logprobs
from prefpipe.grpo.policy_io import load_policy
from prefpipe.grpo.rewards import WeightedReward
from prefpipe.grpo.training.trainer import GRPOTrainer

ROWS = [
    {"id": str(i), "prompt": p, "answer": "5", "kind": "add"}
    for i, p in enumerate(["What is 2 plus 3?", "Say yes.", "Say no.", "Repeat cat:"])
]
TEMPERATURE = grpo_settings().temperature  # the default run's: the trainer samples and scores at it


def digit_share(inputs) -> torch.Tensor:
    """A dense rule reward for tests: share of digit characters in the completion."""
    return torch.tensor([sum(c.isdigit() for c in t) / max(len(t), 1) for t in inputs.completions])


def make_trainer(model, tok, lora_state, tmp_path, **over) -> GRPOTrainer:
    cfg = grpo_settings(
        {
            "steps": 2,
            "prompts_per_step": 2,
            "num_generations": 4,
            "max_new_tokens": 6,
            "learning_rate": 5e-2,
            "micro_batch_size": 4,
            "sample_every": 0,
            "checkpoint_every": 0,
            # a random tiny model rarely ends a completion within max_new_tokens: train on truncated ones
            "mask_truncated_completions": False,
            **over,
        }
    )
    return GRPOTrainer(
        cfg, model, tok, lora_state, ROWS, [WeightedReward("digits", 1.0, digit_share)], tmp_path
    )


@pytest.fixture(scope="module")
def tok():
    return chat_tokenizer()


def _lora(model):
    return get_peft_model(
        model,
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM"),
    )


def _count_forwards(module: torch.nn.Module, fn) -> int:
    """Forward passes over a batch: calls that start from no KV cache (a shared-prompt pass is two calls, the
    prompts and then the completions on their cache)."""
    calls = []

    def hook(_module, _args, kwargs, _out):
        # a full forward, not a decoding step from a KV cache (transformers >= 5.24 names it `cache`)
        if kwargs.get("cache") is None and kwargs.get("past_key_values") is None:
            calls.append(1)

    handle = module.register_forward_hook(hook, with_kwargs=True)
    try:
        fn()
    finally:
        handle.remove()
    return len(calls)


@pytest.mark.parametrize("lora", [False, True])
def test_beta_zero_runs_no_reference_forward(tok, tmp_path, lora):
    base = tiny_llama(tok)
    model = _lora(base) if lora else base
    trainer = make_trainer(model, tok, "fresh" if lora else "none", tmp_path, beta=0.0)
    assert trainer.reference is None
    batch, _ = trainer._rollout(0)
    inner = base  # the LlamaForCausalLM every policy or reference forward goes through
    n_forward = _count_forwards(inner, lambda: trainer._update(batch))
    assert n_forward == 2  # 8 sequences / micro-batch 4, one iteration: policy forwards only
    if lora:  # same step with beta > 0 adds exactly one reference forward per micro-batch (adapter off)
        trainer_kl = make_trainer(model, tok, "fresh", tmp_path, beta=0.1)
        assert _count_forwards(inner, lambda: trainer_kl._update(batch)) == 4


def test_fresh_lora_reference_equals_base_model_and_stays_fixed(tok, tmp_path):
    base = tiny_llama(tok, seed=5)
    ids = torch.tensor([tok("Say yes. yes yes")["input_ids"]])
    att = torch.ones_like(ids)
    with torch.no_grad():
        base_logp, _ = completion_logprobs(base, ids, att, 3, TEMPERATURE)
    model = _lora(base)
    trainer = make_trainer(model, tok, "fresh", tmp_path, beta=0.1)
    # a reward that differs within every group (random tiny models rarely write digits), so the policy moves
    trainer.rewards = [
        WeightedReward(
            "length", 1.0, lambda inputs: torch.tensor([len(t) / 10.0 for t in inputs.completions])
        )
    ]
    assert trainer.reference.via_disable_adapter
    assert torch.equal(trainer.reference.logprobs(ids, att, 3, TEMPERATURE), base_logp)
    metrics = trainer._update(trainer._rollout(0)[0])
    assert metrics["kl_k3_mean"] == pytest.approx(0.0, abs=1e-6)  # step 0: policy == reference
    assert metrics["kl_k1_mean"] == pytest.approx(0.0, abs=1e-6)
    trainer._update(trainer._rollout(1)[0])
    with torch.no_grad():
        moved, _ = completion_logprobs(model, ids, att, 3, TEMPERATURE)
    assert not torch.allclose(moved, base_logp)  # the policy learned something ...
    still = trainer.reference.logprobs(ids, att, 3, TEMPERATURE)
    assert torch.equal(still, base_logp)  # ... the reference did not
    assert model.training  # disable_adapter context restored training mode


def test_trained_adapter_reference_is_a_frozen_copy_of_the_adapter(tok, tmp_path):
    base_dir, adapter_dir = tmp_path / "base", tmp_path / "sft_adapter"
    base = tiny_llama(tok, seed=6)
    base.save_pretrained(base_dir)
    tok.save_pretrained(base_dir)
    sft = _lora(tiny_llama(tok, seed=6))
    with torch.no_grad():  # stand-in for SFT: give the adapter non-zero weights
        for name, p in sft.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
    sft.peft_config["default"].base_model_name_or_path = str(base_dir)
    sft.save_pretrained(adapter_dir)

    run = grpo_settings()
    policy, ptok, state = load_policy(adapter_dir, run.lora, run.dtype, run.device)
    assert state == "trained"
    ids = torch.tensor([tok("Say no. no no")["input_ids"]])
    att = torch.ones_like(ids)
    with torch.no_grad():
        start_logp, _ = completion_logprobs(policy, ids, att, 3, TEMPERATURE)
        base_logp, _ = completion_logprobs(base, ids, att, 3, TEMPERATURE)
    assert not torch.allclose(start_logp, base_logp)
    trainer = make_trainer(policy, ptok, state, tmp_path / "run", beta=0.1)
    assert not trainer.reference.via_disable_adapter
    assert torch.allclose(trainer.reference.logprobs(ids, att, 3, TEMPERATURE), start_logp, atol=1e-6)
    trainer._update(trainer._rollout(0)[0])
    assert torch.allclose(trainer.reference.logprobs(ids, att, 3, TEMPERATURE), start_logp, atol=1e-6)
    assert not any(p.requires_grad for p in trainer.reference.module.parameters())


def test_full_finetune_reference_is_a_frozen_copy(tok, tmp_path):
    model = tiny_llama(tok, seed=7)
    trainer = make_trainer(model, tok, "none", tmp_path, beta=0.1)
    ref = trainer.reference.module
    assert ref is not model and not any(p.requires_grad for p in ref.parameters())
    before = {k: v.clone() for k, v in ref.state_dict().items()}
    trainer._update(trainer._rollout(0)[0])
    assert all(torch.equal(before[k], v) for k, v in ref.state_dict().items())


def test_lora_reference_disable_adapter_and_frozen_copy_give_the_same_logprobs(tok):
    """H06: with a fresh adapter, pi_ref by disable_adapter() (the shared module) and by a separate frozen copy
    are the same distribution, also after the adapter has been trained (here: B matrices set at random)."""
    from prefpipe.grpo.algorithm.reference import build_reference
    from prefpipe.grpo.rollout.completions import GenerationSettings, generate

    policy = _lora(tiny_llama(tok))
    via_disable = build_reference(policy, "fresh", True, "disable_adapter")
    copy_ref = build_reference(policy, "fresh", True, "frozen_copy")
    auto = build_reference(policy, "fresh", True, "auto")
    assert via_disable.via_disable_adapter and auto.via_disable_adapter and not copy_ref.via_disable_adapter
    torch.manual_seed(0)
    ro = generate(policy, tok, [r["prompt"] for r in ROWS], 2, GenerationSettings(6, fast=True), None)
    n = ro.completion_ids.shape[1]
    before = via_disable.logprobs(ro.input_ids, ro.attention_mask, n, TEMPERATURE)
    with torch.no_grad():  # "training": the adapter moves away from zero
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    a = via_disable.logprobs(ro.input_ids, ro.attention_mask, n, TEMPERATURE)
    b = copy_ref.logprobs(ro.input_ids, ro.attention_mask, n, TEMPERATURE)
    moved, _ = completion_logprobs(policy, ro.input_ids, ro.attention_mask, n, TEMPERATURE)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(a, before, rtol=1e-5, atol=1e-5)  # the reference did not move
    assert (moved - a).abs().max() > 1e-2  # ... while the policy did


def test_disable_adapter_reference_without_a_fresh_adapter_is_refused(tok):
    from prefpipe.common.config import ConfigError
    from prefpipe.grpo.algorithm.reference import build_reference

    with pytest.raises(ConfigError, match="reference_mode disable_adapter"):
        build_reference(tiny_llama(tok), "none", True, "disable_adapter")
