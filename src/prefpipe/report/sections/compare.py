"""Across results trees (report.compare: other seeds or experiments): mean ± sd per variant and run, grouped by
the experiment each tree records."""

from __future__ import annotations

from prefpipe.common.stats import mean_sd
from prefpipe.report import frames, seed_stats
from prefpipe.report.document import Section, Table
from prefpipe.report.sections import Context
from prefpipe.report.stats import finite

TITLE, ANCHOR = "Across seeds and experiments", "compare"
ITEMS = {frames.OVERALL: "Overall", **frames.SECTION_TITLES, frames.CYCLIC: "Cyclic", "ece": "ECE"}


def _policy_rows(ctx: Context, exp: str, members: list) -> list[list[str]]:
    """Per GRPO run: the primary decoding's held-out accuracy of base and trained, mean ± sd over the trees."""
    policies = [frames.policy(t) for t in members]
    rows = []
    for run in ctx.runs:
        cells = []
        for side in ("base", "trained"):
            vals = [
                float(p[(p["run"] == run) & p["primary"] & (p["side"] == side)]["accuracy"].iloc[0])
                for p in policies
                if ((p["run"] == run) & p["primary"] & (p["side"] == side)).any()
            ]
            cells.append(seed_stats.cell(mean_sd([v for v in vals if finite(v)])))
        rows.append([exp, run, str(len(members)), *cells])
    return rows


def experiment_figures(ctx: Context, members: list) -> tuple[str | None, dict]:
    """The benchmark to show an experiment on and its figures there: the report's headline benchmark where this
    experiment has scores on it, else the experiment's own headline (a real-data experiment has no synthetic
    benchmark: its own scores, not a row of dashes)."""
    stats = seed_stats.across(members, ctx.bench)
    if any(owner != "ablation" for owner, _ in stats):
        return ctx.bench, stats
    own = frames.headline(members[0], None)[0]
    return own, seed_stats.across(members, own)


def _variants(ctx: Context, stats_by_exp: dict[str, dict]) -> list[str]:
    """Every variant some compared experiment has figures for, this run's order first."""
    found = [v for st in stats_by_exp.values() for v, _ in st if v != "ablation"]
    return list(dict.fromkeys([v for v in ctx.variants if v in found] + found))


def build(ctx: Context) -> Section | None:
    if not ctx.others:
        return None
    trees = [ctx.tree, *ctx.others]
    by_exp: dict[str, list] = {}
    for tree in trees:
        by_exp.setdefault(tree.experiment, []).append(tree)
    rows, policy_rows, ablation_rows = [], [], []
    figures = {exp: experiment_figures(ctx, members) for exp, members in by_exp.items()}
    benches = {exp: bench for exp, (bench, _) in figures.items()}
    variants = _variants(ctx, {exp: stats for exp, (_, stats) in figures.items()})
    side: dict[str, list[str]] = {v: [] for v in variants}  # variant -> its Overall per experiment
    for exp, members in by_exp.items():
        stats = figures[exp][1]
        for v in variants:
            side[v].append(seed_stats.cell(stats.get((v, frames.OVERALL))))
        for v in (v for v in variants if any(owner == v for owner, _ in stats)):  # only what it trained
            cells = [seed_stats.cell(stats.get((v, i))) for i in ITEMS]
            rows.append([exp, benches[exp] or "–", v, str(len(members)), *cells])
        for (owner, item), stat in stats.items():
            if owner == "ablation":
                fix, kind = item.split(" ", 1)
                ablation_rows.append([exp, fix, kind, seed_stats.cell(stat, signed=True)])
        policy_rows += _policy_rows(ctx, exp, members)
    note = (
        "Mean ± sample standard deviation over the trees of each experiment (n = trees with a value), in % "
        "(ECE too)."
    )
    names = ", ".join(f"{t.name} (seed {t.seed})" for t in trees)
    blocks = _side_by_side(benches, by_exp, side, note)
    blocks += [
        Table(
            f"Reward models, each experiment on its headline benchmark: {names}",
            ["Experiment", "Benchmark", "Variant", "Trees", *ITEMS.values()],
            rows,
            note,
            anchor="compare-table",
        ),
    ]
    if ablation_rows:
        blocks.append(
            Table(
                f"Bayesian GPM ablation on {ctx.bench}: each fix's effect on the four-section average",
                ["Experiment", "Fix", "Kind", "Effect (points)"],
                ablation_rows,
                "Mean ± sample standard deviation over the trees' results/ablation/summary.json (added: on the "
                "broken variant; removed: from the fixed one, sign flipped so > 0 means the fix helps).",
                anchor="compare-ablation",
            )
        )
    if policy_rows:
        blocks.append(
            Table(
                "Held-out verifier accuracy (primary decoding)",
                ["Experiment", "Run", "Trees", "Base", "Trained"],
                policy_rows,
                note,
            )
        )
    return Section(TITLE, blocks, ANCHOR)


def _side_by_side(
    benches: dict[str, str | None], by_exp: dict[str, list], side: dict[str, list[str]], note: str
) -> list[Table]:
    """One column per experiment (only when more than one is compared), each on its headline benchmark
    (named in the column), naming each experiment's folders."""
    if len(by_exp) < 2:
        return []
    folders = "; ".join(
        f"{exp}: {', '.join(str(t.root) for t in members)}" for exp, members in by_exp.items()
    )
    shared = set(benches.values())
    title = (
        f"Overall on {benches[next(iter(by_exp))]}"
        if len(shared) == 1
        else "Overall on each experiment's headline"
    )
    return [
        Table(
            f"{title}, experiments side by side",
            ["Variant", *(f"{exp} ({benches[exp] or '–'})" for exp in by_exp)],
            [[v, *cells] for v, cells in side.items()],
            f"{note} Folders: {folders}.",
            anchor="compare-side-by-side",
        )
    ]
