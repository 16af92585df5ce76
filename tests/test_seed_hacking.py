"""Reward hacking over seeds (report/seed_hacking.py through prefpipe.seed_summary) on hand-made results trees of
config/experiments/risk_rl.yaml: evaluation files as the eval stage writes them, GRPO summaries whose hacking and
risk blocks come from the trainer's own functions over hand-made metric rows; every figure checked against numpy
and a tabulated t quantile."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from support.eval_tree import decisions, write_eval
from support.workflow import REPO

from prefpipe import seed_summary
from prefpipe.grpo.analyses.hacking import overoptimisation
from prefpipe.grpo.analyses.risk import risk_summary

CONFIG = REPO / "config" / "experiments" / "risk_rl.yaml"
GAPS = {
    "rm_bt": [1.0, 2.0, 1.5],
    "rm_gpm": [1.1, 0.4, 0.9],
    "rm_bgpm0": [0.8, 1.4, 1.7],
    "rm_bgpm_risk": [0.5, 1.0, 1.2],
    "rm_bgpm_risk5": [0.2, 0.9, 0.3],
    "rm_ens0": [1.3, 1.6, 0.7],
    "rm_ens_risk": [0.6, 1.1, 0.4],
    "rm_bgpm_mi0": [0.9, 1.5, 1.2],
    "rm_bgpm_mi": [0.4, 1.3, 0.8],
    "rm_bgpm_p0": [1.2, 1.7, 1.0],
    "rm_bgpm_lcb": [0.7, 1.4, 0.6],
}
RATIOS = [0.1, 0.2, 0.3]  # each risk-averse run's penalty spread ratio per seed
AVERSE = ("rm_bgpm_risk", "rm_bgpm_risk5", "rm_ens_risk", "rm_bgpm_mi", "rm_bgpm_lcb")
T_975_2 = 4.302652729749464  # Student t, 97.5% quantile, 2 dof (tables)
SPEC = {"type": "reward_model", "name": None, "weight": 1.0, "opponent": "reference"}


def _rows(gap: float, ratio: float | None) -> list[dict]:
    """Ten steps whose standardised rm gain is `gap` and verifier gain 0 (rm mean 0 then `gap`, std 1)."""
    rows = []
    for step in range(10):
        row = {
            "step": step,
            "reward/reward_model_mean": 0.0 if step < 5 else gap,
            "reward/reward_model_std": 1.0,
            "verifier_accuracy": 0.5,
            "verifier_score_std": 0.5,
            "completion_length_mean": 8.0,
            "truncated_ratio": 0.0,
        }
        if ratio is not None:
            row |= {
                "risk/reward_model_penalty_mean": 0.3,
                "risk/reward_model_penalty_group_sd": ratio * 0.5,
                "risk/reward_model_score_group_sd": 0.5,
            }
        rows.append(row)
    return rows


def _write(path: Path, value: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


def _tree(root: Path, seed: int) -> Path:
    tree = root / f"seed-{seed}"
    stamp = {"experiment": "synthetic-risk-rl", "seed": seed}
    for i, variant in enumerate(("bt", "bgpm-kl")):
        write_eval(tree / "eval", variant, decisions(0.8, seed=10 * seed + i))
        _write(tree / "eval" / variant / "config.json", {"stage": "eval_rewardbench", "config": stamp})
    for run, gaps in GAPS.items():
        rows = _rows(gaps[seed], RATIOS[seed] if run in AVERSE else None)
        summary = {
            "reward_hacking": overoptimisation(rows, [SPEC], False),
            "risk_penalty": risk_summary(rows),
        }
        _write(tree / "grpo" / run / "summary.json", summary)
        _write(tree / "grpo" / run / "config.json", {"stage": "train_grpo", "config": stamp})
    return tree


def test_gaps_ratios_and_paired_t_intervals_by_hand(tmp_path):
    trees = [_tree(tmp_path, seed) for seed in (0, 1, 2)]
    out = tmp_path / "summary"
    assert seed_summary.main(["--configfile", str(CONFIG), "--out", str(out), *map(str, trees)]) == 0
    block = json.loads((out / "summary.json").read_text())["grpo_hacking"]
    for run, gaps in GAPS.items():
        got = block["runs"][run]["gap"]
        assert got["mean"] == pytest.approx(np.mean(gaps)) and got["sd"] == pytest.approx(
            np.std(gaps, ddof=1)
        )
    ratio = block["runs"]["rm_bgpm_risk"]["spread_ratio"]
    assert ratio["mean"] == pytest.approx(0.2) and ratio["sd"] == pytest.approx(0.1)
    assert "spread_ratio" not in block["runs"]["rm_bt"]  # no penalty, no ratio
    pairs = {(c["a"], c["b"]): c for c in block["contrasts"]}
    # each risk-averse run against the BT baseline and its own k = 0 control only (seed_summary.controls): the
    # same reward model paying the same quantity at k = 0 (the sd runs' control pays the score, the information
    # run's the predictive probability, the lower bound's sigmoid(score / tau): grpo.paid_quantity)
    controls = {
        "rm_bgpm_risk": "rm_bgpm0",
        "rm_bgpm_risk5": "rm_bgpm0",
        "rm_ens_risk": "rm_ens0",
        "rm_bgpm_mi": "rm_bgpm_mi0",
        "rm_bgpm_lcb": "rm_bgpm_p0",
    }
    assert set(pairs) == {(a, b) for a, k0 in controls.items() for b in ("rm_bt", k0)}
    for (a, b), got in pairs.items():
        d = np.subtract(GAPS[a], GAPS[b])
        half = T_975_2 * np.std(d, ddof=1) / math.sqrt(3)
        assert got["mean"] == pytest.approx(d.mean()) and got["dof"] == 2 and got["seeds"] == [0, 1, 2]
        assert got["ci"] == pytest.approx([d.mean() - half, d.mean() + half])
    md = (out / "summary.md").read_text()
    assert "| rm_bgpm_risk | +0.90 ± 0.36 (n=3) | 0.200 ± 0.100 (n=3) |" in md
    assert "| rm_bgpm_risk − rm_bt | -0.60 ± 0.36 (n=3) | [-1.50, +0.30] (95%) | 2 |" in md
    assert "t = 4.30 (2 dof): wide by design" in md
