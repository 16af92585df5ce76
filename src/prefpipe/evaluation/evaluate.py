"""What the eval_rewardbench stage does: score one reward model on every configured benchmark (see prefpipe.eval_rewardbench).

Each benchmark in `eval.benchmarks` (name -> source, format, sections, split; see config/config.yaml) writes
<out>/<name>/per_example.parquet and <out>/<name>/summary.json. <out>/summary.json holds every benchmark under
`benchmarks` plus a copy of the primary one's keys at the top level (`subsets`, `sections`, `overall`,
`calibration`, ...); the primary is the first configured benchmark (`benchmark_order`, which the settings layer
records because the stage's JSON config has sorted keys). <out>/per_example.parquet holds all benchmarks' rows
with a `benchmark` column. A benchmark's sections come from its own entry: `official`, `data`, its own map, or
automatically (official for RewardBench subsets, data.sections for the synthetic source, else none). RewardBench 2
rows are scored best-of-n (prefpipe.evaluation.rewardbench2). Settings: prefpipe.settings.evaluation.EvalSettings.
A model saved with its head as fine-tuned (before the head refit) has that head scored too, on the same backbone
features: `extra_heads.as_finetuned` in each pairwise benchmark's block (the ablation compares both).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import pandas as pd

from prefpipe.common.config import ConfigError
from prefpipe.common.io import atomic_write_json, read_jsonl
from prefpipe.common.run_record import RunRecord
from prefpipe.common.secrets import redact_values
from prefpipe.common.torch_runtime.seeding import seed_everything
from prefpipe.data.normalize import benchmark_prompt_overlap, check_overlap
from prefpipe.evaluation.bench_data import (
    DATA_STAGE_SOURCES,
    REWARDBENCH2,
    SYNTHETIC,
    detect_format,
    load_benchmark,
    load_rewardbench2,
    resolve_split,
)
from prefpipe.evaluation.benchmark import (
    TIMING_KEYS,
    evaluate_rewardbench2,
    evaluate_rows,
    write_parquet_atomic,
)
from prefpipe.evaluation.pair_scoring import PairScorer
from prefpipe.evaluation.sections import (
    DATA_MAP,
    OFFICIAL_MAP,
    SectionTable,
    benchmark_table,
    is_rewardbench_subset,
)
from prefpipe.evaluation.summary_keys import AS_FINETUNED, BENCHMARKS, PRIMARY_BENCHMARK, PROMPT_OVERLAP
from prefpipe.settings.build import to_mapping
from prefpipe.settings.evaluation import BenchmarkSettings, EvalSettings

log = logging.getLogger("prefpipe.eval_rewardbench")


def run(settings: EvalSettings, args: argparse.Namespace) -> dict[str, Any]:
    """Load the reward model in --model and evaluate it on every configured benchmark."""
    import torch

    from prefpipe.common.torch_runtime.device import resolve_device
    from prefpipe.reward.model import load_finetuned_head, load_reward_model

    seed_everything(settings.seed)
    if settings.torch_threads:
        torch.set_num_threads(settings.torch_threads)
    device = str(resolve_device(settings.eval.device, "eval.device"))
    model = load_reward_model(str(args.model), device=device, fast_paths=settings.fast_paths)
    finetuned = load_finetuned_head(args.model, model)  # the head before the refit (the ablation reads it)
    if finetuned is not None:
        model.extra_heads[AS_FINETUNED] = finetuned
    log.info(
        "loaded %s reward model (tau %.4g) from %s on %s", model.head_type, model.tau, args.model, device
    )
    return evaluate_model(model, settings, args.data, args.out, model_label=str(args.model), device=device)


def _score_benchmark(
    model: PairScorer,
    settings: EvalSettings,
    name: str,
    benchmark: tuple[list[dict], dict[str, Any], str, SectionTable | None],
    device: str,
) -> tuple[pd.DataFrame, dict[str, Any], dict[str, Any]]:
    """(per-example frame, summary, timing) of one benchmark."""
    rows, load_report, fmt, table = benchmark
    bench_settings = settings.eval
    log.info("benchmark %s (%s): %d rows from %s", name, fmt, len(rows), load_report["source"])
    scorer = evaluate_rewardbench2 if fmt == REWARDBENCH2 else evaluate_rows
    frame, summary = scorer(
        model,
        rows,
        table,
        batch_size=bench_settings.batch_size,
        n_bins=bench_settings.calibration_bins,
        coverages=bench_settings.selective_coverages,
        mc_samples=bench_settings.mc_samples,
        seed=settings.seed,
        length_resamples=bench_settings.length_bootstrap_resamples,
        uncertainty=bench_settings.uncertainty,
    )
    summary = {"benchmark": name, "format": fmt, "data": load_report, "device": device, **summary}
    timing = {key: summary.pop(key, None) for key in TIMING_KEYS}
    log.info(
        "benchmark %s: overall %s, ECE %.4f, %.1f pairs/s",
        name,
        summary["overall"],
        summary["calibration"]["ece"],
        timing["pairs_per_second"] or 0.0,
    )
    return frame, summary, timing


def evaluate_model(
    model: PairScorer,
    settings: EvalSettings,
    data_dir: str | Path,
    out_dir: str | Path,
    model_label: str,
    device: str,
) -> dict[str, Any]:
    """Evaluate an already loaded model (any object with the reward-model API); write and return summaries."""
    benchmarks = settings.eval.benchmarks
    out_dir = Path(out_dir)
    order = list(settings.benchmark_order)
    if sorted(order) != sorted(benchmarks):
        raise ConfigError(
            f"benchmark_order {order} does not name the benchmarks of eval.benchmarks ({sorted(benchmarks)})"
        )
    # Read and check every benchmark before scoring any, so bad data fails fast.
    loaded = {name: _load(name, benchmarks[name], settings, data_dir) for name in order}
    record = RunRecord(out_dir, "eval_rewardbench", to_mapping(settings))
    per_benchmark: dict[str, dict[str, Any]] = {}
    timing: dict[str, dict[str, Any]] = {}  # speed figures: timing.json, so summaries are reproducible bytes
    frames = []
    for name, benchmark in loaded.items():
        frame, summary, timing[name] = _score_benchmark(model, settings, name, benchmark, device)
        write_parquet_atomic(frame, out_dir / name / "per_example.parquet")
        atomic_write_json(out_dir / name / "summary.json", redact_values(summary))
        frames.append(frame.assign(benchmark=name))
        per_benchmark[name] = summary
        record.log(
            benchmark=name,
            n_pairs=summary["n_pairs"],
            overall=summary["overall"],
            ece=summary["calibration"]["ece"],
            pairs_per_second=timing[name]["pairs_per_second"],
        )
    write_parquet_atomic(pd.concat(frames, ignore_index=True), out_dir / "per_example.parquet")
    primary = order[0]
    top = {
        **per_benchmark[primary],
        PRIMARY_BENCHMARK: primary,
        "model": model_label,
        BENCHMARKS: per_benchmark,
    }
    record.finish(top, timing={"benchmarks": timing})
    return top


def _check_training_overlap(
    name: str,
    bench: BenchmarkSettings,
    rows: list[dict],
    report: dict,
    settings: EvalSettings,
    data_dir: str | Path,
) -> None:
    """Prompt overlap between the training pairs and this benchmark, exact and normalised, each way
    (`prompt_overlap`, prefpipe.data.normalize.benchmark_prompt_overlap), for every benchmark. A benchmark from
    outside the data stage whose prompts repeat training prompts (normalised text) scores the model on what it
    was trained on: refused above data.max_overlap_share. The data stage's own test pairs are judged by
    prep_data; without a pairs_train.jsonl nothing is known."""
    train_file = Path(data_dir) / "pairs_train.jsonl"
    if not train_file.is_file():
        return
    report[PROMPT_OVERLAP] = benchmark_prompt_overlap(read_jsonl(train_file), rows)
    if bench.source in DATA_STAGE_SOURCES:
        return
    report["train_prompt_overlap"] = report[PROMPT_OVERLAP]["benchmark_rows_normalised"]
    where = f"eval.benchmarks.{name} ({bench.source})"
    check_overlap(
        report["train_prompt_overlap"], len(rows), settings.data.max_overlap_share, "benchmark prompts", where
    )


def _load(
    name: str, bench: BenchmarkSettings, settings: EvalSettings, data_dir: str | Path
) -> tuple[list[dict], dict[str, Any], str, SectionTable | None]:
    """One benchmark's rows, load report, format and section table (None for RewardBench 2)."""
    split = resolve_split(bench.source, bench.split, settings.eval.split)
    fmt = detect_format(name, bench.source, bench.format, split)
    if fmt == REWARDBENCH2:
        rows, report = load_rewardbench2(name, bench.source, split, settings.data.bad_rows)
        _check_training_overlap(name, bench, rows, report, settings, data_dir)
        return rows, report, fmt, None
    rows, report = load_benchmark(name, bench.source, data_dir, split, settings.data.bad_rows)
    _check_training_overlap(name, bench, rows, report, settings, data_dir)
    sections = bench.sections
    if sections is None:  # automatic
        if bench.source == SYNTHETIC:
            sections = DATA_MAP
        elif any(is_rewardbench_subset(row["subset"]) for row in rows):
            sections = OFFICIAL_MAP
        else:
            sections = {}
    report["sections_map"] = sections if isinstance(sections, str) else ("own" if sections else "none")
    table = benchmark_table(
        sections,
        settings.data.sections,
        settings.data.cyclic_subsets,
        xstest_weights=settings.eval.xstest_weights,
        where=f"eval.benchmarks.{name}",
    )
    return rows, report, fmt, table
