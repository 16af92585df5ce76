"""Which scoreboard cell gets which mark: the best of a column (and whether the runner-up's interval overlaps
it), and where a change's interval lies against 0 (common.stats.interval_side, the policy table's words)."""

from __future__ import annotations

from dataclasses import dataclass

from prefpipe.common.stats import ABOVE_ZERO, BELOW_ZERO, STRADDLES_ZERO, interval_side
from prefpipe.report.document import Cell

SIDE_MARKS = {ABOVE_ZERO: "improved", STRADDLES_ZERO: "unresolved", BELOW_ZERO: "worse"}


@dataclass
class Value:
    """A figure as its section shows it (text) with the number and interval the marks compare."""

    text: str
    anchor: str
    value: float | None = None
    lo: float | None = None
    hi: float | None = None


def side_mark(ci: tuple[float, float]) -> str:
    return SIDE_MARKS[interval_side(ci)]


def best_marks(values: list[Value | None], higher: bool = True) -> list[str]:
    """Per value: "best" for the best of the column (the highest, or the lowest with higher=False), or
    "best_unresolved" when another value ties it or has an interval reaching it (the answers' rule: overlapping
    intervals leave the ranking unresolved); "" for every other value and for a column of fewer than two."""
    present = [(i, v) for i, v in enumerate(values) if v is not None and v.value is not None]
    marks = [""] * len(values)
    if len(present) < 2:
        return marks
    sign = 1.0 if higher else -1.0
    top = max(sign * v.value for _, v in present)
    best = [(i, v) for i, v in present if sign * v.value == top]
    rest = [v for i, v in present if all(i != j for j, _ in best)]
    overlap = len(best) > 1 or any(_reaches(r, best[0][1], higher) for r in rest)
    for i, _ in best:
        marks[i] = "best_unresolved" if overlap else "best"
    return marks


def _reaches(other: Value, best: Value, higher: bool) -> bool:
    if None in (other.lo, other.hi, best.lo, best.hi):
        return False
    return other.hi >= best.lo if higher else other.lo <= best.hi


def cells(values: list[Value | None], marks: list[str], missing: str) -> list[Cell]:
    """The cells of one column; a value not recorded for a row is `missing`, linking where the others do."""
    anchor = next((v.anchor for v in values if v is not None), "")
    return [
        Cell(v.text, v.anchor, m) if v is not None else Cell(missing, anchor)
        for v, m in zip(values, marks, strict=True)
    ]
