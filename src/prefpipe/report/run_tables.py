"""Report tables for GRPO runs (runs, before/after, diagnostics) and run facts (configs, versions, wall time)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from prefpipe.report import keys as K
from prefpipe.report.collect import ResultsTree, config_hash, inner_config
from prefpipe.report.diagnostics import Flag
from prefpipe.report.document import Table
from prefpipe.report.fmt import NA, ci, num, pct
from prefpipe.report.tables import flatten_config


def grpo_runs_table(tree: ResultsTree) -> Table:
    rows = []
    for run in tree.runs:
        cfg = tree.grpo_configs.get(run) or {}
        frame = tree.grpo_metrics[tree.grpo_metrics["run"] == run].sort_values("step")
        summary = tree.grpo_summaries.get(run) or {}
        step_time = frame["step_time"].dropna().median() if "step_time" in frame and len(frame) else None
        rm = (
            cfg.get("reward_model")
            or summary.get("reward_model_variant")
            or summary.get("reward_model")
            or NA
        )
        rewards = cfg.get("rewards") if isinstance(cfg.get("rewards"), list) else []
        functions = " + ".join(
            f"{r.get('type', '?')} ×{r.get('weight', 1)}" for r in rewards if isinstance(r, dict)
        )
        rows.append(
            [
                run,
                str(rm),
                functions or NA,
                num(cfg.get("beta")),
                _steps(summary, frame),
                num(step_time),
                num(summary.get("wall_time_s")),
                num(_last(frame, "reward_mean")),
                num(_last(frame, "kl_k3_mean")),
                num(_last(frame, "entropy")),
                num(_last(frame, "length_mean")),
            ]
        )
    columns = [
        "Run",
        "Reward model",
        "Reward functions",
        "beta",
        "Steps",
        "Median s/step",
        "Wall time (s)",
        "Final reward",
        "Final KL k3",
        "Final entropy",
        "Final length",
    ]
    return Table("GRPO runs", columns, rows)


def _steps(summary: dict[str, Any], frame: pd.DataFrame) -> str:
    """Optimizer steps run: the stage's own count, else the number of logged steps (GRPO logs from step 0, so
    the last step index is one short)."""
    steps = summary.get("steps")
    if isinstance(steps, int) and not isinstance(steps, bool):
        return str(steps)
    logged = frame["step"].dropna().nunique() if "step" in frame else 0
    return str(logged) if logged else NA


def _last(frame: pd.DataFrame, metric: str) -> float | None:
    if metric not in frame:
        return None
    values = frame[metric].dropna()
    return float(values.iloc[-1]) if len(values) else None


def _cell(value: Any) -> Any:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def policy_table(tree: ResultsTree) -> Table:
    """Base vs trained per run and decoding; reward-model and KL columns belong to the trained policy."""
    rows = []
    pairs = tree.policy_pairs.set_index("run") if not tree.policy_pairs.empty else pd.DataFrame()
    frame = tree.policy_eval.sort_values(
        ["run", "primary", "decoding"], ascending=[True, False, True], kind="stable"
    )
    for rec in frame.to_dict("records"):
        trained = rec["policy"] == "trained" and rec["primary"]
        pair = pairs.loc[rec["run"]] if trained and rec["run"] in pairs.index else None
        win = NA
        if pair is not None and _cell(pair["win_rate"]) is not None:
            interval = ci(pair["win_ci_lo"], pair["win_ci_hi"])
            win = pct(pair["win_rate"]) + (f" {interval}" if interval != NA else "")
        kl3 = (
            _cell(rec["kl_k3"])
            if _cell(rec["kl_k3"]) is not None
            else (pair["kl_k3"] if pair is not None else None)
        )
        kl1 = (
            _cell(rec["kl_k1"])
            if _cell(rec["kl_k1"]) is not None
            else (pair["kl_k1"] if pair is not None else None)
        )
        rows.append(
            [
                rec["run"],
                str(rec["decoding"]) + ("" if rec["primary"] else " (secondary)"),
                rec["policy"],
                pct(rec["accuracy"]),
                ci(rec["ci_lo"], rec["ci_hi"]),
                num(rec["reward"]),
                num(rec["length"]),
                pct(rec["truncated"]),
                win,
                num(pair["score_diff"]) if pair is not None else NA,
                num(kl3),
                num(kl1),
                num(pair["kl_seq"]) if pair is not None else NA,
                num(rec["n"]),
            ]
        )
    columns = [
        "Run",
        "Decoding",
        "Policy",
        "Verifier acc. (%)",
        "95% interval",
        "Reward score",
        "Length",
        "Truncated (%)",
        "Win rate vs base (%)",
        "Mean s(trained > base)",
        "KL k3 / token",
        "KL k1 / token",
        "KL / sequence",
        "Prompts",
    ]
    caption = (
        "Held-out prompts. Interval: Wilson 95% as recorded by the policy evaluation. Reward score: mean reward "
        "of a scalar (BT) reward model; pairwise GPM heads have none, their comparison is Mean s(trained > base). "
        "Win rate: share of prompts "
        "where the reward model scores the trained policy's completion above the base policy's. KL of the trained "
        "policy to the base (reference) policy on its own samples: per completion token (k3, k1) and per sequence."
    )
    return Table("Before / after GRPO", columns, rows, caption)


def diagnostics_table(flags: Sequence[Flag], title: str) -> Table:
    rows, classes = [], []
    for f in flags:
        rows.append(
            [
                f.run,
                f.check,
                f.metric,
                f.status,
                str(f.first_step) if f.first_step is not None else NA,
                num(f.value),
                f.rule,
                str(f.n_steps) if f.status == "flagged" else NA,
            ]
        )
        classes.append("flag" if f.status == "flagged" else "")
    columns = ["Run", "Check", "Metric", "Status", "First step", "Value there", "Threshold", "Steps flagged"]
    return Table(title, columns, rows, row_classes=classes)


# ------------------------------------------------------------------ run facts


def _device(versions: dict[str, Any] | None) -> str:
    if not versions:
        return NA
    dev = versions.get("device") or {}
    if dev.get("cuda") and dev.get("gpus"):
        return "GPU: " + ", ".join(map(str, dev["gpus"]))
    cores = dev.get("cpu_count")
    return f"CPU ({cores} cores)" if cores else ("CPU" if dev else NA)


def facts_table(tree: ResultsTree) -> Table:
    rows = []
    for stage in tree.stages:
        cfg = inner_config(stage.config)
        pkgs = (stage.versions or {}).get("packages") or {}
        wall = (stage.summary or {}).get("wall_time_s")
        rows.append(
            [
                stage.stage,
                str(cfg.get("experiment", NA)) if cfg else NA,
                str(cfg.get("seed", NA)) if cfg else NA,
                config_hash(cfg) if cfg is not None else "not recorded",
                _device(stage.versions),
                str(pkgs.get("torch") or NA),
                str(pkgs.get("transformers") or NA),
                num(wall),
            ]
        )
    columns = [
        "Stage",
        "Experiment",
        "Seed",
        "Config hash",
        "Device",
        "torch",
        "transformers",
        "Wall time (s)",
    ]
    caption = "Config hash: first 12 hex digits of sha256 over the stage's resolved config as canonical JSON (sorted keys)."
    return Table("Run facts per stage", columns, rows, caption)


def versions_table(tree: ResultsTree) -> Table:
    seen: dict[str, dict[str, list[str]]] = {}
    for stage in tree.stages:
        for package, version in ((stage.versions or {}).get("packages") or {}).items():
            seen.setdefault(package, {}).setdefault(str(version) if version else "not installed", []).append(
                stage.stage
            )
    rows = []
    for package, versions in seen.items():
        if len(versions) == 1:
            rows.append([package, next(iter(versions)), "all stages"])
        else:
            for version, stages in versions.items():
                rows.append([package, version, ", ".join(stages)])
    return Table("Package versions", ["Package", "Version", "Stages"], rows)


def benchmark_table(tree: ResultsTree) -> Table:
    rows = []
    frame = tree.benchmarks
    for rec in frame.to_dict("records"):
        seconds = rec["seconds"]
        hms = (
            f"{int(seconds // 3600)}:{int(seconds % 3600 // 60):02d}:{seconds % 60:05.2f}"
            if pd.notna(seconds)
            else NA
        )
        rows.append(
            [
                rec["rule"],
                rec["wildcard"] or NA,
                num(seconds),
                hms,
                num(rec["max_rss_mb"]),
                str(rec["repeats"]),
            ]
        )
    if not frame.empty:
        rows.append(["total", NA, num(frame["seconds"].sum()), NA, NA, NA])
    caption = (
        "From Snakemake benchmark files (results/benchmarks/<rule>[_<wildcard>].tsv); mean over repeats."
    )
    return Table(
        "Wall time per rule",
        ["Rule", "Wildcard", "Seconds", "h:m:s", "Max RSS (MB)", "Repeats"],
        rows,
        caption,
    )


def key_value_table(title: str, summary: dict[str, Any] | None, limit: int = 40) -> Table:
    """Scalar facts from a stage summary (nested keys joined with '.'), for the data and base sections."""
    rows = []
    for key, value in flatten_config(summary or {}, ignore=("stage",)).items():
        if isinstance(value, list):
            if len(value) > 8 or any(isinstance(v, dict | list) for v in value):
                continue
            value = ", ".join(map(str, value))
        rows.append(
            [
                key,
                num(value) if isinstance(value, int | float) and not isinstance(value, bool) else str(value),
            ]
        )
    return Table(
        title,
        ["Key", "Value"],
        rows[:limit],
        caption=f"{len(rows) - limit} more keys in the summary" if len(rows) > limit else "",
    )


def keys_tables(trees: Sequence[ResultsTree]) -> list[Table]:
    rows = [list(r) for r in K.describe_keys()]
    tables = [
        Table("Metric keys the report reads (first match wins)", ["File", "Shown as", "Accepted keys"], rows)
    ]
    unused_rows = []
    for tree in trees:
        for file, names in tree.unused_keys.items():
            if names:
                unused_rows.append([tree.name, file, ", ".join(sorted(names))])
    if unused_rows:
        tables.append(Table("Logged keys the report does not show", ["Tree", "File", "Keys"], unused_rows))
    return tables
