"""Settings of the eval_rewardbench rule (`eval`): RewardBench-style scoring of each reward variant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefpipe.settings import schema
from prefpipe.settings.run import RunSettings

# The benchmark source that means "the data stage's pairs_test.jsonl of the synthetic world"; it exists only when
# `data.source` is `synthetic` (PipelineSettings drops such a benchmark otherwise).
SYNTHETIC_SOURCE = "synthetic"


@dataclass
class BenchmarkSettings:
    """One `eval.benchmarks` entry (a plain source string in the config means `{source: <string>}`)."""

    source: str  # `synthetic`, a local .jsonl/.json/.parquet file or a hub id
    format: str  # auto | rewardbench (one chosen, one rejected per row) | rewardbench2 (lists of each)
    sections: dict[str, list[str]] | str | None  # section -> subsets | official | data | null = automatic
    split: str | None  # hub split; null = the known dataset's own split, else eval.split


@dataclass
class UncertaintyEvalSettings:
    """The bootstrap of each summary's uncertainty block (prefpipe.evaluation.uncertainty_block)."""

    resamples: int
    confidence: float  # two-sided interval level
    disagreement_at: float  # flip_rate at which a test pair counts as high-disagreement


@dataclass
class RewardBenchSettings:
    benchmarks: dict[str, BenchmarkSettings]  # name -> benchmark (names are free)
    split: str
    batch_size: int
    device: str  # cpu | cuda | auto
    xstest_weights: str
    calibration_bins: int
    selective_coverages: list[float]
    mc_samples: int
    length_bootstrap_resamples: int  # behind the length figures' 95% intervals (0 = none)
    uncertainty: UncertaintyEvalSettings
    ensembles: dict[str, list[str]]  # deep ensemble name -> its reward variants (the eval_ensemble rule)


@dataclass
class SectionMapSettings:
    """The part of `data` the evaluation reads: how subsets form sections, what to do with bad rows, and how
    many benchmark prompts may repeat training prompts."""

    sections: dict[str, list[str]]
    cyclic_subsets: list[str]
    bad_rows: str
    max_overlap_share: float


@dataclass
class EvalSettings(RunSettings):
    eval: RewardBenchSettings
    data: SectionMapSettings
    # eval.benchmarks' names in config order, the first being the primary (headline) benchmark. Derived by
    # PipelineSettings, not a config key: the stage's --config JSON has sorted keys, which loses that order.
    benchmark_order: list[str]

    @classmethod
    def validate_stage(cls, values: dict[str, Any], key: str) -> dict[str, Any]:
        """The stage's --config holds the whole `eval` section (and data's section map beside it): the section
        is checked against eval.schema.yaml, its plain benchmark strings first written as entries."""
        section = values.get("eval")
        if isinstance(section, dict):
            values = {
                **values,
                "eval": {**section, "benchmarks": benchmark_entries(section.get("benchmarks"))},
            }
        schema.validate(values.get("eval"), "eval.schema.yaml", f"{key}.eval")
        return values


def benchmark_entries(benchmarks: Any) -> Any:
    """`eval.benchmarks` with each plain source string written as `{source: <string>}` (other values as given,
    for the schema to judge), so the schema fills the entry's defaults."""
    if not isinstance(benchmarks, dict):
        return benchmarks
    return {name: {"source": v} if isinstance(v, str) else v for name, v in benchmarks.items()}
