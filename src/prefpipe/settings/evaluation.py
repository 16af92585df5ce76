"""Stage 3b settings (`eval`): RewardBench-style scoring of each reward variant."""

from __future__ import annotations

from dataclasses import dataclass

from prefpipe.settings.run import RunSettings


@dataclass
class RewardBenchSettings:
    benchmarks: dict[str, str]  # name -> `synthetic`, a local file or a hub id
    split: str
    batch_size: int
    device: str  # cpu | cuda | auto
    xstest_weights: str
    calibration_bins: int
    selective_coverages: list[float]
    mc_samples: int


@dataclass
class SectionMapSettings:
    """The part of `data` the evaluation reads: how subsets form sections, and what to do with bad rows."""

    sections: dict[str, list[str]]
    cyclic_subsets: list[str]
    bad_rows: str


@dataclass
class EvalSettings(RunSettings):
    eval: RewardBenchSettings
    data: SectionMapSettings
