"""Read one results tree into tidy tables: the only place that knows where each stage puts its files.

This module reads the reward-model and evaluation outputs; collect_runs.py reads GRPO, policy evaluation and
Snakemake benchmark files; tree.py holds the data classes and the note-keeping file reader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from prefpipe.report import keys as K
from prefpipe.report.collect_runs import (
    collect_benchmarks,
    collect_grpo,
    collect_policy_eval,
    split_benchmark_name,
)
from prefpipe.report.tree import (
    Note,
    Reader,
    ResultsTree,
    StageDir,
    config_hash,
    inner_config,
    make_frame,
    order_variants,
    subdirs,
)

__all__ = [
    "Note",
    "ResultsTree",
    "StageDir",
    "collect_tree",
    "config_hash",
    "inner_config",
    "order_variants",
    "split_benchmark_name",
]


def collect_tree(root: str | Path, name: str | None, strict: bool) -> ResultsTree:
    """Read everything the report needs from one results directory (missing parts become notes)."""
    root = Path(root)
    tree = ResultsTree(name=name or root.name, root=root)
    reader = Reader(tree, strict)
    if not root.is_dir():
        reader.note("tree", "missing", f"results directory {root} not found")
        return tree
    tree.data_summary = reader.stage("data", root / "data", "data").summary
    tree.base_summary = reader.stage("base", root / "base", "base").summary
    _collect_reward(reader, root / "reward")
    _collect_eval(reader, root / "eval")
    collect_grpo(reader, root / "grpo")
    collect_policy_eval(reader, root / "policy_eval")
    collect_benchmarks(reader, root / "benchmarks")
    _cross_check(reader)
    for stage in tree.stages:
        cfg = inner_config(stage.config)
        if cfg and tree.experiment is None and "experiment" in cfg:
            tree.experiment = str(cfg["experiment"])
        if cfg and tree.seed is None and isinstance(cfg.get("seed"), int):
            tree.seed = cfg["seed"]
    return tree


def _cross_check(reader: Reader) -> None:
    """A trained variant without an evaluation (or a GRPO run without a policy evaluation) is a gap to show."""
    tree = reader.tree
    trained = set(tree.reward_configs) | (
        set(tree.reward_metrics["variant"]) if not tree.reward_metrics.empty else set()
    )
    evaluated = set(tree.eval_overall["variant"]) if not tree.eval_overall.empty else set()
    for variant in order_variants(trained - evaluated):
        reader.note(
            "eval",
            "missing",
            f"{reader.rel(tree.root / 'eval' / variant)}/: variant {variant} has no evaluation",
        )
    evaluated_runs = set(tree.policy_eval["run"]) if not tree.policy_eval.empty else set()
    for run in sorted(set(tree.grpo_configs) - evaluated_runs):
        reader.note(
            "policy_eval",
            "missing",
            f"{reader.rel(tree.root / 'policy_eval' / run)}/: run {run} has no policy evaluation",
        )


def _collect_reward(reader: Reader, folder: Path) -> None:
    tree = reader.tree
    variants = subdirs(folder)
    if not variants:
        reader.note("reward", "missing", f"{reader.rel(folder)}/ has no reward-model variants")
    frames, unused = [], set()
    for path in variants:
        stage = reader.stage(f"reward/{path.name}", path, "reward")
        cfg = inner_config(stage.config)
        if cfg is not None:
            tree.reward_configs[path.name] = cfg
        rows = reader.jsonl(path / "metrics.jsonl", "reward") or []
        records = []
        for row in rows:
            flat = K.flatten(row)
            canonical, used = K.canonical_row(flat, K.REWARD_METRICS)
            unused.update(set(flat) - used - {"time"})
            if canonical:
                records.append({"variant": path.name, **canonical, "nonfinite": K.nonfinite_keys(canonical)})
        if rows and not records:
            reader.note("reward", "missing", f"{reader.rel(path / 'metrics.jsonl')}: no known metric keys")
        if records:
            frames.append(pd.DataFrame(records))
    columns = ["variant", *K.REWARD_METRICS, "nonfinite"]
    tree.reward_metrics = (
        pd.concat(frames, ignore_index=True).reindex(columns=columns) if frames else make_frame([], columns)
    )
    tree.unused_keys["reward/*/metrics.jsonl"] = unused


def _benchmark_summaries(
    reader: Reader, path: Path, summary: dict[str, Any] | None
) -> dict[str, dict[str, Any]]:
    """{benchmark: summary} from one eval folder: a single-benchmark summary, an aggregate, or subfolders."""
    found: dict[str, dict[str, Any]] = {}
    if isinstance(summary, dict):
        nested = summary.get("benchmarks")
        if isinstance(nested, dict):
            for bench, value in nested.items():
                if isinstance(value, dict) and "sections" in value:
                    found[str(bench)] = value
        elif "sections" in summary:
            found[str(summary.get("benchmark") or "default")] = summary
    for sub in subdirs(path):
        if sub.name in found or not (sub / "summary.json").is_file():
            continue
        value = reader.json(sub / "summary.json", "eval")
        if isinstance(value, dict) and "sections" in value:
            found[sub.name] = value
    return found


def _recorded_primary(summary: Any) -> str | None:
    """The headline benchmark an eval summary names: `primary_benchmark` (the stage's aggregate summary), or
    `benchmark` of a single-benchmark summary."""
    if not isinstance(summary, dict):
        return None
    for key in ("primary_benchmark", "benchmark"):
        if isinstance(summary.get(key), str) and summary[key]:
            return summary[key]
    return None


def _collect_eval(reader: Reader, folder: Path) -> None:
    tree = reader.tree
    variants = subdirs(folder)
    if not variants:
        reader.note("eval", "missing", f"{reader.rel(folder)}/ has no evaluated variants")
    overall, sections, subsets, calib, bins, selective = [], [], [], [], [], []
    for path in variants:
        stage = reader.stage(f"eval/{path.name}", path, "eval")
        benches = _benchmark_summaries(reader, path, stage.summary)
        primary = _recorded_primary(stage.summary)
        if primary is not None:
            tree.eval_primary[path.name] = primary
        if stage.summary is not None and not benches:
            reader.note(
                "eval", "missing", f"{reader.rel(path / 'summary.json')}: no `sections` for any benchmark"
            )
        for bench, summ in benches.items():
            key = {"benchmark": bench, "variant": path.name}
            cyclic = summ.get("cyclic") if isinstance(summ.get("cyclic"), dict) else {}
            overall.append(
                {
                    **key,
                    "overall": K.as_float(summ.get("overall")),
                    "overall_stderr": K.as_float(summ.get("overall_stderr")),
                    "cyclic": K.as_float(cyclic.get("accuracy")),
                    "cyclic_n": K.as_float(cyclic.get("n")),
                    "n_pairs": K.as_float(summ.get("n_pairs")),
                    "pairs_per_second": K.as_float(summ.get("pairs_per_second")),
                }
            )
            for name, sec in (summ.get("sections") or {}).items():
                sec = sec if isinstance(sec, dict) else {"score": sec}
                sections.append(
                    {
                        **key,
                        "section": K.norm_key(name),
                        "score": K.as_float(sec.get("score")),
                        "stderr": K.as_float(sec.get("stderr")),
                        "n": K.as_float(sec.get("n")),
                        "partial": bool(sec.get("partial", False)),
                        "missing_subsets": ", ".join(map(str, sec.get("missing_subsets") or [])),
                    }
                )
            for name, sub in (summ.get("subsets") or {}).items():
                sub = sub if isinstance(sub, dict) else {"accuracy": sub}
                subsets.append(
                    {
                        **key,
                        "subset": str(name),
                        "section": sub.get("section"),
                        "accuracy": K.as_float(sub.get("accuracy")),
                        "n": K.as_float(sub.get("n")),
                    }
                )
            _collect_calibration(summ.get("calibration"), key, calib, bins, selective)
    tree.eval_overall = make_frame(
        overall,
        [
            "benchmark",
            "variant",
            "overall",
            "overall_stderr",
            "cyclic",
            "cyclic_n",
            "n_pairs",
            "pairs_per_second",
        ],
    )
    tree.eval_sections = make_frame(
        sections, ["benchmark", "variant", "section", "score", "stderr", "n", "partial", "missing_subsets"]
    )
    tree.eval_subsets = make_frame(subsets, ["benchmark", "variant", "subset", "section", "accuracy", "n"])
    tree.calibration = make_frame(
        calib, ["benchmark", "variant", "ece", "brier", "nll", "mean_confidence", "criterion"]
    )
    tree.reliability = make_frame(bins, ["benchmark", "variant", "confidence", "accuracy", "count"])
    tree.selective = make_frame(selective, ["benchmark", "variant", "coverage", "accuracy"])
    if variants and not calib:
        reader.note("calibration", "missing", "no `calibration` block in any eval summary")


def _records(value: Any) -> list[dict[str, Any]]:
    """Bins given as a list of objects, or as a dict of equal-length lists (columns)."""
    if isinstance(value, list):
        return [v for v in value if isinstance(v, dict)]
    if isinstance(value, dict):
        columns = {k: v for k, v in value.items() if isinstance(v, list)}
        if columns:
            length = min(len(v) for v in columns.values())
            return [{k: v[i] for k, v in columns.items()} for i in range(length)]
    return []


def _collect_calibration(block: Any, key: dict[str, str], calib: list, bins: list, selective: list) -> None:
    if not isinstance(block, dict):
        return
    calib.append(
        {
            **key,
            "ece": K.as_float(block.get("ece")),
            "brier": K.as_float(block.get("brier")),
            "nll": K.as_float(block.get("nll")),
            "mean_confidence": K.as_float(block.get("mean_confidence")),
            "criterion": block.get("selective_criterion") or block.get("method"),
        }
    )
    for raw in _records(block.get("reliability")):
        row, _ = K.canonical_row(K.flatten(raw), K.BIN_FIELDS)
        if row.get("confidence") is not None and row.get("accuracy") is not None:
            bins.append({**key, **row})
    for raw in _records(block.get("selective")):
        row, _ = K.canonical_row(K.flatten(raw), K.SELECTIVE_FIELDS)
        if row.get("coverage") is not None and row.get("accuracy") is not None:
            selective.append({**key, **row})
