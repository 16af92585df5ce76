"""Scoreboard of a comparison (report.compare: other seeds or experiments): the same two boards with each
experiment's trees as mean ± sample sd. Heads: the compare section's figures (seed_stats.across, each
experiment on its headline benchmark), the best mean per column within each experiment marked. GRPO runs: each
tree's trained - base change as the policy table has it, as mean ± sd, marked improved / worse only when every
tree's interval says so; hacked in how many trees. Multi-turn runs have their own board (across_episodes.py),
with the multi-turn board's columns."""

from __future__ import annotations

import re

from prefpipe.common.stats import mean_sd
from prefpipe.report import frames, seed_stats
from prefpipe.report.document import Board, Cell, Claim
from prefpipe.report.scoreboard import heads, runs
from prefpipe.report.scoreboard.marks import Value, best_marks, cells, side_mark
from prefpipe.report.sections import Context, compare
from prefpipe.report.sections.episodes import episode_runs
from prefpipe.report.stats import NA

ITEMS = {k: ("ECE ↓" if k == "ece" else v) for k, v in compare.ITEMS.items()}
NOTE = "mean ± sample sd over each experiment's trees (n = trees with a value)"
N_SUFFIX = re.compile(r" \(n=(\d+)\)$")


def shared_n(rows: list[list[Cell]]) -> tuple[list[list[Cell]], int | None]:
    """When every figure on a board comes from the same number of trees, the rows without the per-cell "(n=k)"
    and that k (said once in the title: narrower boards fit side by side); else the rows unchanged and None."""
    found = {int(m.group(1)) for row in rows for c in row if (m := N_SUFFIX.search(c.text))}
    if len(found) != 1:
        return rows, None
    stripped = [[Cell(N_SUFFIX.sub("", c.text), c.anchor, c.mark) for c in row] for row in rows]
    return stripped, found.pop()


def by_experiment(ctx: Context) -> dict[str, list]:
    out: dict[str, list] = {}
    for tree in [ctx.tree, *ctx.others]:
        out.setdefault(tree.experiment, []).append(tree)
    return out


def _label(exp: str, name: str, groups: dict) -> str:
    return f"{exp}: {name}" if len(groups) > 1 else name


def heads_board(ctx: Context) -> Board | None:
    groups = by_experiment(ctx)
    rows: list[list[Cell]] = []
    benches = []
    for exp, members in groups.items():
        bench, stats = compare.experiment_figures(ctx, members)
        names = [v for v in heads.heads(ctx) if (v, frames.OVERALL) in stats]
        if not names:
            continue
        benches.append(f"{exp}: {bench}")
        columns = [[Cell(_label(exp, v, groups), "compare-table") for v in names]]
        for item in ITEMS:
            column = [_value(stats.get((v, item))) for v in names]
            columns.append(cells(column, best_marks(column, item != "ece"), NA))
        rows += [list(row) for row in zip(*columns, strict=True)]
    if not rows:
        return None
    shown = [i for i, item in enumerate(ITEMS, start=1) if any(r[i].text != NA for r in rows)]
    rows, n = shared_n([[r[0], *(r[i] for i in shown)] for r in rows])
    note = f"mean ± sample sd over {n} trees each" if n else NOTE
    return Board(
        f"Reward heads ({'; '.join(benches)}): accuracy (%), {note}",
        ["Head", *(list(ITEMS.values())[i - 1] for i in shown)],
        rows,
        "★ best mean in its column within each experiment. ECE: lower is better.",
        anchor="scoreboard-heads",
    )


def _value(stat: dict | None) -> Value | None:
    if not stat or stat["mean"] is None:
        return None
    return Value(seed_stats.cell(stat), "compare-table", stat["mean"])


def _run_row(exp: str, run: str, contexts: list[Context], decodings: list[str], groups: dict) -> list[Cell]:
    row = [Cell(_label(exp, run, groups), "compare")]
    for d in decodings:
        found = [c[d] for ctx in contexts if d in (c := runs.changes(ctx, run))]
        sides = {side_mark(ci) for _, ci in found}
        mark = (next(iter(sides)) if len(sides) == 1 else "unresolved") if found else ""
        row.append(
            Cell(seed_stats.cell(mean_sd([delta for delta, _ in found]), signed=True), "compare", mark)
        )
    hacks = [h for ctx in contexts if (h := runs.hacking_rows(ctx).get(run))]
    k = sum(h.hacked for h in hacks)
    row.append(Cell(f"{k}/{len(hacks)} trees" if hacks else runs.NO_RM, "compare", "flag" if k else ""))
    return row


def runs_board(ctx: Context) -> Board | None:
    groups = by_experiment(ctx)
    contexts = {exp: [Context(tree, [], ctx.settings) for tree in members] for exp, members in groups.items()}
    multi_turn = {
        r for found in contexts.values() for c in found for r in episode_runs(c)
    }  # across_episodes.py
    names = {
        exp: list(
            dict.fromkeys(r for c in found for r in c.runs if r not in multi_turn and runs.changes(c, r))
        )
        for exp, found in contexts.items()
    }
    decodings = runs.ordered_decodings(
        [list(runs.changes(c, r)) for exp, found in contexts.items() for c in found for r in names[exp]]
    )
    rows = [_run_row(exp, run, contexts[exp], decodings, groups) for exp in groups for run in names[exp]]
    if not rows:
        return None
    columns = ["Run", *(f"{d.capitalize()} change" for d in decodings), "Hacked"]
    if all(r[-1].text == runs.NO_RM for r in rows):  # no run evaluated with a reward model
        columns, rows = columns[:-1], [r[:-1] for r in rows]
    rows, n = shared_n(rows)
    return Board(
        f"GRPO runs: held-out accuracy, trained − base (points), mean ± sd over {f'{n} ' if n else ''}trees",
        columns,
        rows,
        f"▲ / ▼: every tree's interval above / below 0; ≈ otherwise. ⚠ {runs.HACKED_RULE} (in that many trees).",
        anchor="scoreboard-runs",
    )


def best_head(ctx: Context) -> Claim | None:
    """The head with the best mean Overall over this experiment's trees, and in how many of the trees that
    have both it is ahead of the runner-up (by mean): with a few seeds, all of them or not resolved."""
    members = by_experiment(ctx)[ctx.tree.experiment]
    bench, stats = compare.experiment_figures(ctx, members)
    means = {v: stats[(v, frames.OVERALL)] for v in heads.heads(ctx) if (v, frames.OVERALL) in stats}
    if len(means) < 2:
        return None
    best, runner = sorted(means, key=lambda v: -means[v]["mean"])[:2]
    per_tree = [seed_stats.tree_figures(t, bench) for t in members]
    both = [f for f in per_tree if (best, frames.OVERALL) in f and (runner, frames.OVERALL) in f]
    ahead = sum(f[(best, frames.OVERALL)] > f[(runner, frames.OVERALL)] for f in both)
    how = "resolved" if both and ahead == len(both) else "not resolved"
    return Claim(
        f"Best head on {bench} over {len(members)} trees: {best} {seed_stats.cell(means[best])}, ahead of "
        f"{runner} {seed_stats.cell(means[runner])} in {ahead} of {len(both)} trees ({how}).",
        "compare-table",
    )
