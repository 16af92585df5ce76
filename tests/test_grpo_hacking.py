"""Reward hacking measured: a reward-model-only run logs the un-optimised verifier on every training batch and
its summary holds the per-step curves and the standardised gap (checked against a hand computation)."""

from __future__ import annotations

import pytest
import torch
from support.models import chat_tokenizer, save_tiny_policy, tiny_llama
from support.settings import grpo_settings, pipeline, reward_settings

from prefpipe.grpo.analyses.hacking import REWARD_HACKING, overoptimisation
from prefpipe.grpo.metric_names import RISK_PENALTY
from prefpipe.grpo.rewards import build_rewards
from prefpipe.grpo.training.trainer import GRPOTrainer

ROWS = [
    {"id": str(i), "prompt": p, "answer": "5", "kind": "add"}
    for i, p in enumerate(["What is 2 plus 3?", "Say yes.", "Say no.", "Repeat cat:"])
]
SUMMARY_KEYS = {
    "rm_part",
    "verifier_optimised",
    "steps",
    "rm_score",
    "verifier_accuracy",
    "rm_gain_sd_by_step",
    "verifier_gain_sd_by_step",
    "completion_length",
    "truncated_ratio",
    "window",
    "rm_score_first",
    "rm_score_last",
    "verifier_accuracy_first",
    "verifier_accuracy_last",
    "rm_gain_sd",
    "verifier_gain_sd",
    "gap",
    "definition",
    "rm_gain_note",
}


def test_default_config_declares_the_three_reward_model_only_runs():
    runs = pipeline().grpo
    for name, variant, risk in (("rm_bt", "bt", 0.0), ("rm_gpm", "gpm", 0.0), ("rm_bgpm_risk", "bgpm", 1.0)):
        run = runs[name]
        assert run.reward_model == variant
        assert [s["type"] for s in run.rewards] == ["reward_model"]  # no verifier reward
        assert run.rewards[0]["risk_aversion"] == risk
        assert run.steps <= runs["verifier"].steps


@pytest.mark.parametrize("head", ["bt", "bgpm"])
def test_reward_model_only_run_summary_holds_the_overoptimisation_curve(tmp_path, head):
    from prefpipe.reward.model import build_reward_model

    backbone = save_tiny_policy(tmp_path / "rm_base", seed=11, chat_template=False)
    torch.manual_seed(0)
    rm = build_reward_model(
        str(backbone), reward_settings({"head": {"dim": 4}, "data": {"max_length": 64}}, variant=head)
    ).eval()
    run = {"bt": "rm_bt", "bgpm": "rm_bgpm_risk"}[head]
    cfg = grpo_settings(
        {
            "steps": 3,
            "prompts_per_step": 2,
            "num_generations": 4,
            "max_new_tokens": 6,
            "micro_batch_size": 8,
            "sample_every": 0,
            "checkpoint_every": 0,
            "inspect_steps": [],
            "mask_truncated_completions": False,
        },
        run=run,
    )
    tok = chat_tokenizer()
    trainer = GRPOTrainer(cfg, tiny_llama(tok), tok, "none", ROWS, build_rewards(cfg.rewards, rm), tmp_path)
    summary = trainer.train()
    block = summary[REWARD_HACKING]
    assert set(block) == SUMMARY_KEYS
    assert block["verifier_optimised"] is False and block["rm_part"] == "reward_model"
    assert block["steps"] == [0, 1, 2]
    rows = trainer.metric_rows
    assert all("verifier_accuracy" in r and "verifier_score_std" in r for r in rows)
    assert block["rm_score"] == [r["reward/reward_model_mean"] for r in rows]
    # by hand: window 3 (the run is shorter than 5), gains over the mean per-batch std
    rm_scale = sum(r["reward/reward_model_std"] for r in rows) / 3
    rm_gain = (sum(block["rm_score"]) / 3 - sum(block["rm_score"]) / 3) / rm_scale
    assert block["window"] == 3 and block["rm_gain_sd"] == pytest.approx(rm_gain, abs=1e-9)
    assert block["completion_length"] == [r["completion_length_mean"] for r in rows]
    assert block["truncated_ratio"] == [r["truncated_ratio"] for r in rows]
    # the risk-averse run logs its penalty's spread each step and keeps it in the summary (grpo/analyses/risk.py)
    risk = summary[RISK_PENALTY]
    if head == "bt":
        assert risk is None and not any(k.startswith("risk/") for r in rows for k in r)
        return
    ratios = [r["risk/reward_model_spread_ratio"] for r in rows]
    assert all(r["risk/reward_model_penalty_mean"] > 0 for r in rows) and all(x is not None for x in ratios)
    assert risk["reward_model"]["all_steps"]["penalty_mean"] == pytest.approx(
        sum(r["risk/reward_model_penalty_mean"] for r in rows) / 3
    )


def test_gap_by_hand():
    rows = [
        {
            "step": s,
            "reward/rm_mean": m,
            "reward/rm_std": 2.0,
            "verifier_accuracy": a,
            "verifier_score_std": 0.5,
            "completion_length_mean": 10.0 + s,
            "truncated_ratio": 0.1 * s,
        }
        for s, (m, a) in enumerate(zip([0.0] * 5 + [1.0] * 5, [0.2] * 5 + [0.3] * 5, strict=True))
    ]
    specs = [{"type": "reward_model", "name": "rm", "weight": 1.0}]
    block = overoptimisation(rows, specs)
    assert block["rm_gain_sd"] == pytest.approx((1.0 - 0.0) / 2.0)
    assert block["verifier_gain_sd"] == pytest.approx((0.3 - 0.2) / 0.5)
    assert block["gap"] == pytest.approx(0.5 - 0.2)
    # per step: (value - first-5 mean) / mean std, beside length and truncation as logged
    assert block["rm_gain_sd_by_step"] == pytest.approx([0.0] * 5 + [0.5] * 5)
    assert block["verifier_gain_sd_by_step"] == pytest.approx([0.0] * 5 + [0.2] * 5)
    assert block["completion_length"] == [10.0 + s for s in range(10)]
    assert block["truncated_ratio"] == pytest.approx([0.1 * s for s in range(10)])
    assert overoptimisation(rows, [{"type": "verifier", "name": None, "weight": 1.0}]) is None
    assert (
        overoptimisation([{k: v for k, v in r.items() if k != "verifier_accuracy"} for r in rows], specs)
        is None
    )


def test_group_relative_pairwise_reward_has_no_rm_gain():
    """A pairwise head's group-relative reward has the same batch mean at every step: its 'gain' would read 0
    whatever the policy learnt, so it is left out and the block says why; a scalar head's is kept."""
    rows = [
        {
            "step": s,
            "reward/rm_mean": 0.0,
            "reward/rm_std": 1.0,
            "verifier_accuracy": 0.2 - 0.01 * s,
            "verifier_score_std": 0.4,
            "completion_length_mean": 20.0 + 4 * s,
            "truncated_ratio": 0.1 * s,
        }
        for s in range(10)
    ]
    group = [{"type": "reward_model", "name": "rm", "weight": 0.5, "opponent": "group"}]
    block = overoptimisation(rows, group, scalar_reward=False)
    assert block["rm_gain_sd"] is None and block["rm_gain_sd_by_step"] is None and block["gap"] is None
    assert "fixed by construction" in block["rm_gain_note"]
    assert block["verifier_gain_sd"] == pytest.approx((0.2 - 0.07 - (0.2 - 0.02)) / 0.4)
    assert block["completion_length"][-1] == 56.0
    scalar = overoptimisation(rows, group, scalar_reward=True)
    assert scalar["rm_gain_sd"] == 0.0 and scalar["rm_gain_note"] is None
    reference = [{**group[0], "opponent": "reference"}]
    assert overoptimisation(rows, reference, scalar_reward=False)["rm_gain_sd"] == 0.0


def test_report_plots_the_curves_and_the_gap(tmp_path):
    from support.settings import report_settings

    from prefpipe.common.io import atomic_write_json
    from prefpipe.report.inputs import Manifest, read_tree
    from prefpipe.report.sections import Context, hacking

    rows = [
        {
            "step": s,
            "reward/rm_mean": 0.1 * s,
            "reward/rm_std": 1.0,
            "verifier_accuracy": 0.3,
            "verifier_score_std": 0.4,
            "completion_length_mean": 5.0 + s,
            "truncated_ratio": 0.05 * s,
        }
        for s in range(12)
    ]
    block = overoptimisation(rows, [{"type": "reward_model", "name": "rm", "weight": 1.0}])
    atomic_write_json(tmp_path / "grpo" / "rm_bt" / "summary.json", {"steps": 12, REWARD_HACKING: block})
    tree = read_tree(tmp_path, Manifest({"grpo": {"rm_bt": "grpo/rm_bt/summary.json"}}), "main", True)
    section = hacking.build(Context(tree, [], report_settings()))
    figure, table = section.blocks
    assert figure.png.startswith(b"\x89PNG")
    assert table.rows[0][0] == "rm_bt" and table.rows[0][-3] == f"{block['gap']:+.3f}"
    # length and truncation: mean of the first 5 steps -> mean of the last 5 (steps 7..11)
    assert table.rows[0][-2:] == ["7 → 14", "10.0% → 45.0%"]
    assert block["gap"] == pytest.approx((0.1 * 9 - 0.1 * 2) / 1.0)  # last 5 mean 0.9, first 5 mean 0.2
