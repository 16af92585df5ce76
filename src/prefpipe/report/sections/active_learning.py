"""Active learning (docs/findings/ACTIVE_LEARNING.md), from results/active_learning/summary.json: the learner's test accuracy
after each round per acquisition strategy (mean and sd over seeds) and the labels each strategy needs to reach
random selection's final accuracy, with the share of random's labels saved (the b-gpm paper's headline use), and the
anchors' own measure: the labels to reach a fraction of the full-data accuracy, and how many fewer than random; and
what each strategy's rounds selected (prefpipe.active.picks), random's row first, the evidence for why a strategy
needs more labels than random when it does."""

from __future__ import annotations

from typing import Any

import pandas as pd

from prefpipe.report import plots
from prefpipe.report.document import Claim, Section, Table
from prefpipe.report.sections import Context
from prefpipe.report.stats import NA

TITLE, ANCHOR = "Active learning", "active-learning"
TABLE_ANCHOR = "active-learning-labels"
KIND = "active_learning"
DESCRIBED = {
    "random": "random selection",
    "bgpm": "the Bayesian GPM's mutual information",
    "ensemble": "the deep ensemble's score sd",
    "ensemble_bald": "the deep ensemble's mutual information",
    "batchbald": "the Bayesian GPM's BatchBALD",
    "ensemble_batchbald": "the deep ensemble's BatchBALD",
    "epig": "the Bayesian GPM's EPIG",
    "ensemble_epig": "the deep ensemble's EPIG",
    "balpm": "the Bayesian GPM's BAL-PM (BALD plus prompt diversity)",
}


def _pm(cell: dict[str, Any] | None, fmt: str) -> str:
    if not isinstance(cell, dict) or cell.get("mean") is None:
        return NA
    sd = cell.get("sd")
    return format(cell["mean"], fmt) + ("" if sd is None else " ± " + format(sd, fmt))


def _percent(cell: dict[str, Any] | None) -> str:
    """A share's mean ± sd in percent."""
    if not isinstance(cell, dict) or cell.get("mean") is None:
        return NA
    sd = cell.get("sd")
    return _pm({"mean": 100 * cell["mean"], "sd": None if sd is None else 100 * sd}, ".1f")


def _curve_table(summary: dict[str, Any]) -> Table:
    strategies = summary["strategies"]
    rows = [
        [str(labels), *[_pm(summary["curve"][s][r], ".4f") for s in strategies]]
        for r, labels in enumerate(summary["labels"])
    ]
    caption = (
        f"Test accuracy of {summary['learner']} trained on each round's labelled pairs, mean ± sd over seeds "
        f"{summary['seeds']}; round 0 (the first row) is the same seeded random sample for every strategy."
    )
    return Table("Accuracy vs labels", ["Labels", *strategies], rows, caption)


def _needed_table(summary: dict[str, Any]) -> Table | None:
    needed = summary.get("labels_needed")
    if not needed:
        return None
    rows = []
    for strategy, row in needed.items():
        per_seed = ", ".join(NA if v is None else f"{v:.0f}" for v in row["per_seed"].values())
        reached = f"{row['reached']}/{row['seeds']}"
        rows.append(
            [strategy, _pm(row.get("labels"), ".0f"), _percent(row.get("saved_share")), per_seed, reached]
        )
    caption = (
        "Labels needed: where the strategy's accuracy curve first reaches random selection's final accuracy on "
        "the same seed, linearly interpolated between rounds; the mean is shown only when every seed reaches it."
    )
    columns = [
        "Strategy",
        "Labels needed (mean ± sd)",
        "Saved vs random's final (%)",
        "Per seed",
        "Seeds reaching",
    ]
    return Table(
        "Labels to reach random selection's final accuracy", columns, rows, caption, anchor=TABLE_ANCHOR
    )


def _full_data_table(summary: dict[str, Any]) -> Table | None:
    full = summary.get("full_data")
    if not full:
        return None
    rows = []
    for strategy, row in full["strategies"].items():
        per_seed = ", ".join(NA if v is None else f"{v:.0f}" for v in row["per_seed"].values())
        reached = f"{row['reached']}/{len(row['per_seed'])}"
        fewer = _percent(row.get("fewer_than_reference"))
        rows.append([strategy, _pm(row.get("labels"), ".0f"), fewer, per_seed, reached])
    of = "the full-data accuracy" if full["whole_pool"] else "the last round's accuracy (not the whole pool)"
    caption = (
        f"Labels needed to reach {full['fraction']:g} x {of} of random selection on the same seed, linearly "
        "interpolated between rounds; fewer than random: 1 - needed / random's needed for the same target, "
        "per seed, mean ± sd (shown only when every seed of both reaches it)."
    )
    columns = ["Strategy", "Labels needed (mean ± sd)", "Fewer than random (%)", "Per seed", "Seeds reaching"]
    return Table(f"Labels to reach {full['fraction']:g} of {of}", columns, rows, caption)


PICK_COLUMNS = {  # summary figure -> column, each the mean over rounds per seed, mean ± sd over seeds
    "picks": ("Picks", ".1f"),
    "distinct_prompts": ("Distinct prompts", ".1f"),
    "shared_prompt": ("Sharing a prompt", ".1f"),
    "prompt_labelled": ("Prompt labelled before", ".1f"),
    "flipped": ("Flipped labels", ".1f"),
    "kinds": ("Kinds", ".1f"),
    "kind_entropy": ("Kind entropy", ".3f"),
}


def _kind_range(row: dict[str, Any]) -> str:
    """The most and the least picked kind, picks summed over rounds (mean over seeds)."""
    totals = {k: v["mean"] for k, v in row.get("kind_total", {}).items() if v.get("mean") is not None}
    if not totals:
        return NA
    ranked = sorted(totals, key=lambda k: (-totals[k], k))
    most, least = ranked[0], ranked[-1]
    return f"{most} {totals[most]:.0f} / {least} {totals[least]:.0f}"


def _picks_table(summary: dict[str, Any]) -> Table | None:
    picks = summary.get("picks")
    if not picks:
        return None
    order = sorted(picks["strategies"], key=lambda s: s != picks["reference"])  # the reference first
    rows = []
    for strategy in order:
        row = picks["strategies"][strategy]
        cells = [_pm(row["round_mean"][f], fmt) for f, (_, fmt) in PICK_COLUMNS.items()]
        against = row.get("against_random", {}).get("shared_prompt")
        rows.append([strategy, *cells, _kind_range(row), _pm(against, ".1f") if against else NA])
    caption = (
        f"What each round of a strategy added (rounds 1 to {picks['rounds']}): the mean over rounds on each seed, "
        "then mean ± sd over seeds. Sharing a prompt: picks whose prompt another pick of the same round has; prompt "
        "labelled before: picks whose prompt a pair labelled before the round has; kind entropy: of the picks' "
        "kinds over log(kinds left in the pool), 1 = uniform. Last column: sharing a prompt minus random's on "
        "the same seed. Rounds that take most of what is left of the pool leave every strategy the same picks."
    )
    columns = ["Strategy", *(c for c, _ in PICK_COLUMNS.values()), "Most / least picked kind (total)"]
    classes = ["ref" if s == picks["reference"] else "" for s in order]
    return Table("The selected pairs", [*columns, "Sharing vs random"], rows, caption, classes)


def _panels(curves: list[plots.Curve], reference: str | None) -> list[tuple[str, list[plots.Curve], bool]]:
    """One panel of every strategy's curve while they fit one; else each strategy beside the reference (random),
    a panel each, so a full-pool run's strategies stay readable."""
    title = "Test accuracy (mean over seeds)"
    if len(curves) <= plots.MAX_CURVES:
        return [(title, curves, False)]
    base = [c for c in curves if c.label == reference]
    others = [c for c in curves if c.label != reference]
    if base:
        return [(f"{c.label} vs {reference}", [*base, c], False) for c in others]
    n = plots.MAX_CURVES
    return [(f"{title}, {i // n + 1}", others[i : i + n], False) for i in range(0, len(others), n)]


def build(ctx: Context) -> Section | None:
    summary = ctx.tree.summary(KIND)
    if not summary:
        return None
    colors = plots.colors(summary["strategies"])
    labels = pd.Series(summary["labels"], dtype=float)
    curves = [
        plots.Curve(s, labels, pd.Series([c["mean"] for c in summary["curve"][s]], dtype=float), colors[s])
        for s in summary["strategies"]
    ]
    png = plots.curves(_panels(curves, summary.get("reference")), 1, ctx.settings.figure_dpi, "labels")
    blocks: list = ctx.figure(
        "active_learning",
        "Accuracy vs labels",
        png,
        "One line per acquisition strategy (more than a panel holds: each beside random, one panel each).",
    )
    blocks.append(_curve_table(summary))
    needed = _needed_table(summary)
    if needed is not None:
        blocks.append(needed)
    blocks += [t for t in (_full_data_table(summary), _picks_table(summary)) if t is not None]
    return Section(TITLE, blocks, ANCHOR)


def claims(ctx: Context) -> list[Claim]:
    summary = ctx.tree.summary(KIND)
    needed = (summary or {}).get("labels_needed") or {}
    parts = []
    for strategy, row in needed.items():
        if strategy == "random":
            continue
        what = DESCRIBED.get(strategy, strategy)
        if "saved_share" in row:
            saved = _percent(row["saved_share"])
            parts.append(f"{what} needs {_pm(row['labels'], '.0f')} labels ({saved}% fewer)")
        else:
            parts.append(f"{what} reaches it on {row['reached']} of {row['seeds']} seeds")
    if not parts:
        return []
    final = summary["labels"][-1]
    text = (
        f"Active learning: to reach the test accuracy random selection has after {final} labels (mean ± sd "
        "over seeds), " + "; ".join(parts) + "."
    )
    return [Claim(text, TABLE_ANCHOR)]
