"""The one-step inspector: the table's loss (the sum of the per-token contributions) is the loss the trainer
logged for that step, for a saved step after updates, with a KL term and micro-batches; and the contributions
are the aggregation's own weights (checked against the dapo formula by hand)."""

from __future__ import annotations

import json

import pytest
import torch
from support.models import save_tiny_policy
from support.settings import grpo_settings

from prefpipe.common.run_record import RunRecord
from prefpipe.grpo.logprobs import completion_logprobs
from prefpipe.grpo.metric_names import LOSS_FIRST_ITERATION
from prefpipe.grpo.policy_io import load_policy
from prefpipe.grpo.rewards import WeightedReward
from prefpipe.grpo.rollout import engines
from prefpipe.grpo.rollout.engines.base import PlainEngine
from prefpipe.grpo.training.trainer import GRPOTrainer
from prefpipe.inspect_grpo import main
from prefpipe.settings.build import to_mapping

ROWS = [
    {"id": str(i), "prompt": p, "answer": "5", "kind": "add"}
    for i, p in enumerate(["What is 2 plus 3?", "Say yes.", "Say no.", "Repeat cat:"])
]


def digit_share(inputs) -> torch.Tensor:
    return torch.tensor([sum(c.isdigit() for c in t) / max(len(t), 1) for t in inputs.completions])


def _run(tmp_path, **over):
    base = save_tiny_policy(tmp_path / "base")
    cfg = grpo_settings(
        {
            "steps": 3,
            "prompts_per_step": 2,
            "num_generations": 4,
            "max_new_tokens": 6,
            "learning_rate": 3e-2,
            "beta": 0.04,
            "micro_batch_size": 5,  # two micro-batches of unequal size
            "sample_every": 0,
            "checkpoint_every": 0,
            "mask_truncated_completions": False,
            "inspect_steps": [0, 2],
            **over,
        }
    )
    policy, tok, lora_state = load_policy(base, cfg.lora, cfg.dtype, "cpu")
    out = tmp_path / "run"
    record = RunRecord(out, "train_grpo", to_mapping(cfg))
    trainer = GRPOTrainer(
        cfg, policy, tok, lora_state, ROWS, [WeightedReward("digits", 1.0, digit_share)], out, record
    )
    trainer.policy_source = str(base)
    trainer.train()
    return out, trainer


@pytest.mark.parametrize("over", [{}, {"loss_type": "bnpo", "num_iterations": 2}])
def test_table_loss_equals_the_trainer_loss_of_the_step(tmp_path, over):
    out, trainer = _run(tmp_path, **over)
    for step in (0, 2):
        page = tmp_path / f"page-{step}"
        assert main([str(out), "--step", str(step), "--out", str(page)]) == 0
        result = json.loads((page / f"step-{step}.json").read_text())
        logged = trainer.metric_rows[step][LOSS_FIRST_ITERATION]
        if not over:
            assert logged == trainer.metric_rows[step]["loss"]
        assert result["table_loss"] == pytest.approx(logged, rel=1e-5, abs=1e-7)
        tokens = result["tokens"]
        assert sum(t["contribution"] for t in tokens) == pytest.approx(logged, rel=1e-4, abs=1e-6)
        assert {t["role"] for t in tokens} <= {"completion", "post_eos"}
        assert all(t["ratio"] == pytest.approx(1.0) for t in tokens)  # first pass: pi_old = pi
        if not over:  # dapo: contribution = l_t * mask / (loss tokens of the batch), by hand
            n = result["num_tokens"]
            for t in tokens:
                assert t["contribution"] == pytest.approx(t["loss"] * t["mask"] / n, rel=1e-5, abs=1e-9)
        md = (page / f"step-{step}.md").read_text()
        assert "loss recomputed from the table" in md and "KL k3" in md
        assert (page / f"step-{step}.html").read_text().startswith("<!DOCTYPE html>")
    assert not (out / "inspect" / "step-00000000" / "weights.safetensors").exists()  # = the base folder's
    assert (out / "inspect" / "step-00000002" / "weights.safetensors").exists()


def test_with_prompt_mask_puts_prompt_tokens_in_the_table_and_the_metric(tmp_path):
    out, trainer = _run(tmp_path, mask_mode="with_prompt", steps=1, inspect_steps=[0])
    assert trainer.metric_rows[0]["prompt_loss_share"] > 0.3
    assert main([str(out), "--step", "0", "--out", str(tmp_path / "page")]) == 0
    result = json.loads((tmp_path / "page" / "step-0.json").read_text())
    assert result["table_loss"] == pytest.approx(trainer.metric_rows[0]["loss"], rel=1e-5, abs=1e-7)
    assert any(t["role"] == "prompt" and t["mask"] for t in result["tokens"])


def test_a_step_that_was_not_saved_is_a_user_error(tmp_path):
    out, _ = _run(tmp_path, steps=1, inspect_steps=[0])
    assert main([str(out), "--step", "1"]) == 2


class MismatchedEngine(PlainEngine):
    """The plain engine's samples, reported with log-probs that differ from the trainer's by +-SHIFT per token,
    as a separate engine's kernels would (vLLM without vLLM): the trainer's importance correction weights each
    token's surrogate by min(exp(-/+SHIFT), cap)."""

    SHIFT = 0.4

    def generate(self, policy, tokenizer, prompts, uniforms, seed, first_prompt=0):
        rollout = super().generate(policy, tokenizer, prompts, uniforms, seed, first_prompt)
        n, c = rollout.completion_ids.shape
        with torch.no_grad():
            own = completion_logprobs(
                policy, rollout.input_ids, rollout.attention_mask, c, self.settings.temperature
            )[0]
        sign = (torch.arange(n)[:, None] + torch.arange(c)[None, :]) % 2 * 2 - 1
        rollout.sampler_logprobs = own + self.SHIFT * sign
        return rollout


def test_table_loss_equals_the_trainer_loss_with_the_engines_importance_correction(tmp_path, monkeypatch):
    """With a sampling engine's log-probs and rollout.importance_correction on (truncated at a cap the shift
    exceeds), the inspector's loss is the trainer's: it keeps the engine's log-probs and weights the surrogate
    with the trainer's own per-token loss. (Step 0's loss is 0: equal rewards, pi = pi_ref; step 2's is not, and
    without the weights the table's would be about 8% off it.)"""
    monkeypatch.setitem(engines.ENGINES, "plain", lambda settings, *_: MismatchedEngine(settings))
    cap = 1.3
    rollout = {"importance_correction": "token_truncate", "importance_cap": cap}
    out, trainer = _run(tmp_path, rollout=rollout)
    for step in (0, 2):
        page = tmp_path / f"corrected-{step}"
        assert main([str(out), "--step", str(step), "--out", str(page)]) == 0
        result = json.loads((page / f"step-{step}.json").read_text())
        logged = trainer.metric_rows[step][LOSS_FIRST_ITERATION]
        assert result["table_loss"] == pytest.approx(logged, rel=1e-5, abs=1e-7)
        weights = {round(t["sampler_weight"], 5) for t in result["tokens"] if t["mask"]}
        # first pass: w = min(exp(log pi - log pi_engine), cap) = exp(-0.4) or the cap (exp(0.4) > 1.3)
        assert weights == {round(float(torch.exp(torch.tensor(-MismatchedEngine.SHIFT))), 5), cap}
        assert trainer.metric_rows[step]["is_truncated_ratio"] > 0.2
    # step 2's loss is not 0, so the equality above carries the check: without the sampler weights the table is
    # about 8% off the trainer's, far beyond rel 1e-5 / abs 1e-7 at any loss above 1e-5. (Its size depends on the
    # sampled tokens, which the thread count can change: 0.033 alone, 0.00025 inside the whole suite.)
    assert abs(trainer.metric_rows[2][LOSS_FIRST_ITERATION]) > 1e-5
