"""The GRPO recipe end to end on a real tiny Llama: learning, exact resume after SIGTERM, metrics."""

from __future__ import annotations

import os
import signal

import pytest
import torch
from support.models import chat_tokenizer, tiny_llama
from support.settings import grpo_settings, pipeline

from prefpipe.common.config import ConfigError
from prefpipe.common.io import read_jsonl
from prefpipe.grpo.metric_names import TIMING_KEYS
from prefpipe.grpo.rewards import WeightedReward
from prefpipe.grpo.training.step_batch import select_prompts
from prefpipe.grpo.training.trainer import GRPOTrainer, Preempted

ROWS = [
    {"id": str(i), "prompt": p, "answer": "5", "kind": "add"}
    for i, p in enumerate(
        ["What is 2 plus 3?", "Say yes.", "Say no.", "Repeat cat:", "Answer with one word."]
    )
]


def digit_share(inputs) -> torch.Tensor:
    return torch.tensor([sum(c.isdigit() for c in t) / max(len(t), 1) for t in inputs.completions])


def _trainer(tmp_path, seed=0, **over) -> GRPOTrainer:
    tok = chat_tokenizer()
    cfg = grpo_settings(
        {
            "steps": 6,
            "prompts_per_step": 3,
            "num_generations": 4,
            "max_new_tokens": 6,
            "learning_rate": 3e-2,
            "beta": 0.04,
            "num_iterations": 2,
            "micro_batch_size": 5,
            "sample_every": 2,
            "checkpoint_every": 0,
            # a random tiny model rarely ends a completion within max_new_tokens: train on truncated ones
            "mask_truncated_completions": False,
            **over,
        },
        seed=seed,
    )
    return GRPOTrainer(
        cfg,
        tiny_llama(tok, seed=seed),
        tok,
        "none",
        ROWS,
        [WeightedReward("digits", 1.0, digit_share)],
        tmp_path,
        run_fingerprint="fp",
    )


def _strip_timing(rows):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]


def test_select_prompts_covers_each_epoch_once():
    picked = [i for step in range(4) for i in select_prompts(10, step, 5, seed=3)]
    assert sorted(picked[:10]) == list(range(10)) and sorted(picked[10:]) == list(range(10))
    assert picked[:10] != picked[10:]  # a fresh permutation per epoch


def test_short_run_raises_a_dense_reward_and_logs_every_diagnostic(tmp_path):
    trainer = _trainer(tmp_path, steps=10, prompts_per_step=4)
    summary = trainer.train()
    rows = trainer.metric_rows
    assert summary["last_steps"]["reward_mean"] > summary["first_steps"]["reward_mean"] + 0.05
    assert summary["all_finite"]
    expected = {
        "reward_mean",
        "reward_std",
        "reward/digits_mean",
        "reward/digits_std",
        "frac_reward_zero_std",
        "adv_abs_mean",
        "adv_abs_max",
        "kl_k1_mean",
        "kl_k1_max",
        "kl_k2_mean",
        "kl_k2_max",
        "kl_k3_mean",
        "kl_k3_max",
        "max_abs_log_ratio",
        "clip_ratio_low",
        "clip_ratio_high",
        "clip_ratio_region",
        "entropy",
        "grad_norm",
        "completion_length_mean",
        "completion_length_min",
        "completion_length_max",
        "truncated_ratio",
        "prompt_truncation_rate",
        "step_time",
        "tokens_per_second",
        "num_tokens",
        "loss",
    }
    assert expected <= set(rows[0])
    assert rows[0]["kl_k3_mean"] == pytest.approx(0.0, abs=1e-7)  # first step: policy == reference
    assert rows[-1]["kl_k3_mean"] > 0
    assert any(r["clip_ratio_region"] > 0 for r in rows)  # second iteration moves ratios off 1
    samples = read_jsonl(tmp_path / "samples.jsonl")
    assert {s["step"] for s in samples} == {0, 2, 4, 6, 8}
    audit = samples[0]["audit"]
    assert audit["n_trained"] == audit["roles"].count("trained") > 0
    assert "prompt" in audit["roles"] and "pad" not in audit["roles"]


def test_sigterm_checkpoint_and_resume_match_an_uninterrupted_run(tmp_path):
    full = _trainer(tmp_path / "full")
    full.train()

    interrupted = _trainer(tmp_path / "resumed")

    def stop_at_step_2(step, row):
        if step == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(Preempted):
        interrupted.train(on_step_end=stop_at_step_2)
    assert (tmp_path / "resumed" / "checkpoint" / "step-00000003" / "state.pt").exists()
    assert signal.getsignal(signal.SIGTERM) != interrupted.stop._handler  # handler restored

    resumed = _trainer(tmp_path / "resumed")  # a fresh process would rebuild everything the same way
    summary = resumed.train()
    assert summary["resumed_from_step"] == 3
    assert _strip_timing(resumed.metric_rows) == _strip_timing(full.metric_rows)
    for (name, a), (_, b) in zip(
        full.policy.named_parameters(), resumed.policy.named_parameters(), strict=True
    ):
        assert torch.equal(a, b), name


def test_checkpoint_from_another_config_is_refused(tmp_path):
    first = _trainer(tmp_path, steps=2, checkpoint_every=1)
    first.train()
    other = _trainer(tmp_path, steps=4)
    other.fingerprint = "other"
    with pytest.raises(ConfigError, match="different config"):
        other.train()


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo"])
def test_other_aggregations_and_scalings_run_finite(tmp_path, loss_type):
    trainer = _trainer(
        tmp_path, steps=2, loss_type=loss_type, scale_rewards="none", beta=0.0, num_iterations=1
    )
    summary = trainer.train()
    assert summary["all_finite"] and summary["reference"] == "none"
    assert "kl_k3_mean" not in trainer.metric_rows[0]


def test_run_settings_are_the_defaults_merged_with_the_run_and_errors_name_the_key():
    settings = pipeline({"grpo": {"defaults": {"steps": 5}, "runs": {"gpm": {"steps": 7}}}, "seed": 3}).grpo
    assert settings["gpm"].steps == 7 and settings["gpm"].seed == 3 and settings["gpm"].reward_model == "gpm"
    assert settings["verifier"].steps == 5 and settings["verifier"].run == "verifier"
    with pytest.raises(ConfigError, match=r"grpo\.only names \['bt'\]"):
        pipeline({"grpo": {"only": ["bt"]}})
    with pytest.raises(ConfigError, match=r"grpo\.runs\.verifier: .*'stepz' was unexpected"):
        grpo_settings({"stepz": 3})
    with pytest.raises(
        ConfigError, match=r"grpo\.runs\.verifier\.loss_type: 'mean' is not a registered loss aggregation"
    ):
        grpo_settings({"loss_type": "mean"})


def test_masked_truncated_completions_carry_no_loss(tmp_path):
    # a random tiny model almost never emits EOS in 2 tokens: every completion is truncated, so with
    # mask_truncated_completions there is nothing to train on and the weights must not move
    trainer = _trainer(tmp_path, steps=1, max_new_tokens=2, mask_truncated_completions=True, beta=0.0)
    before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    batch, _ = trainer._rollout(0)
    assert bool(batch.rollout.truncated.all())
    metrics = trainer._update(batch)
    assert metrics["update_skipped"] == 1.0 and metrics["num_loss_tokens"] == 0
    assert all(torch.equal(before[k], v) for k, v in trainer.policy.state_dict().items())
