"""Scoreboard, multi-turn runs: per run with held-out episode figures, trained - base exact match per decoding
and, under the primary decoding, token F1, tool calls per episode and support recall, each with its paired
interval: the cells of the episodes section's paired table (frames.episodes), linked to it. The single-turn
board's answer length and reward-model columns do not apply to episodes and are not shown."""

from __future__ import annotations

import pandas as pd

from prefpipe.grpo import metric_names as gm
from prefpipe.report import frames
from prefpipe.report.document import Board, Cell
from prefpipe.report.scoreboard.marks import side_mark
from prefpipe.report.sections import Context
from prefpipe.report.sections.episodes import change_text, episode_runs
from prefpipe.report.stats import NA

LINK = "episodes-paired"
PRIMARY_MEASURES = [m for m, *_ in frames.EPISODE_MEASURES if m != frames.EXACT_MATCH]


def _cell(row: pd.Series | None) -> Cell:
    if row is None or pd.isna(row["delta"]):
        return Cell(NA, LINK)
    ci = None if pd.isna(row["lo"]) else (float(row["lo"]), float(row["hi"]))
    return Cell(change_text(row), LINK, side_mark(ci) if ci and row["share"] else "")


def find(table: pd.DataFrame, run: str, measure: str, decoding: str | None = None) -> pd.Series | None:
    """A run's row of frames.episodes for a measure under `decoding` (None: its primary decoding)."""
    mine = table[(table["run"] == run) & (table["measure"] == measure)]
    mine = mine[mine["decoding"] == decoding] if decoding else mine[mine["primary"]]
    return None if mine.empty else mine.iloc[0]


def board(ctx: Context) -> Board | None:
    table = frames.episodes(ctx.tree)
    runs = [r for r in episode_runs(ctx) if r in set(table["run"])]
    if not runs:
        return None
    names = list(dict.fromkeys(table[table["run"].isin(runs)]["decoding"]))
    decodings = [d for d in gm.DECODINGS if d in names] + [d for d in names if d not in gm.DECODINGS]
    columns = ["Run", *(f"Exact match, {d} [95%]" for d in decodings)]
    columns += [f"{m[0].upper()}{m[1:]}, primary [95%]" for m in PRIMARY_MEASURES]
    rows = [
        [
            Cell(run, LINK),
            *(_cell(find(table, run, frames.EXACT_MATCH, d)) for d in decodings),
            *(_cell(find(table, run, m)) for m in PRIMARY_MEASURES),
        ]
        for run in runs
    ]
    return Board(
        "Multi-turn runs: held-out questions, trained − base (paired over the questions [95% interval])",
        columns,
        rows,
        "▲ improved, ≈ no clear change, ▼ worse (where the paired interval lies against 0). Exact match, F1 "
        "and support recall in points; tool calls per episode in calls, unmarked (more calls is neither "
        "better nor worse); primary: eval.primary's decoding.",
        anchor="scoreboard-episodes",
    )
