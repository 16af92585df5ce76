"""Stage: evaluate a trained reward model on one or more RewardBench-style benchmarks.

    python -m prefpipe.eval_rewardbench --config '<json>' --model results/reward/<variant>/model \
        --data results/data --out results/eval/<variant>

Each benchmark in `eval.benchmarks` (name -> `synthetic`, a local file or a hub id) writes
<out>/<name>/per_example.parquet and <out>/<name>/summary.json. <out>/summary.json holds every benchmark under
`benchmarks` plus a copy of the primary one's keys at the top level (`subsets`, `sections`, `overall`,
`calibration`, ...); the primary is `synthetic` when configured, else the first benchmark (the workflow passes
the config as JSON with sorted keys, so an order written in YAML does not survive). <out>/per_example.parquet
holds all benchmarks' rows with a `benchmark` column. The eval settings are read from `cfg["eval"]`.
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from prefpipe.common.config import ConfigError, deep_merge, load_config_arg
from prefpipe.common.io import atomic_write_json
from prefpipe.common.logs import setup_logging
from prefpipe.common.run_record import RunRecord
from prefpipe.common.seeding import seed_everything
from prefpipe.evaluation.bench_data import SYNTHETIC, load_benchmark
from prefpipe.evaluation.benchmark import evaluate_rows, write_parquet_atomic
from prefpipe.evaluation.calibration import DEFAULT_COVERAGES
from prefpipe.evaluation.pair_scoring import PairScorer
from prefpipe.evaluation.sections import XSTEST_WEIGHTS, build_section_table

log = logging.getLogger("prefpipe.eval_rewardbench")

EVAL_DEFAULTS: dict[str, Any] = {
    "benchmarks": {"synthetic": "synthetic"},
    "split": "filtered",
    "batch_size": 16,
    "device": "cpu",
    "xstest_weights": "official_code",
    "calibration_bins": 10,
    "selective_coverages": list(DEFAULT_COVERAGES),
    "mc_samples": 10000,
}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


def resolve_eval_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """`eval` section over its defaults, validated; errors name the key."""
    stray = sorted(set(cfg) & set(EVAL_DEFAULTS))
    if stray:  # a flat config would otherwise be ignored silently and every default used
        raise ConfigError(
            f"eval settings {stray} are at the top level of the stage config; put them under 'eval'"
        )
    unknown = sorted(set(cfg.get("eval") or {}) - set(EVAL_DEFAULTS))
    if unknown:
        raise ConfigError(f"eval: unknown keys {unknown}; known: {sorted(EVAL_DEFAULTS)}")
    ecfg = deep_merge(EVAL_DEFAULTS, dict(cfg.get("eval") or {}))
    if "benchmarks" in (cfg.get("eval") or {}):  # a given mapping replaces the default one, never merges
        ecfg["benchmarks"] = cfg["eval"]["benchmarks"]
    benchmarks = ecfg["benchmarks"]
    if not isinstance(benchmarks, Mapping) or not benchmarks:
        raise ConfigError("eval.benchmarks must be a non-empty mapping of name -> source")
    for name, source in benchmarks.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(
                f"eval.benchmarks: name {name!r} must match {_NAME.pattern} (it becomes a folder)"
            )
        if not isinstance(source, str) or not source:
            raise ConfigError(f"eval.benchmarks.{name}: source must be 'synthetic', a path or a hub id")
    for key in ("batch_size", "calibration_bins"):
        if not isinstance(ecfg[key], int) or isinstance(ecfg[key], bool) or ecfg[key] < 1:
            raise ConfigError(f"eval.{key} must be an integer >= 1, got {ecfg[key]!r}")
    if not isinstance(ecfg["mc_samples"], int) or ecfg["mc_samples"] < 0:
        raise ConfigError(f"eval.mc_samples must be an integer >= 0, got {ecfg['mc_samples']!r}")
    coverages = ecfg["selective_coverages"]
    if (
        not isinstance(coverages, list)
        or not coverages
        or not all(isinstance(c, int | float) and 0 < c <= 1 for c in coverages)
    ):
        raise ConfigError(f"eval.selective_coverages must be a list of numbers in (0, 1], got {coverages!r}")
    if ecfg["xstest_weights"] not in XSTEST_WEIGHTS:
        raise ConfigError(f"eval.xstest_weights must be one of {sorted(XSTEST_WEIGHTS)}")
    if ecfg["device"] not in {"cpu", "cuda", "auto"}:
        raise ConfigError(f"eval.device must be cpu, cuda or auto, got {ecfg['device']!r}")
    return ecfg


def _device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("eval.device is 'cuda' but no CUDA device is available")
    return name


def run(
    cfg: dict[str, Any], model_dir: str | Path, data_dir: str | Path, out_dir: str | Path
) -> dict[str, Any]:
    """Load the reward model in `model_dir` and evaluate it on every configured benchmark."""
    import torch

    from prefpipe.reward.model import load_reward_model

    ecfg = resolve_eval_config(cfg)  # fail on a bad config before loading anything
    seed_everything(int(cfg.get("seed", 0)))
    if int(cfg.get("torch_threads", 0) or 0) > 0:
        torch.set_num_threads(int(cfg["torch_threads"]))
    device = _device(ecfg["device"])
    model = load_reward_model(str(model_dir), device=device)
    log.info("loaded %s reward model (tau %.4g) from %s on %s", model.head_type, model.tau, model_dir, device)
    return evaluate_model(model, cfg, data_dir, out_dir, model_label=str(model_dir), device=device)


def evaluate_model(
    model: PairScorer,
    cfg: dict[str, Any],
    data_dir: str | Path,
    out_dir: str | Path,
    model_label: str = "",
    device: str = "cpu",
) -> dict[str, Any]:
    """Evaluate an already loaded model (any object with the reward-model API); write and return summaries."""
    ecfg = resolve_eval_config(cfg)
    data_cfg = cfg.get("data") or {}
    table = build_section_table(
        data_cfg.get("sections"), data_cfg.get("cyclic_subsets"), ecfg["xstest_weights"]
    )
    seed = int(cfg.get("seed", 0))
    out_dir = Path(out_dir)
    # Read and check every benchmark before scoring any, so bad data fails fast.
    loaded = {
        name: load_benchmark(name, source, data_dir, ecfg["split"], data_cfg.get("bad_rows", "drop"))
        for name, source in ecfg["benchmarks"].items()
    }
    record = RunRecord(out_dir, "eval_rewardbench", cfg)

    per_benchmark: dict[str, dict[str, Any]] = {}
    frames = []
    for name, (rows, load_report) in loaded.items():
        log.info("benchmark %s: %d pairs from %s", name, len(rows), load_report["source"])
        frame, summary = evaluate_rows(
            model,
            rows,
            table,
            batch_size=ecfg["batch_size"],
            n_bins=ecfg["calibration_bins"],
            coverages=ecfg["selective_coverages"],
            mc_samples=ecfg["mc_samples"],
            seed=seed,
        )
        summary = {"benchmark": name, "data": load_report, "device": device, **summary}
        write_parquet_atomic(frame, out_dir / name / "per_example.parquet")
        atomic_write_json(out_dir / name / "summary.json", summary)
        frames.append(frame.assign(benchmark=name))
        per_benchmark[name] = summary
        record.log(
            benchmark=name,
            n_pairs=summary["n_pairs"],
            overall=summary["overall"],
            ece=summary["calibration"]["ece"],
            pairs_per_second=summary["pairs_per_second"],
        )
        log.info(
            "benchmark %s: overall %s, ECE %.4f, %.1f pairs/s",
            name,
            summary["overall"],
            summary["calibration"]["ece"],
            summary["pairs_per_second"] or 0.0,
        )

    write_parquet_atomic(pd.concat(frames, ignore_index=True), out_dir / "per_example.parquet")
    primary = SYNTHETIC if SYNTHETIC in per_benchmark else next(iter(per_benchmark))
    top = {
        **per_benchmark[primary],
        "primary_benchmark": primary,
        "model": model_label,
        "benchmarks": per_benchmark,
    }
    record.finish(top)
    return top


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", required=True, help="resolved config: inline JSON or a .json/.yaml path")
    parser.add_argument("--model", required=True, help="reward model folder (prefpipe.reward.model format)")
    parser.add_argument("--data", required=True, help="prep_data output folder (holds pairs_test.jsonl)")
    parser.add_argument("--out", required=True, help="output folder, e.g. results/eval/<variant>")
    args = parser.parse_args(argv)
    setup_logging()
    run(load_config_arg(args.config), args.model, args.data, args.out)


if __name__ == "__main__":
    main()
