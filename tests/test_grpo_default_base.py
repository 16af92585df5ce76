"""A short GRPO run on the pipeline's own tiny default base raises held-out verifier accuracy (fixed seed).

The base and data are this checkout's results/ when prep_data and build_base have run there (PREFPIPE_RESULTS
points at another results folder); otherwise, as on a fresh clone in CI, the two real stages are run here on
the embedded default config (config/config.yaml), which takes about a minute of CPU."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from support.settings import grpo_settings, pipeline, stage_json
from support.stages import run_main

from prefpipe import build_base, prep_data
from prefpipe.data.verifier import verify
from prefpipe.generation.rl_prompts import load_rl_prompts
from prefpipe.grpo.policy_eval.measures import complete
from prefpipe.grpo.policy_io import load_policy
from prefpipe.grpo.rewards import build_rewards
from prefpipe.grpo.rollout.completions import GenerationSettings
from prefpipe.grpo.training.trainer import GRPOTrainer

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(os.environ.get("PREFPIPE_RESULTS", REPO / "results"))


@pytest.fixture(scope="module")
def default_results(tmp_path_factory) -> Path:
    """A results folder holding the default data/ and base/model/: the existing one, or one built here."""
    if (RESULTS / "base" / "model" / "config.json").exists() and (
        RESULTS / "data" / "rl_prompts_heldout.jsonl"
    ).exists():
        return RESULTS
    root = tmp_path_factory.mktemp("default_results")
    settings = pipeline()
    assert run_main(prep_data.main, stage_json(settings.data), out=root / "data")[0] == 0
    code, _ = run_main(build_base.main, stage_json(settings.base), data=root / "data", out=root / "base")
    assert code == 0
    return root


def _sampled_accuracy(model, tok, rows) -> float:
    settings = GenerationSettings(
        max_new_tokens=16, temperature=1.0, top_p=1.0, top_k=0, do_sample=True, fast=True
    )
    texts = complete(model, tok, [r["prompt"] for r in rows], settings, 100, 128, seed=0).texts
    return sum(verify(r["kind"], r["answer"], t) for r, t in zip(rows, texts, strict=True)) / len(rows)


def test_short_verifier_run_on_the_default_base_raises_heldout_accuracy(default_results, tmp_path):
    base_dir, data_dir = default_results / "base" / "model", default_results / "data"
    cfg = grpo_settings(
        {
            "steps": 30,
            "prompts_per_step": 16,
            "num_generations": 8,
            "max_new_tokens": 16,
            "learning_rate": 2e-4,
            "rewards": [{"type": "verifier"}],
            "sample_every": 0,
            "checkpoint_every": 0,
            "beta": 0.0,
            "mask_truncated_completions": False,
        },
        seed=0,
    )
    train_rows, _ = load_rl_prompts(data_dir / "rl_prompts_train.jsonl")
    heldout, _ = load_rl_prompts(data_dir / "rl_prompts_heldout.jsonl")
    policy, tok, state = load_policy(base_dir, cfg.lora, cfg.dtype, cfg.device)
    before = _sampled_accuracy(policy, tok, heldout)
    torch.manual_seed(0)
    trainer = GRPOTrainer(cfg, policy, tok, state, train_rows, build_rewards(cfg.rewards), tmp_path)
    summary = trainer.train()
    after = _sampled_accuracy(policy, tok, heldout)
    print(f"\nheld-out sampled verifier accuracy after {cfg.steps} GRPO steps: {before:.3f} -> {after:.3f}")
    assert summary["all_finite"]
    assert summary["last_steps"]["reward_mean"] > summary["first_steps"]["reward_mean"]
    assert after > before, f"held-out sampled accuracy {before:.3f} -> {after:.3f}"
