"""Made-up uncertainty-experiment outputs added to a fixture results tree (support.results_tree): the eval
summaries' `uncertainty` blocks, a deep ensemble's summary, an active-learning summary and risk-averse GRPO
runs with their hacking gaps, each written in the layout and under the keys the stages write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def auroc(value: float, low: float, high: float) -> dict[str, Any]:
    return {"value": value, "low": low, "high": high, "positives": 10, "negatives": 90}


def block(measures: dict[str, dict[str, tuple[float, float, float]]]) -> dict[str, Any]:
    """An uncertainty block: measure -> {target: (value, low, high)}; AURC for the non-margin ones."""
    targets = {t for per in measures.values() for t in per}
    found = {t: {m: auroc(*per[t]) for m, per in measures.items() if t in per} for t in sorted(targets)}
    aurc = {
        m: {
            "uncertainty": 0.03,
            "margin": 0.029,
            "difference": {"value": 0.001, "low": -0.0004, "high": 0.0031},
        }
        for m in measures
        if m != "neg_abs_margin"
    }
    return {"n": 100, "accuracy": 0.9, "auroc": found, "aurc_vs_margin": aurc, "disagreement_at": 0.2}


def add_blocks(root: Path, heads: dict[str, dict], ensembles: dict[str, dict]) -> None:
    """Each head's eval summary gets its block on the synthetic benchmark; each ensemble a summary."""
    for variant, measures in heads.items():
        path = root / "eval" / variant / "summary.json"
        summary = json.loads(path.read_text())
        summary["benchmarks"]["synthetic"]["uncertainty"] = block(measures)
        path.write_text(json.dumps(summary))
    for name, measures in ensembles.items():
        folder = root / "eval_ensemble" / name
        folder.mkdir(parents=True)
        summary = {"stage": "eval_ensemble", "members": ["gpm", "gpm-seed1"], "uncertainty": block(measures)}
        (folder / "summary.json").write_text(json.dumps(summary))


def add_risk_run(
    root: Path, run: str, reward_model: str, k: float, measure: str, gap: float, experiment: str, seed: int
) -> None:
    """A GRPO run paid by a reward model with risk aversion k and its hacking gap (grpo/analyses/hacking.py)."""
    folder = root / "grpo" / run
    folder.mkdir(parents=True)
    spec = {"type": "reward_model", "weight": 1.0, "opponent": "reference", "risk_aversion": k}
    spec |= {"risk_measure": measure}
    config = {
        "experiment": experiment,
        "seed": seed,
        "run": run,
        "reward_model": reward_model,
        "rewards": [spec],
    }
    (folder / "config.json").write_text(json.dumps({"stage": "train_grpo", "config": config}))
    summary: dict[str, Any] = {
        "stage": "train_grpo",
        "reward_hacking": {"gap": gap, "rm_part": "reward_model"},
    }
    if k:
        summary["risk_penalty"] = {"reward_model": {"all_steps": {"spread_ratio": 0.5}}}
    (folder / "summary.json").write_text(json.dumps(summary))
