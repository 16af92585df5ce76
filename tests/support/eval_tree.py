"""Evaluation outputs (results/eval/<variant>/summary.json + per_example.parquet) written from given per-pair
decisions with the evaluation's own scoring (accuracy_summary.summarize_scores over the config's section map),
for the ablation tests: the same files the eval stage writes, with decisions a test controls."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from prefpipe.evaluation.accuracy_summary import summarize_scores
from prefpipe.evaluation.sections import SectionTable, build_section_table
from support.settings import data_settings

# The synthetic world's test subsets with their row counts (cyclic last, as the world writes them).
SUBSET_SIZES = {
    "chat-arith": 30,
    "chat-instruct": 20,
    "chathard-arith": 25,
    "chathard-instruct": 25,
    "safety-refuse": 20,
    "safety-comply": 30,
    "reasoning-multistep": 40,
    "cyclic-rps": 12,
}


def config_table() -> SectionTable:
    """The section table the eval stage builds for the synthetic benchmark (data.sections of config.yaml)."""
    data = data_settings()
    return build_section_table(data.sections, data.cyclic_subsets, xstest_weights="official")


def subsets_column() -> list[str]:
    return [s for s, n in SUBSET_SIZES.items() for _ in range(n)]


def decisions(accuracy: dict[str, float] | float, seed: int) -> np.ndarray:
    """Random correct/wrong decisions with the given accuracy per subset (or one for all)."""
    rng = np.random.default_rng(seed)
    out = []
    for subset, n in SUBSET_SIZES.items():
        acc = accuracy if isinstance(accuracy, float) else accuracy.get(subset, 0.7)
        out.append(rng.random(n) < acc)
    return np.concatenate(out)


def write_eval(
    root: Path,
    variant: str,
    correct: np.ndarray,
    benchmark: str = "synthetic",
    finetuned: np.ndarray | None = None,
) -> dict:
    """results/eval/<variant>/ as the eval stage writes it (ids in shuffled order, as a real stage may);
    `finetuned`: the decisions of the head as fine-tuned (an extra head). Returns the benchmark block."""
    subsets = subsets_column()
    block = summarize_scores(subsets, list(correct), config_table())
    block |= {"benchmark": benchmark, "calibration": {"ece": 0.05 + 0.01 * len(variant) % 7}}
    ids = [f"{s}-{i}" for i, s in enumerate(subsets)]
    frame = pd.DataFrame({"id": ids, "subset": subsets, "correct": correct, "benchmark": benchmark})
    if finetuned is not None:
        extra = summarize_scores(subsets, list(finetuned), config_table()) | {"calibration": {"ece": 0.2}}
        block["extra_heads"] = {"as_finetuned": extra}
        frame["correct_as_finetuned"] = finetuned
    frame = frame.sample(frac=1.0, random_state=len(variant)).reset_index(drop=True)
    folder = root / variant
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(folder / "per_example.parquet", index=False)
    top = {**block, "primary_benchmark": benchmark, "benchmarks": {benchmark: block}}
    (folder / "summary.json").write_text(json.dumps(top), encoding="utf-8")
    return block
