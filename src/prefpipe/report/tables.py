"""Reward-model tables (document.Table) from the tidy frames of collect.py: RewardBench, per-subset accuracy,
the Bayesian ablation, training summary and calibration. The published reference rows keep their published
two decimals; everything else is formatted by fmt.py.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Sequence
from typing import Any

import pandas as pd

from prefpipe.report.collect import ResultsTree
from prefpipe.report.document import Table
from prefpipe.report.fmt import NA, num, pct

SECTIONS = ("chat", "chat_hard", "safety", "reasoning")
SECTION_TITLES = {"chat": "Chat", "chat_hard": "Chat Hard", "safety": "Safety", "reasoning": "Reasoning"}

# GPM paper (Zhang et al., ICML 2025) RewardBench rows, percent; Average = plain mean of the four sections.
PAPER_ROWS = (
    ("Gemma-2B-it", "BT", 67.32, 63.37, 85.68, 83.04, 74.85),
    ("Gemma-2B-it", "GPM d=6", 79.61, 75.66, 85.27, 88.61, 82.29),
    ("Llama-3.1-8B-Instruct", "BT", 88.55, 85.75, 91.49, 96.47, 90.56),
    ("Llama-3.1-8B-Instruct", "GPM d=8", 93.58, 87.50, 91.08, 95.44, 91.90),
)
PAPER_NOTE = (
    "Italic rows: published numbers from the GPM paper (Zhang et al., ICML 2025; RewardBench, trained on "
    "Skywork-Reward-Preference-80K). Different model scale (2B/8B) and data: a reference point, not comparable "
    "to this run's numbers."
)
# Bayesian GPM design notes (ANCHORS.md): the collapsed "broken" model and the GPM it should match, fractions.
DESIGN_NOTE_ROWS = (
    ("Bayesian GPM, broken (design notes)", 0.506, 0.537, 0.401, 0.491),
    ("GPM target (design notes)", 0.788, 0.662, 0.843, 0.804),
)


def _section_cells(tree: ResultsTree, benchmark: str, variant: str) -> list[str]:
    frame = tree.eval_sections
    mine = frame[(frame["benchmark"] == benchmark) & (frame["variant"] == variant)].set_index("section")
    cells = []
    for section in SECTIONS:
        if section in mine.index:
            row = mine.loc[section]
            cells.append(pct(row["score"], row["stderr"], bool(row["partial"])))
        else:
            cells.append(NA)
    return cells


def section_scores(tree: ResultsTree, benchmark: str, variant: str) -> dict[str, float | None]:
    """{section: score, "overall": ...} as fractions (None when not recorded) for charts."""
    frame = tree.eval_sections
    mine = frame[(frame["benchmark"] == benchmark) & (frame["variant"] == variant)]
    scores: dict[str, float | None] = {row["section"]: row["score"] for row in mine.to_dict("records")}
    over = tree.eval_overall
    row = over[(over["benchmark"] == benchmark) & (over["variant"] == variant)]
    scores["overall"] = (
        float(row["overall"].iloc[0]) if len(row) and pd.notna(row["overall"].iloc[0]) else None
    )
    return scores


def benchmarks(tree: ResultsTree) -> list[str]:
    """Benchmarks with scores, the one the evaluation stage recorded as primary first."""
    names = list(dict.fromkeys(tree.eval_overall["benchmark"])) if not tree.eval_overall.empty else []
    primary = tree.recorded_primary
    return sorted(names, key=lambda name: name != primary)


def rewardbench_table(tree: ResultsTree, with_paper: bool) -> Table:
    """Every variant's sections and overall per benchmark, plus the paper's rows as labelled references."""
    columns = ["Benchmark", "Variant", *SECTION_TITLES.values(), "Overall", "Cyclic", "Pairs"]
    rows, classes = [], []
    over = tree.eval_overall
    for bench in benchmarks(tree):
        for variant in [
            v for v in tree.variants if ((over["benchmark"] == bench) & (over["variant"] == v)).any()
        ]:
            rec = over[(over["benchmark"] == bench) & (over["variant"] == variant)].iloc[0]
            cyclic = pct(rec["cyclic"]) if pd.notna(rec["cyclic"]) else NA
            pairs = str(int(rec["n_pairs"])) if pd.notna(rec["n_pairs"]) else NA
            rows.append(
                [
                    bench,
                    variant,
                    *_section_cells(tree, bench, variant),
                    pct(rec["overall"], rec["overall_stderr"]),
                    cyclic,
                    pairs,
                ]
            )
            classes.append("")
    caption = (
        "Accuracy (%) ± one binomial standard error. Section = count-weighted mean of its subsets; Overall = plain "
        "mean of the sections present; * = partial section (some official subsets missing); Cyclic = intransitive "
        "subsets, reported apart (a scalar reward is capped at 66.7% on a 3-cycle)."
    )
    if with_paper:
        for base, head, *scores in PAPER_ROWS:
            rows.append(["RewardBench (paper)", f"{base} {head}", *[f"{s:.2f}" for s in scores], NA, NA])
            classes.append("ref")
        caption += " " + PAPER_NOTE
    return Table("RewardBench-style accuracy per variant and benchmark", columns, rows, caption, classes)


def subset_table(tree: ResultsTree, benchmark: str) -> Table:
    frame = tree.eval_subsets[tree.eval_subsets["benchmark"] == benchmark]
    variants = [v for v in tree.variants if v in set(frame["variant"])]
    rows = []
    for subset in dict.fromkeys(frame["subset"]):
        mine = frame[frame["subset"] == subset].set_index("variant")
        first = mine.iloc[0]
        n = str(int(first["n"])) if pd.notna(first["n"]) else NA
        section = str(first["section"]) if pd.notna(first["section"]) and first["section"] is not None else NA
        rows.append(
            [subset, section, n, *[pct(mine.loc[v, "accuracy"]) if v in mine.index else NA for v in variants]]
        )
    return Table(f"Per-subset accuracy (%): {benchmark}", ["Subset", "Section", "n", *variants], rows)


# ------------------------------------------------------------------ Bayesian ablation


def flatten_config(cfg: dict[str, Any], ignore: Sequence[str], prefix: str = "") -> dict[str, Any]:
    """Dotted keys -> leaf values, skipping any key whose name or dotted path is in `ignore`."""
    flat: dict[str, Any] = {}
    for key, value in cfg.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if key in ignore or path in ignore:
            continue
        if isinstance(value, dict):
            flat.update(flatten_config(value, ignore, path))
        else:
            flat[path] = value
    return flat


def config_diff(
    cfg: dict[str, Any], ref: dict[str, Any], ignore: Sequence[str]
) -> list[tuple[str, Any, Any]]:
    """(key, value here, value in ref) for every setting that differs (missing on one side counts)."""
    a, b = flatten_config(cfg, ignore), flatten_config(ref, ignore)
    missing = object()
    diffs = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, missing), b.get(key, missing)
        if va != vb:
            diffs.append((key, None if va is missing else va, None if vb is missing else vb))
    return diffs


def ablation_config(cfg: dict[str, Any] | None) -> dict[str, Any] | None:
    """The settings to compare: the stage's fully resolved settings (defaults filled in) when it recorded them
    under `resolved`, so a default left implicit in one variant and explicit in another is not a difference."""
    if cfg is None:
        return None
    resolved = cfg.get("resolved")
    return resolved if isinstance(resolved, dict) else cfg


def _value(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def ablation_variants(
    tree: ResultsTree, reference: str, patterns: Sequence[str], ignore: Sequence[str]
) -> tuple[list[str], str | None]:
    """Bayesian variants in display order (most settings changed first, the fixed reference last) and the
    'broken' one (the variant farthest from the reference)."""
    names = [v for v in tree.variants if any(fnmatch.fnmatchcase(v, p) for p in patterns)]
    ref_cfg = ablation_config(tree.reward_configs.get(reference))
    if ref_cfg is None:
        return sorted(names, key=lambda v: (v == reference, v)), None
    distance = {
        v: len(config_diff(ablation_config(tree.reward_configs[v]), ref_cfg, ignore))
        if v in tree.reward_configs
        else -1
        for v in names
    }
    ordered = sorted(names, key=lambda v: (v == reference, -distance[v], v))
    broken = ordered[0] if ordered and distance[ordered[0]] > 0 else None
    return ordered, broken


def ablation_table(
    tree: ResultsTree,
    benchmark: str,
    reference: str,
    patterns: Sequence[str],
    baselines: Sequence[str],
    ignore: Sequence[str],
) -> tuple[Table, list[tuple[str, dict[str, float | None]]]]:
    """Broken, single fixes, fixed, then the GPM/BT baselines; each described by its config differences."""
    ordered, broken = ablation_variants(tree, reference, patterns, ignore)
    rows, classes, chart = [], [], []
    ref_cfg = ablation_config(tree.reward_configs.get(reference))
    broken_cfg = ablation_config(tree.reward_configs.get(broken)) if broken else None
    for variant in [*ordered, *[b for b in baselines if b in tree.variants]]:
        cfg = ablation_config(tree.reward_configs.get(variant))
        if variant in baselines:
            differs, fix = "baseline (not Bayesian)", NA
        elif cfg is None or ref_cfg is None:
            differs, fix = "not recorded (config.json missing)", NA
        else:
            diff = config_diff(cfg, ref_cfg, ignore)
            differs = (
                "; ".join(f"{k}={_value(v)} (fixed: {_value(r)})" for k, v, r in diff)
                or "fixed settings (reference)"
            )
            if broken_cfg is not None and variant != broken:
                fix = (
                    "; ".join(f"{k}={_value(v)}" for k, v, _ in config_diff(cfg, broken_cfg, ignore))
                    or "none"
                )
            else:
                fix = "none (all broken settings)" if variant == broken else NA
        scores = section_scores(tree, benchmark, variant)
        over = tree.eval_overall
        rec = over[(over["benchmark"] == benchmark) & (over["variant"] == variant)]
        cyclic = pct(rec["cyclic"].iloc[0]) if len(rec) else NA
        ece = tree.calibration[
            (tree.calibration["benchmark"] == benchmark) & (tree.calibration["variant"] == variant)
        ]
        final_prob = _final(tree.reward_metrics, variant, "prob")
        rows.append(
            [
                variant,
                differs,
                fix,
                *_section_cells(tree, benchmark, variant),
                pct(scores.get("overall")),
                cyclic,
                num(ece["ece"].iloc[0]) if len(ece) else NA,
                num(final_prob),
            ]
        )
        classes.append("")
        chart.append((variant, scores))
    for label, *scores in DESIGN_NOTE_ROWS:
        overall = sum(scores) / len(scores)
        rows.append([label, "reported (ANCHORS.md)", NA, *[pct(s) for s in scores], pct(overall), NA, NA, NA])
        classes.append("ref")
    columns = [
        "Variant",
        f"Settings that differ from {reference} (fixed)",
        "Fix applied to broken",
        *SECTION_TITLES.values(),
        "Overall",
        "Cyclic",
        "ECE",
        "Final train P(c>r)",
    ]
    caption = (
        f"Benchmark: {benchmark}. Accuracy (%). Variants and settings come from results/reward/*/config.json; "
        f"'broken' is the variant with the most settings changed from {reference}. Italic rows: numbers reported in "
        "the Bayesian GPM design notes for a larger model and other data (reference only)."
    )
    return Table("Bayesian GPM ablation", columns, rows, caption, classes), chart


def _final(frame: pd.DataFrame, variant: str, metric: str) -> float | None:
    if frame.empty or metric not in frame:
        return None
    mine = frame[frame["variant"] == variant].sort_values("step")[metric].dropna()
    return float(mine.iloc[-1]) if len(mine) else None


def training_summary_table(tree: ResultsTree) -> Table:
    rows = []
    trained = set(tree.reward_metrics["variant"]) if not tree.reward_metrics.empty else set()
    for variant in [v for v in tree.variants if v in trained]:
        mine = tree.reward_metrics[tree.reward_metrics["variant"] == variant]
        last_step = num(mine["step"].max()) if len(mine) and mine["step"].notna().any() else NA
        rows.append(
            [variant, last_step]
            + [
                num(_final(tree.reward_metrics, variant, m))
                for m in ("preference_loss", "kl_loss", "kl_beta", "prob", "accuracy", "grad_norm")
            ]
        )
    columns = ["Variant", "Steps", "Data loss", "KL loss", "KL beta", "P(c>r)", "Accuracy", "Grad norm"]
    return Table("Reward-model training: last logged values", columns, rows)


def calibration_table(tree: ResultsTree) -> Table:
    rows = []
    order = {v: i for i, v in enumerate(tree.variants)}
    bench_order = {b: i for i, b in enumerate(benchmarks(tree))}
    records = sorted(
        tree.calibration.to_dict("records"),
        key=lambda r: (bench_order.get(r["benchmark"], 99), order.get(r["variant"], 99)),
    )
    for rec in records:
        criterion = rec["criterion"] if isinstance(rec["criterion"], str) else NA
        rows.append(
            [
                rec["benchmark"],
                rec["variant"],
                num(rec["ece"]),
                num(rec["brier"]),
                num(rec["nll"]),
                num(rec["mean_confidence"]),
                criterion,
            ]
        )
    caption = (
        "ECE (equal-width bins), Brier score and negative log-likelihood of P(chosen > rejected), as recorded by "
        "the evaluation stage (Bayesian heads: closed-form probit approximation; point heads: sigmoid(s/tau)); "
        "lower is better. The last column says which pairs selective accuracy abstains on first."
    )
    columns = ["Benchmark", "Variant", "ECE", "Brier", "NLL", "Mean confidence", "Selective criterion"]
    return Table("Calibration", columns, rows, caption)
