"""Scoreboard of a comparison, multi-turn runs: the multi-turn board's columns (episodes.py) over each experiment's
trees as mean ± sample sd: trained - base exact match per decoding and, under the primary decoding, token F1, tool
calls per episode and support recall, each tree's figure as the episodes section's paired table has it
(frames.episodes). A share is marked improved / worse only when every tree's interval says so; tool calls are
unmarked. The single-turn board's answer-length and hacking columns do not apply to episodes and are not shown."""

from __future__ import annotations

import pandas as pd

from prefpipe.common.stats import mean_sd
from prefpipe.report import frames, seed_stats
from prefpipe.report.document import Board, Cell
from prefpipe.report.scoreboard.across import by_experiment, shared_n
from prefpipe.report.scoreboard.episodes import LINK, PRIMARY_MEASURES, find
from prefpipe.report.scoreboard.marks import side_mark
from prefpipe.report.scoreboard.runs import ordered_decodings
from prefpipe.report.sections import Context
from prefpipe.report.sections.episodes import episode_runs


def _tables(ctx: Context, groups: dict[str, list]) -> dict[str, list[tuple[list[str], pd.DataFrame]]]:
    """{experiment: per tree (its multi-turn runs with held-out figures, its frames.episodes table)}."""
    out: dict[str, list[tuple[list[str], pd.DataFrame]]] = {}
    for exp, members in groups.items():
        for tree in members:
            table = frames.episodes(tree)
            found = [r for r in episode_runs(Context(tree, [], ctx.settings)) if r in set(table["run"])]
            out.setdefault(exp, []).append((found, table))
    return out


def _text(stat: dict, share: bool) -> str:
    """Points for shares (seed_stats.cell), calls to three decimals for tool calls, as the paired table."""
    if share:
        return seed_stats.cell(stat, signed=True)
    sd = f" ± {stat['sd']:.3f}" if stat["sd"] is not None else ""
    return f"{stat['mean']:+.3f}{sd} (n={stat['n']})"


def _cell(rows: list[pd.Series], anchor: str) -> Cell:
    """Mean ± sd of the trees' trained - base; marked where every tree's interval lies on one side of 0."""
    rows = [r for r in rows if not pd.isna(r["delta"])]
    if not rows:
        return Cell("–", anchor)
    share = bool(rows[0]["share"])
    sides = {side_mark((float(r["lo"]), float(r["hi"]))) for r in rows if not pd.isna(r["lo"])}
    mark = (next(iter(sides)) if len(sides) == 1 else "unresolved") if share and sides else ""
    return Cell(_text(mean_sd([float(r["delta"]) for r in rows]), share), anchor, mark)


def board(ctx: Context) -> Board | None:
    groups = by_experiment(ctx)
    tables = _tables(ctx, groups)
    names = {
        exp: list(dict.fromkeys(r for found, _ in trees for r in found)) for exp, trees in tables.items()
    }
    if not any(names.values()):
        return None
    decodings = ordered_decodings(
        [list(table["decoding"]) for trees in tables.values() for _, table in trees]
    )
    anchor = LINK if not frames.episodes(ctx.tree).empty else "compare"
    rows = []
    for exp, runs in names.items():
        for run in runs:
            trees = [table for _, table in tables[exp]]
            row = [Cell(f"{exp}: {run}" if len(groups) > 1 else run, anchor)]
            row += [_cell([r for t in trees if (r := find(t, run, frames.EXACT_MATCH, d)) is not None], anchor)
                    for d in decodings]  # fmt: skip
            row += [_cell([r for t in trees if (r := find(t, run, m)) is not None], anchor)
                    for m in PRIMARY_MEASURES]  # fmt: skip
            rows.append(row)
    columns = ["Run", *(f"Exact match, {d}" for d in decodings)]
    columns += [f"{m[0].upper()}{m[1:]}, primary" for m in PRIMARY_MEASURES]
    rows, n = shared_n(rows)
    return Board(
        f"Multi-turn runs: held-out questions, trained − base, mean ± sd over {f'{n} ' if n else ''}trees",
        columns,
        rows,
        "▲ / ▼: every tree's paired interval above / below 0; ≈ otherwise. Exact match, F1 and support recall "
        "in points; tool calls per episode in calls, unmarked (more calls is neither better nor worse); primary: "
        "eval.primary's decoding.",
        anchor="scoreboard-episodes",
    )
