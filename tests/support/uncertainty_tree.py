"""Made-up uncertainty-experiment outputs added to a fixture results tree (support.results_tree): the eval
summaries' `uncertainty` blocks, a deep ensemble's summary, an active-learning summary and risk-averse GRPO
runs with their hacking gaps, each written in the layout and under the keys the stages write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HEADS = {
    "bgpm": {
        "neg_abs_margin": {"errors": (0.76, 0.74, 0.79)},
        "predictive_entropy": {
            "errors": (0.784, 0.76, 0.81),
            "disagreement": (0.489, 0.45, 0.52),
            "unfamiliar": (0.932, 0.90, 0.96),
        },
        "mutual_information": {
            "errors": (0.763, 0.73, 0.79),
            "disagreement": (0.449, 0.41, 0.48),
            "unfamiliar": (0.957, 0.943, 0.969),
        },
    },
    "gpm": {
        "neg_abs_margin": {
            "errors": (0.743, 0.71, 0.773),
            "disagreement": (0.601, 0.568, 0.634),
            "unfamiliar": (0.83, 0.799, 0.861),
        }
    },
}
ENSEMBLES = {
    "gpm-ensemble": {
        "score_sd": {"errors": (0.39, 0.343, 0.428), "unfamiliar": (0.264, 0.223, 0.306)},
        "predictive_entropy": {"errors": (0.795, 0.767, 0.824)},
        "mutual_information": {"disagreement": (0.756, 0.726, 0.785), "unfamiliar": (0.627, 0.593, 0.659)},
    }
}
NEEDED = {"random": [800, 800, 800], "bgpm": [663, 759, 638], "ensemble": [779, 746, 526]}


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
    root: Path,
    run: str,
    reward_model: str,
    k: float,
    measure: str,
    gap: float,
    experiment: str,
    seed: int,
    transform: str = "none",
) -> None:
    """A GRPO run paid by a reward model with risk aversion k and its hacking gap (grpo/analyses/hacking.py)."""
    folder = root / "grpo" / run
    folder.mkdir(parents=True)
    spec = {"type": "reward_model", "weight": 1.0, "opponent": "reference", "risk_aversion": k}
    spec |= {"risk_measure": measure, "transform": transform}
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


def al_summary(per_seed: dict[str, list[float]], whole_pool: bool, full: dict | None = None) -> dict:
    """An active-learning summary (active/curve.py's keys) of three seeds and four rounds of 200 labels with
    these labels needed per seed (`full`: the full-data target's, else the same)."""
    seeds = [0, 1, 2]
    curve = {s: [{"mean": 0.6 + 0.03 * r, "sd": 0.01} for r in range(4)] for s in per_seed}
    needed = {
        s: {"per_seed": dict(zip(map(str, seeds), v, strict=True)), "reached": 3, "seeds": 3}
        for s, v in per_seed.items()
    }
    full = full or per_seed
    fraction = {
        "whole_pool": whole_pool,
        "fraction": 0.95,
        "strategies": {
            s: {"per_seed": dict(zip(map(str, seeds), v, strict=True)), "reached": 3} for s, v in full.items()
        },
    }
    return {
        "learner": "bgpm",
        "strategies": list(per_seed),
        "seeds": seeds,
        "labels": [200, 400, 600, 800],
        "curve": curve,
        "reference": "random",
        "labels_needed": needed,
        "full_data": fraction,
    }


def add_active_learning(root: Path, summary: dict[str, Any]) -> None:
    folder = root / "active_learning"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(summary))


def add_ece_intervals(root: Path, intervals: dict[str, tuple[float, float]]) -> None:
    """Each head's uncertainty block gets its calibration block's ECE with this interval (the eval stage's
    `ece` entry)."""
    for variant, (low, high) in intervals.items():
        path = root / "eval" / variant / "summary.json"
        summary = json.loads(path.read_text())
        block = summary["benchmarks"]["synthetic"]
        block["uncertainty"]["ece"] = {"value": block["calibration"]["ece"], "low": low, "high": high}
        path.write_text(json.dumps(summary))
