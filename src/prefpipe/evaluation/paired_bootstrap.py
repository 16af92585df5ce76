"""Paired bootstrap of benchmark scores: the same resampled pairs for two variants, the same score formula.

A score here is what the evaluation reports (accuracy_summary.summarize_scores): each section the weighted mean
of its subsets' accuracies, the overall the plain mean of the sections (or the pooled accuracy for a benchmark
without sections). Pairs are drawn with replacement *within each subset* (a stratified bootstrap): every
resample keeps each subset's row count, so a subset weighing its row count weighs the same in every resample
and the resampled statistic is exactly the reported one recomputed on other pairs. Each variant's decisions are
looked up at the same drawn rows, so the difference between two variants is paired (its noise is only the
pairs on which they disagree).

The section structure comes from the evaluation's own summary block (`recorded_table`), so the bootstrap uses
the map and weights the evaluation used, whatever config produced them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from prefpipe.common.config import DataError
from prefpipe.evaluation.accuracy_summary import OVERALL, SECTIONS, summarize_scores
from prefpipe.evaluation.sections import PRIOR_SECTION, SectionTable

Draws = dict[str, np.ndarray]  # subset -> (resamples, n_subset) row indices into the whole benchmark


def recorded_table(block: Mapping[str, Any], where: str) -> SectionTable:
    """The SectionTable the evaluation used for one benchmark, rebuilt from its summary block: sections with
    their present subsets, each subset's recorded weight, the cyclic subsets (kept out of every section)."""
    try:
        sections = {name: tuple(sec["subsets"]) for name, sec in block[SECTIONS].items()}
        weights = {name: float(sub["weight"]) for name, sub in block["subsets"].items()}
        cyclic = frozenset(block["cyclic"]["subsets"])
    except (KeyError, TypeError) as err:
        raise DataError(f"{where}: not an evaluation summary block (missing {err})") from err
    families = {"recorded": sections} if sections else {}
    return SectionTable(families=families, fixed_weights=weights, cyclic=cyclic)


def point_scores(subsets: Sequence[str], correct: Sequence[bool], table: SectionTable) -> dict[str, float]:
    """{overall, <section>...} as the evaluation computes them (null sections left out)."""
    summary = summarize_scores(list(subsets), list(correct), table)
    scores = {OVERALL: summary[OVERALL]}
    scores |= {name: sec["score"] for name, sec in summary[SECTIONS].items() if sec["score"] is not None}
    return scores


def draw(subsets: Sequence[str], resamples: int, rng: np.random.Generator) -> Draws:
    """Row indices of `resamples` stratified resamples: per subset (first-seen order), rows drawn with
    replacement from that subset's rows."""
    rows: dict[str, list[int]] = {}
    for index, subset in enumerate(subsets):
        rows.setdefault(subset, []).append(index)
    out: Draws = {}
    for subset, members in rows.items():
        members_arr = np.asarray(members)
        out[subset] = members_arr[rng.integers(0, len(members_arr), size=(resamples, len(members_arr)))]
    return out


def resampled_scores(correct: Sequence[bool], draws: Draws, table: SectionTable) -> dict[str, np.ndarray]:
    """{overall, <section>...} -> (resamples,) scores of one variant at the drawn rows, the same formula as
    `point_scores` (accuracy_summary.section_scores / overall_score), vectorised over resamples."""
    hits = np.asarray(correct, dtype=float)
    acc = {subset: hits[rows].mean(axis=1) for subset, rows in draws.items()}
    n = {subset: rows.shape[1] for subset, rows in draws.items()}
    present = [s for s in draws if s not in table.cyclic]
    out: dict[str, np.ndarray] = {}
    for section, members in table.expected(present).items():
        here = [s for s in members if s in acc]
        weights = {s: table.weight(s, n[s]) for s in here}
        total = sum(weights.values())
        if here and total > 0:
            out[section] = sum(weights[s] * acc[s] for s in here) / total
    if table.has_sections:
        used = [v for k, v in out.items() if k != PRIOR_SECTION]
        if used:
            out[OVERALL] = sum(used) / len(used)
    else:
        total_n = sum(n.values())
        out[OVERALL] = sum(n[s] * acc[s] for s in acc) / total_n
    return out
