"""Settings of the prep_data rule (`data`): where the preference pairs come from and how subsets map to sections."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from prefpipe.common.config import ConfigError
from prefpipe.settings.run import RunSettings

NO_VERIFIER = "none"  # data.prompts.verifier for prompts without answers (reward-model-only GRPO)
FILE_SOURCES = ("jsonl", "json", "parquet")
MULTIHOP = "multihop"  # data.prompts.source: the synthetic multi-hop world's questions (data.multihop)
WORLD_SOURCES = ("synthetic", MULTIHOP)  # prompt sources built here, not read from files or the hub


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
    demo_habit_kinds: list[str]
    demo_habit_rate: float
    kinds: list[str]
    # Opt-in uncertainty switches (prefpipe.data.synthetic_noise): subset -> share of its training labels
    # flipped, and the subsets with no training pairs (marked unfamiliar in the test pairs).
    label_noise: dict[str, float]
    unfamiliar_subsets: list[str]


@dataclass
class MultihopWorldSettings:
    """The synthetic multi-hop world (prefpipe.data.synthetic_multihop), read when prompts.source is multihop or
    a GRPO run trains on it (grpo.<run>.prompts: multihop)."""

    train: int  # RL training questions
    heldout: int  # held-out questions (their own companies and persons)
    demonstrations: int  # two-search episodes mixed into the base's SFT demonstrations
    distractors: int  # other questions' paragraphs in each question's corpus
    shortcut_rate: float  # share of demonstrations answering the founder after one search


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

    def check(self, source: str) -> None:
        """A non-synthetic `source` needs a path, and the test part must not be the training part (training
        and testing on the same rows would report a leaked score as a held-out one)."""
        if source == "synthetic":
            return
        if not self.path or not self.path.strip():
            raise ConfigError(f"external.path: data.source {source} needs a file, folder or hub id")
        if self.test_split is None:
            if self.test_fraction <= 0:
                raise ConfigError(
                    f"external.test_fraction: {self.test_fraction!r} with no test_split leaves no test pairs "
                    "(the held-out benchmark and the test accuracy need some); give a share in (0, 1) or a "
                    "test_split"
                )
            return
        if source == "hf":
            if self.test_split == self.split:
                raise ConfigError(
                    f"external.test_split and data.external.split are both {self.split!r}: the test pairs "
                    "would be the training pairs; name another split or set test_split: null (test_fraction)"
                )
        elif _same_file(self.test_split, self.path):
            raise ConfigError(
                f"external.test_split {self.test_split!r} is data.external.path {self.path!r}: the test "
                "pairs would be the training pairs; name another file or set test_split: null (test_fraction)"
            )


def _same_file(a: str, b: str) -> bool:
    return os.path.realpath(os.path.expanduser(a)) == os.path.realpath(os.path.expanduser(b))


@dataclass
class DemonstrationFileSettings:
    """Tool-use SFT demonstrations built from a file of multi-hop rows (prefpipe.data.multihop_demos)."""

    path: str | None  # null: none (the synthetic world's demonstrations, if base.sft trains)
    max_rows: int | None  # the first max_rows usable rows (null = all)
    max_result_chars: int  # results cut as the search environment's runner cuts them


@dataclass
class PromptSourceSettings:
    """Where GRPO's and the held-out evaluation's RL prompts come from (independent of the preference pairs)."""

    source: str  # synthetic | multihop (data.multihop's world) | jsonl | json | parquet | hf
    path: str | None  # training prompts: a file, a dataset folder or a hub id
    test_path: str | None  # held-out prompts: a second file (file sources)
    split: str  # hf: training split
    test_split: str  # hf: held-out split
    prompt_field: str
    answer_field: str | None  # null: prompts without answers (verifier none)
    aliases_field: str | None  # a list of accepted alternative answers
    paragraphs_field: str | None  # the row's candidate paragraphs (a multi-turn run's corpus: row)
    id_field: str | None  # null: ids from row numbers
    solution_field: str  # worked solutions with <<a op b=c>> annotations (derive: calculator_steps)
    verifier: str  # a registered verifier (prefpipe.data.verifier) every row is graded with; none: no answers
    instruction: str | None  # appended to every prompt
    derive: str | None  # null | calculator_steps
    max_train: int | None
    max_heldout: int | None
    demonstrations: DemonstrationFileSettings

    @property
    def has_answers(self) -> bool:
        return self.verifier != NO_VERIFIER

    def check(self) -> None:
        """What the schema cannot say; errors name the key (build_stage prefixes `data.`). Whether
        `verifier` is registered is the data layer's to say (prefpipe.data.verifier.check_verifier)."""
        self._check_demonstrations()
        if self.source in WORLD_SOURCES:
            return
        if not self.path:
            raise ConfigError(f"prompts.path: source {self.source} needs a file, folder or hub id")
        if self.source in FILE_SOURCES:
            if not self.test_path:
                raise ConfigError(
                    "prompts.test_path: file prompt sources need a held-out file (disjoint from prompts.path)"
                )
            if _same_file(self.path, self.test_path):
                raise ConfigError(
                    f"prompts.path and prompts.test_path are the same file ({self.path!r}): held-out "
                    "prompts must come from another file"
                )
        elif self.split == self.test_split:
            raise ConfigError(
                f"prompts.split and prompts.test_split are both {self.split!r}: held-out prompts need "
                "another split"
            )
        if self.has_answers and self.answer_field is None and self.derive is None:
            raise ConfigError(
                f"prompts.answer_field is null but prompts.verifier is {self.verifier!r}: name the answer "
                f"field, or set prompts.verifier: {NO_VERIFIER} for prompts without answers"
            )
        if self.derive is not None and not self.has_answers:
            raise ConfigError(
                f"prompts.derive {self.derive!r} gives answers: prompts.verifier cannot be none"
            )

    def _check_demonstrations(self) -> None:
        path = self.demonstrations.path
        if path is None:
            return
        if self.source not in FILE_SOURCES or self.paragraphs_field is None or self.answer_field is None:
            raise ConfigError(
                "prompts.demonstrations.path: demonstrations from a multi-hop file need a file prompt source "
                "(jsonl, json, parquet) with prompts.paragraphs_field and prompts.answer_field set"
            )
        if self.test_path and _same_file(path, self.test_path):
            raise ConfigError(
                f"prompts.demonstrations.path {path!r} is prompts.test_path: SFT on held-out rows"
            )


@dataclass
class DataSettings(RunSettings):
    stage_schema: ClassVar[str] = "data.schema.yaml"
    derived_keys: ClassVar[tuple[str, ...]] = ("demonstrations_needed", "multihop_alongside")

    source: str  # synthetic | hf | jsonl | json | parquet
    bad_rows: str  # drop | error
    max_overlap_share: float  # test pairs / held-out prompts repeating training ones: refused above this
    synthetic: SyntheticWorldSettings
    multihop: MultihopWorldSettings
    external: ExternalSourceSettings
    prompts: PromptSourceSettings
    sections: dict[str, list[str]]
    cyclic_subsets: list[str]
    # Derived by the settings layer, not a config key: base.sft.enabled (nothing else reads demonstrations).
    demonstrations_needed: bool
    # Derived: a GRPO run trains on the multi-hop world (grpo.<run>.prompts: multihop) while data.prompts is
    # another source, so prep_data writes the world's questions to results/data/multihop as well.
    multihop_alongside: bool

    @property
    def multihop_built(self) -> bool:
        """prep_data builds the multi-hop world: its questions are data.prompts, or a run's beside them."""
        return self.prompts.source == MULTIHOP or self.multihop_alongside

    def check(self) -> None:
        self.external.check(self.source)
        self.prompts.check()
        self._check_uncertainty_switches()

    def _check_uncertainty_switches(self) -> None:
        """The world switches act only on the synthetic world's pairs. That they name real subsets is the
        world's fact, checked by prefpipe.config_checks before any stage runs and by build_world again."""
        world = self.synthetic
        if not world.label_noise and not world.unfamiliar_subsets:
            return
        if self.source != "synthetic":
            raise ConfigError(
                f"synthetic.label_noise / unfamiliar_subsets act on the synthetic world's pairs, but data.source "
                f"is {self.source!r}; empty them or use source synthetic"
            )
