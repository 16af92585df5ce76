"""Which subset belongs to which section, and how much it weighs there.

RewardBench reports a section as the count-weighted mean of its subsets' accuracies. The weights follow the
official harness (allenai/reward-bench, rewardbench/constants.py `EXAMPLE_COUNTS`, as released in rewardbench
0.1.4): each subset weighs its example count, except math-prm, which weighs 984 although it has 447 rows, so
math counts as much as the six code subsets (6 x 164). Safety's xstest subsets weigh their row counts,
xstest-should-refuse 154 / xstest-should-respond 250 (`eval.xstest_weights: official`). Until September 2024
the harness had these two swapped (250 / 154; reward-bench commit 6552e93 "Mirror change from leaderboard"
fixed it), and leaderboard numbers from before then used the swap: `pre2024_code` reproduces them.
tests/faults/test_rewardbench_weights.py checks every weight and the section map against the package.

Subsets that are not official RewardBench subsets (e.g. the synthetic world's) get their section from the
config (`data.sections`) and weigh their row count. Prior preference sets form the old leaderboard's
"Prior Sets" section, which was the plain mean of four sets (each weighs 1).

Which official subsets a benchmark "should" hold: RewardBench's subsets come from a few source datasets
(`OFFICIAL_ORIGINS`: AlpacaEval, MT-Bench, LLMBar, XSTest, ...). A benchmark that holds one subset of a source is
expected to hold all of that source's subsets (a missing one makes its section "partial"), but a source it holds
nothing of is simply not in it: a file rebuilt from LLMBar and XSTest is not "partial" for lacking MT-Bench, and
Chat / Reasoning are not "missing" from it. Such subsets are listed per section as `absent_subsets` (and whole
sections as `sections_not_in_benchmark`), for information, never as a flag.

Each `eval.benchmarks` entry picks its own map (`benchmark_table`): `official` (the built-in map and weights),
`data` (data.sections beside the official map, for the synthetic world), a section -> subsets map of its own
(row-count weights), or none (`{}`: no sections, the overall is the pooled accuracy).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prefpipe.common.config import ConfigError
from prefpipe.settings.sections import subset_sections

CORE_SECTIONS = ("chat", "chat_hard", "safety", "reasoning")
PRIOR_SECTION = "prior_sets"
SECTION_TITLES = {
    "chat": "Chat",
    "chat_hard": "Chat Hard",
    "safety": "Safety",
    "reasoning": "Reasoning",
    PRIOR_SECTION: "Prior Sets",
}

# Official subsets and weights (example counts; math-prm upweighted to 984). xstest weights are filled in
# by `official_weights` according to the chosen convention.
_OFFICIAL: dict[str, dict[str, int]] = {
    "chat": {
        "alpacaeval-easy": 100,
        "alpacaeval-length": 95,
        "alpacaeval-hard": 95,
        "mt-bench-easy": 28,
        "mt-bench-med": 40,
    },
    "chat_hard": {
        "mt-bench-hard": 37,
        "llmbar-natural": 100,
        "llmbar-adver-neighbor": 134,
        "llmbar-adver-GPTInst": 92,
        "llmbar-adver-GPTOut": 47,
        "llmbar-adver-manual": 46,
    },
    "safety": {
        "refusals-dangerous": 100,
        "refusals-offensive": 100,
        "xstest-should-refuse": 0,
        "xstest-should-respond": 0,
        "donotanswer": 136,
    },
    "reasoning": {
        "math-prm": 984,
        "hep-cpp": 164,
        "hep-go": 164,
        "hep-java": 164,
        "hep-js": 164,
        "hep-python": 164,
        "hep-rust": 164,
    },
}
XSTEST_WEIGHTS = {
    "official": {"xstest-should-refuse": 154, "xstest-should-respond": 250},  # the harness since Sept 2024
    "pre2024_code": {"xstest-should-refuse": 250, "xstest-should-respond": 154},  # the harness before it
}
# The source datasets of the official subsets (a subset belongs to the first name it equals or starts with + "-").
OFFICIAL_ORIGINS = (
    "alpacaeval",
    "mt-bench",
    "llmbar",
    "refusals",
    "xstest",
    "donotanswer",
    "math-prm",
    "hep",
)
OFFICIAL_MAP = "official"
DATA_MAP = "data"
# The four prior sets the old leaderboard averaged (plain mean, so each weighs 1).
PRIOR_SETS = ("anthropic_helpful", "anthropic_hhh", "shp", "summarize")
# Old leaderboard overall: sections weighted 2,2,2,2 and Prior Sets 1 (i.e. prior sets at half weight).
LEADERBOARD_V1_WEIGHTS = {"chat": 2.0, "chat_hard": 2.0, "safety": 2.0, "reasoning": 2.0, PRIOR_SECTION: 1.0}


def official_weights(xstest_weights: str) -> dict[str, dict[str, float]]:
    """Section -> {subset: weight} for RewardBench proper, with the chosen xstest convention."""
    if xstest_weights not in XSTEST_WEIGHTS:
        raise ConfigError(
            f"eval.xstest_weights must be one of {sorted(XSTEST_WEIGHTS)}, got {xstest_weights!r}"
        )
    table = {section: {k: float(v) for k, v in subsets.items()} for section, subsets in _OFFICIAL.items()}
    table["safety"].update({k: float(v) for k, v in XSTEST_WEIGHTS[xstest_weights].items()})
    return table


@dataclass(frozen=True)
class SectionTable:
    """Subset -> section map plus fixed weights, grouped in families that are "in play" only when present.

    A family (RewardBench proper, prior sets, the config's own subsets) counts as expected in a benchmark only
    when at least one of its subsets is present; then its absent subsets are reported as missing.
    """

    families: Mapping[str, Mapping[str, tuple[str, ...]]]  # family -> section -> subsets
    fixed_weights: Mapping[str, float]  # subset -> weight; subsets not listed weigh their row count
    cyclic: frozenset[str]

    @property
    def has_sections(self) -> bool:
        return any(sections for sections in self.families.values())

    def all_sections(self) -> dict[str, list[str]]:
        """Every section of the map with every subset it can hold, in play or not."""
        merged: dict[str, list[str]] = {}
        for sections in self.families.values():
            for section, subsets in sections.items():
                bucket = merged.setdefault(section, [])
                bucket.extend(s for s in subsets if s not in bucket)
        return merged

    def section_of(self, subset: str) -> str | None:
        for sections in self.families.values():
            for section, subsets in sections.items():
                if subset in subsets:
                    return section
        return None

    def weight(self, subset: str, n_rows: int) -> float:
        return float(self.fixed_weights.get(subset, n_rows))

    def expected(self, present: Iterable[str]) -> dict[str, list[str]]:
        """Sections to report for a benchmark with these subsets, each with the subsets it should contain."""
        present = set(present)
        expected: dict[str, list[str]] = {}
        for sections in self.families.values():
            family_subsets = {s for subsets in sections.values() for s in subsets}
            if not family_subsets & present:
                continue
            for section, subsets in sections.items():
                bucket = expected.setdefault(section, [])
                bucket.extend(s for s in subsets if s not in bucket)
        return expected


def build_section_table(
    config_sections: Mapping[str, Iterable[str]] | None = None,
    cyclic_subsets: Iterable[str] | None = None,
    *,
    xstest_weights: str,
) -> SectionTable:
    """Combine the official table with the config's `data.sections` / `data.cyclic_subsets`.

    Raises ConfigError when the config puts a subset in two sections, moves an official subset to another
    section, or lists a cyclic subset inside a section (cyclic sets are reported on their own).
    """
    official = official_weights(xstest_weights)
    official_section = {s: sec for sec, subsets in official.items() for s in subsets}
    prior_weights = {s: 1.0 for s in PRIOR_SETS}
    cyclic = frozenset(cyclic_subsets or ())

    config_map: dict[str, tuple[str, ...]] = {}
    for section, subsets in (config_sections or {}).items():
        if isinstance(subsets, str) or not isinstance(subsets, Iterable):
            raise ConfigError(f"data.sections.{section} must be a list of subset names, got {subsets!r}")
        config_map[section] = tuple(subsets)
    subset_sections(config_map, "data.sections")  # a subset under two sections
    for section, subsets in config_map.items():
        for subset in subsets:
            if subset in official_section and official_section[subset] != section:
                raise ConfigError(
                    f"data.sections.{section}: {subset!r} is an official RewardBench subset of section "
                    f"{official_section[subset]!r}"
                )
            if subset in prior_weights and section != PRIOR_SECTION:
                raise ConfigError(
                    f"data.sections.{section}: {subset!r} is a prior set (section {PRIOR_SECTION!r})"
                )
            if subset in cyclic:
                raise ConfigError(f"data.sections.{section}: {subset!r} is also in data.cyclic_subsets")

    families = {
        **_official_families(official),
        "prior_sets": {PRIOR_SECTION: PRIOR_SETS},
        "config": config_map,
    }
    fixed = {s: w for subsets in official.values() for s, w in subsets.items()} | prior_weights
    return SectionTable(families=families, fixed_weights=fixed, cyclic=cyclic)


def official_origin(subset: str) -> str:
    """The source dataset of an official subset (see OFFICIAL_ORIGINS); the subset itself if none matches."""
    for origin in OFFICIAL_ORIGINS:
        if subset == origin or subset.startswith(origin + "-"):
            return origin
    return subset


def _official_families(official: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, tuple[str, ...]]]:
    """One family per source dataset ("rewardbench:<origin>"), each in play only when one of its subsets is."""
    families: dict[str, dict[str, tuple[str, ...]]] = {}
    for section, subsets in official.items():
        for subset in subsets:
            family = families.setdefault(f"rewardbench:{official_origin(subset)}", {})
            family[section] = (*family.get(section, ()), subset)
    return families


def custom_section_table(sections: Mapping[str, Iterable[str]], where: str) -> SectionTable:
    """A benchmark's own section -> subsets map (row-count weights, no cyclic sets); `{}` means no sections."""
    subset_sections(sections, f"{where}.sections")  # a subset under two sections
    families = {"benchmark": {sec: tuple(subsets) for sec, subsets in sections.items()}} if sections else {}
    return SectionTable(families=families, fixed_weights={}, cyclic=frozenset())


def is_rewardbench_subset(subset: str) -> bool:
    """An official RewardBench subset or one of its prior sets."""
    return subset in PRIOR_SETS or any(subset in subsets for subsets in _OFFICIAL.values())


def benchmark_table(
    sections: Mapping[str, Iterable[str]] | str,
    data_sections: Mapping[str, Iterable[str]],
    cyclic_subsets: Iterable[str],
    *,
    xstest_weights: str,
    where: str,
) -> SectionTable:
    """The section table of one benchmark: `official`, `data` (data.sections + the official map, cyclic sets
    apart) or the benchmark's own map (`{}`: no sections). Automatic choice happens before (evaluate.py)."""
    if sections == OFFICIAL_MAP:
        return build_section_table(None, None, xstest_weights=xstest_weights)
    if sections == DATA_MAP:
        return build_section_table(data_sections, cyclic_subsets, xstest_weights=xstest_weights)
    if isinstance(sections, str):
        raise ConfigError(f"{where}.sections must be official, data, null or a map, got {sections!r}")
    return custom_section_table(sections, where)
