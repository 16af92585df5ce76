"""Stage 1 settings (`data`): where the preference pairs come from and how subsets map to sections."""

from __future__ import annotations

from dataclasses import dataclass

from prefpipe.settings.run import RunSettings


@dataclass
class SyntheticWorldSettings:
    pairs_per_subset_train: int
    pairs_per_subset_test: int
    cyclic_triples_train: int
    cyclic_triples_test: int
    demonstrations: int
    rl_prompts_train: int
    rl_prompts_heldout: int
    demo_error_rate: float
    kinds: list[str]


@dataclass
class ExternalSourceSettings:
    path: str | None
    split: str
    test_split: str | None
    format: str  # auto | rewardbench | hh | messages
    test_fraction: float
    subset_name: str
    max_rows: int | None
    cache_dir: str | None


@dataclass
class DataSettings(RunSettings):
    source: str  # synthetic | hf | jsonl | json | parquet
    bad_rows: str  # drop | error
    synthetic: SyntheticWorldSettings
    external: ExternalSourceSettings
    sections: dict[str, list[str]]
    cyclic_subsets: list[str]
