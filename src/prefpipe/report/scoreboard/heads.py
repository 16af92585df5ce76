"""Scoreboard, reward heads: the main heads (ctx.heads) on the headline benchmark, Overall, each section, the
cyclic set, the length-controlled accuracy and the ECE, each figure exactly as its section shows it (the same
frames and the same formatting functions), the best of each column marked. A column no head has is left out."""

from __future__ import annotations

import pandas as pd

from prefpipe.evaluation.calibration import ECE
from prefpipe.evaluation.length_control import LENGTH_CONTROLLED_KEY
from prefpipe.report import frames
from prefpipe.report.document import Board, Cell
from prefpipe.report.scoreboard.marks import Value, best_marks, cells
from prefpipe.report.sections import Context, calibration, length_bias, rewardbench
from prefpipe.report.stats import NA, as_float, num, pct

SCORES = {frames.OVERALL: "Overall", **frames.SECTION_TITLES, frames.CYCLIC: "Cyclic"}
CONTROLLED, ECE_ITEM = "length_controlled", "ece"
TITLES = {**SCORES, CONTROLLED: "Length-controlled", ECE_ITEM: "ECE ↓"}
LOWER_IS_BETTER = {ECE_ITEM}


def heads(ctx: Context) -> list[str]:
    """The heads the scoreboard ranks: the main comparison, else every evaluated variant."""
    return ctx.heads or ctx.variants


def _score(frame: pd.DataFrame, variant: str, item: str) -> Value | None:
    row = frame[(frame["variant"] == variant) & (frame["item"] == item)]
    if row.empty:
        return None
    r = row.iloc[0]
    lo, hi = (float(r["lo"]), float(r["hi"])) if pd.notna(r["lo"]) else (None, None)
    return Value(rewardbench.score_text(frame, variant, item), "rewardbench-table", float(r["score"]), lo, hi)


def _controlled(block: dict | None) -> Value | None:
    """The length-controlled accuracy as the length-bias table shows it (without the % sign)."""
    lc = (block or {}).get(LENGTH_CONTROLLED_KEY)
    acc = as_float(lc.get("accuracy")) if isinstance(lc, dict) else None
    if acc is None:
        return None
    ci = length_bias.recorded_ci(lc)
    lo, hi = (float(ci[0]), float(ci[1])) if ci else (None, None)
    return Value(pct(acc, ci).replace("%", ""), "length-bias", acc, lo, hi)


def _ece(block: dict | None) -> Value | None:
    ece = as_float((block or {}).get(ECE))
    return None if ece is None else Value(num(ece), "calibration-table", ece)


def values(ctx: Context) -> dict[str, dict[str, Value | None]]:
    """{head: {item: its figure}} on the headline benchmark, for every item of TITLES."""
    frame = ctx.headline_scores()
    length = length_bias.length_blocks(ctx, ctx.bench) if ctx.bench else {}
    cal = calibration.calibration_blocks(ctx)
    out = {}
    for v in heads(ctx):
        row: dict[str, Value | None] = {item: _score(frame, v, item) for item in SCORES}
        row[CONTROLLED] = _controlled(length.get(v))
        row[ECE_ITEM] = _ece(cal.get(v))
        out[v] = row
    return out


def board(ctx: Context) -> Board | None:
    found = values(ctx)
    found = {v: row for v, row in found.items() if row[frames.OVERALL] is not None}
    if not found:
        return None
    names = list(found)
    shown = [item for item in TITLES if any(found[v][item] is not None for v in names)]
    columns = [[Cell(v, "rewardbench-table") for v in names]]
    for item in shown:
        column = [found[v][item] for v in names]
        columns.append(cells(column, best_marks(column, item not in LOWER_IS_BETTER), NA))
    return Board(
        f"Reward heads on {ctx.bench}: accuracy (%) [95% interval]",
        ["Head", *(TITLES[i] for i in shown)],
        [list(row) for row in zip(*columns, strict=True)],
        "★ best in its column; ☆ best, but another head's interval reaches it (not resolved). ECE: lower is "
        "better (no interval recorded).",
        anchor="scoreboard-heads",
    )
