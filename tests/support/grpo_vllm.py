"""GRPO runs with the vLLM rollout engine on a tiny SmolLM2-architecture model (tests/test_grpo_vllm.py).

`run` trains a few steps and returns the per-step metric rows; `skip_sync_at` makes the engine's weight push a
no-op at that step (a deliberately missed sync) so the test sees the step's error."""

from __future__ import annotations

from pathlib import Path

import torch

from prefpipe.grpo.data_parallel import DataParallel
from prefpipe.grpo.rewards import WeightedReward
from prefpipe.grpo.training.trainer import GRPOTrainer
from support.models import chat_tokenizer, tiny_smollm2
from support.settings import grpo_settings

ROWS = [
    {"id": str(i), "prompt": p, "answer": "5", "kind": "add"}
    for i, p in enumerate(["What is 2 plus 3?", "Say yes.", "Say no.", "Repeat cat:"])
]


def digit_share(inputs) -> torch.Tensor:
    return torch.tensor([sum(c.isdigit() for c in t) / max(len(t), 1) for t in inputs.completions])


def trainer(
    tmp: Path, lora: bool, steps: int = 3, data_parallel: DataParallel | None = None, **over
) -> GRPOTrainer:
    tok = chat_tokenizer()
    policy = tiny_smollm2(tok, seed=0)
    lora_state = "none"
    if lora:
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")
        policy, lora_state = get_peft_model(policy, config), "fresh"
    settings = grpo_settings(
        {
            "steps": steps,
            "prompts_per_step": 2,
            "num_generations": 4,
            "max_new_tokens": 8,
            "learning_rate": 1e-1 if lora else 3e-2,
            "beta": 0.04,
            "micro_batch_size": 8,
            "mask_truncated_completions": False,
            "sample_every": 0,
            "checkpoint_every": 0,
            "inspect_steps": [],
            "rollout": {"engine": "vllm", "cpu_kv_cache_gib": 1},
            **over,
        }
    )
    return GRPOTrainer(
        settings,
        policy,
        tok,
        lora_state,
        ROWS,
        [WeightedReward("digits", 1.0, digit_share)],
        tmp,
        data_parallel=data_parallel,
    )


def record_samples(trainer_: GRPOTrainer) -> dict[int, dict]:
    """Watch the trainer's rollouts (the real ones, unchanged): per step, the rows' ids, each completion's token
    ids (up to and including its first EOS) and its decoded text; filled in as the trainer samples."""
    seen: dict[int, dict] = {}
    rollout = trainer_._rollout

    def recording(step: int, clock=None):  # the trainer passes its phase clock
        batch, metrics = rollout(step, clock)
        r = batch.rollout
        seen[step] = {
            "ids": [row["id"] for row in batch.rows],
            "tokens": [
                ids[mask.bool()].tolist()
                for ids, mask in zip(r.completion_ids, r.completion_mask, strict=True)
            ],
            "texts": list(r.texts),
        }
        return batch, metrics

    trainer_._rollout = recording
    return seen


def skip_push_at(trainer_: GRPOTrainer, step: int) -> None:
    """Make the engine's weight push after `step` a no-op (a missed sync); other pushes go through."""
    engine, push = trainer_.engine, trainer_.engine._push_weights
    calls = {"n": 0}

    def maybe_push(weights):
        calls["n"] += 1  # installed after the engine loaded the starting weights: call k + 1 follows step k
        if calls["n"] != step + 1:
            push(weights)

    engine._push_weights = maybe_push


def base_weights_only(policy: torch.nn.Module):
    """A LoRA policy's weights WITHOUT the adapter (the classic "LoRA weights never reach vLLM" bug): checkpoint
    names, base tensors."""
    for name, param in policy.named_parameters():
        if ".lora_" not in name:
            yield name.removeprefix("base_model.model.").replace(".base_layer.", "."), param.detach()
