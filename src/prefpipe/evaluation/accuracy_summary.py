"""Subset, section and overall scores from per-pair decisions.

A pair is correct when s(chosen > rejected) > 0; a tie (s == 0) is wrong, as in RewardBench. A section is the
weighted mean of the accuracies of its subsets that are present (weights from `SectionTable`); a section with
none present is null, never 0. Standard errors treat each subset accuracy as an independent binomial mean, so
they describe sampling noise of the benchmark itself, not model uncertainty.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from prefpipe.evaluation.sections import (
    LEADERBOARD_V1_WEIGHTS,
    PRIOR_SECTION,
    SECTION_TITLES,
    SectionTable,
)

OVERALL_DEFINITION = (
    "plain (unweighted) mean of the non-null sections other than prior_sets; each section is the "
    "weighted mean of its present subsets' accuracies (official RewardBench example-count weights, math-prm 984; "
    "row counts for other subsets)"
)
POOLED_DEFINITION = "pooled accuracy over all pairs (this benchmark has no sections)"
LEADERBOARD_V1_DEFINITION = (
    "old RewardBench leaderboard score: weighted mean of the non-null sections with weights chat 2, chat_hard 2, "
    "safety 2, reasoning 2, prior_sets 1; only reported when a prior set is present"
)


# Keys of eval/<variant>/summary.json the report reads (a benchmark's block; the top level repeats the primary's).
SUBSETS, SECTIONS, SCORE, STDERR, N = "subsets", "sections", "score", "stderr", "n"
OVERALL, OVERALL_STDERR, CYCLIC, ACCURACY = "overall", "overall_stderr", "cyclic", "accuracy"


def is_correct(score: float) -> bool:
    """RewardBench decision rule: strictly positive s(chosen > rejected); ties and NaN are wrong."""
    return bool(score > 0)


def subset_stats(subsets: Sequence[str], correct: Sequence[bool]) -> dict[str, dict[str, Any]]:
    """{subset: {accuracy, n, n_correct, stderr}} in first-seen order."""
    if len(subsets) != len(correct):
        raise ValueError(f"subset_stats: {len(subsets)} subsets but {len(correct)} decisions")
    counts: dict[str, list[int]] = {}
    for subset, ok in zip(subsets, correct, strict=True):
        bucket = counts.setdefault(subset, [0, 0])
        bucket[0] += int(bool(ok))
        bucket[1] += 1
    return {subset: subset_entry(n_correct, n) for subset, (n_correct, n) in counts.items()}


def subset_entry(n_correct: float, n: int) -> dict[str, Any]:
    """One subset's {accuracy, n, n_correct, stderr}: the stderr is the binomial sqrt(acc (1 - acc) / n).
    `n_correct` is a sum of credits, fractional where RewardBench 2 gives tie credit (a credit in [0, 1] has
    at most the binomial variance of its mean, so the stderr is then an upper bound)."""
    acc = n_correct / n
    return {"accuracy": acc, "n": n, "n_correct": n_correct, "stderr": math.sqrt(acc * (1 - acc) / n)}


def section_scores(
    stats: Mapping[str, Mapping[str, Any]], table: SectionTable
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Score every section in play; return (sections, unassigned subsets that belong to no section)."""
    present = [s for s in stats if s not in table.cyclic]
    expected = table.expected(present)
    whole_map = table.all_sections()
    sections: dict[str, dict[str, Any]] = {}
    assigned: set[str] = set()
    for section, subsets in expected.items():
        here = [s for s in subsets if s in stats]
        assigned.update(here)
        weights = {s: table.weight(s, stats[s]["n"]) for s in here}
        total = sum(weights.values())
        if here and total > 0:
            score = sum(weights[s] * stats[s]["accuracy"] for s in here) / total
            var = sum((weights[s] / total) ** 2 * stats[s]["stderr"] ** 2 for s in here)
            stderr: float | None = math.sqrt(var)
        else:
            score, stderr = None, None
        missing = [s for s in subsets if s not in stats]
        sections[section] = {
            "title": SECTION_TITLES.get(section, section),
            SCORE: score,
            STDERR: stderr,
            "n": sum(stats[s]["n"] for s in here),
            "partial": bool(missing),
            "missing_subsets": missing,  # expected here (their source is in the benchmark) but absent
            "subsets": here,
            # in the section's map, but from a source this benchmark holds nothing of: information, not a flag
            "absent_subsets": [s for s in whole_map.get(section, []) if s not in subsets],
            "weights": weights,
        }
    unassigned = [s for s in present if s not in assigned]
    return sections, unassigned


def overall_score(sections: Mapping[str, Mapping[str, Any]]) -> tuple[float | None, float | None]:
    """Plain mean of the non-null sections except prior_sets, with its binomial standard error."""
    used = [v for k, v in sections.items() if k != PRIOR_SECTION and v["score"] is not None]
    if not used:
        return None, None
    mean = sum(v["score"] for v in used) / len(used)
    stderr = math.sqrt(sum(v["stderr"] ** 2 for v in used)) / len(used)
    return mean, stderr


def leaderboard_v1_score(sections: Mapping[str, Mapping[str, Any]]) -> float | None:
    """Old leaderboard weighting (2,2,2,2 + Prior Sets 1); None unless prior sets are present."""
    prior = sections.get(PRIOR_SECTION)
    if prior is None or prior["score"] is None:
        return None
    used = {
        k: v["score"] for k, v in sections.items() if k in LEADERBOARD_V1_WEIGHTS and v["score"] is not None
    }
    total = sum(LEADERBOARD_V1_WEIGHTS[k] for k in used)
    return sum(LEADERBOARD_V1_WEIGHTS[k] * s for k, s in used.items()) / total


def cyclic_summary(stats: Mapping[str, Mapping[str, Any]], table: SectionTable) -> dict[str, Any]:
    """Intransitive subsets on their own: per subset, pooled accuracy, and the subsets configured but absent."""
    here = {s: {"accuracy": stats[s]["accuracy"], "n": stats[s]["n"]} for s in stats if s in table.cyclic}
    n = sum(v["n"] for v in here.values())
    pooled = sum(stats[s]["n_correct"] for s in here) / n if n else None
    # Cyclic sets belong to the config's own world: only missing when that world is in the benchmark.
    config_subsets = {s for subsets in table.families.get("config", {}).values() for s in subsets}
    in_play = bool((config_subsets | table.cyclic) & set(stats))
    missing = sorted(table.cyclic - set(here)) if in_play else []
    return {SUBSETS: here, ACCURACY: pooled, N: n, "missing_subsets": missing}


def summarize_scores(subsets: Sequence[str], correct: Sequence[bool], table: SectionTable) -> dict[str, Any]:
    """Everything a summary needs about accuracy: subsets, sections, overall (both definitions), cyclic.

    A benchmark without sections (its map is empty, e.g. an HH-style test file) has the pooled accuracy as its
    overall, and its subsets are not "unassigned"."""
    stats = subset_stats(subsets, correct)
    sections, unassigned = section_scores(stats, table)
    overall, overall_stderr = overall_score(sections)
    definition = OVERALL_DEFINITION
    pooled = sum(bool(c) for c in correct) / len(correct) if len(correct) else None
    if not table.has_sections:
        overall, definition, unassigned = pooled, POOLED_DEFINITION, []
        overall_stderr = math.sqrt(pooled * (1 - pooled) / len(correct)) if pooled is not None else None
    # Sections in play with no subset present: null scores, listed so a partial overall is visible.
    missing_sections = [k for k, v in sections.items() if v["score"] is None]
    return {
        "subsets": {
            s: {**v, "section": table.section_of(s), "weight": table.weight(s, v["n"])}
            for s, v in stats.items()
        },
        SECTIONS: sections,
        "pooled_accuracy": pooled,
        OVERALL: overall,
        OVERALL_STDERR: overall_stderr,
        "overall_definition": definition,
        "overall_sections": [k for k, v in sections.items() if k != PRIOR_SECTION and v["score"] is not None],
        "missing_sections": missing_sections,
        "sections_not_in_benchmark": [k for k in table.all_sections() if k not in sections],
        "overall_leaderboard_v1": leaderboard_v1_score(sections),
        "overall_leaderboard_v1_definition": LEADERBOARD_V1_DEFINITION,
        CYCLIC: cyclic_summary(stats, table),
        "unassigned_subsets": unassigned,
    }
