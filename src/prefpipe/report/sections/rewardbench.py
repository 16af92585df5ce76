"""RewardBench-style accuracy: which head is best per section and overall, and whether GPM learns the cyclic
(intransitive) set that a scalar reward such as BT cannot get above 2/3 on."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from prefpipe.evaluation.length_split import LONGER_WINS_BASELINE_KEY
from prefpipe.evaluation.summary_keys import TRUNCATION_KEY
from prefpipe.report import frames, plots
from prefpipe.report.document import Claim, Details, Section, Table
from prefpipe.report.sections import Context, note
from prefpipe.report.stats import NA, pct
from prefpipe.reward.heads.facts import HEAD_FACTS, HeadFacts, head_facts

TITLE, ANCHOR = "Reward models on the benchmarks", "rewardbench"
ITEMS = {**frames.SECTION_TITLES, frames.OVERALL: "Overall", frames.CYCLIC: "Cyclic"}
SCALAR_CAP = 2 / 3  # a scalar reward orders a 3-cycle transitively: at most 2 of its 3 pairs right
# GPM paper (Zhang et al., ICML 2025) RewardBench rows, percent (Chat, Chat Hard, Safety, Reasoning, Average).
PAPER_ROWS = (
    ("Gemma-2B-it BT", 67.32, 63.37, 85.68, 83.04, 74.85),
    ("Gemma-2B-it GPM d=6", 79.61, 75.66, 85.27, 88.61, 82.29),
    ("Llama-3.1-8B-Instruct BT", 88.55, 85.75, 91.49, 96.47, 90.56),
    ("Llama-3.1-8B-Instruct GPM d=8", 93.58, 87.50, 91.08, 95.44, 91.90),
)


def score_text(frame: pd.DataFrame, variant: str, item: str) -> str:
    row = frame[(frame["variant"] == variant) & (frame["item"] == item)]
    if row.empty:
        return NA
    r = row.iloc[0]
    return pct(r["score"], (r["lo"], r["hi"]) if pd.notna(r["lo"]) else None).replace("%", "")


def _get(ctx: Context, variant: str, item: str) -> pd.Series | None:
    frame = ctx.headline_scores()
    row = frame[(frame["variant"] == variant) & (frame["item"] == item)]
    return row.iloc[0] if len(row) else None


def said(row: pd.Series) -> str:
    return pct(row["score"], (row["lo"], row["hi"]) if pd.notna(row["lo"]) else None)


def claims(ctx: Context) -> list[Claim]:
    heads = ctx.heads or ctx.variants
    frame = ctx.headline_scores()
    frame = frame[frame["variant"].isin(heads)]
    if frame.empty:
        return []
    out = []
    overall = frame[frame["item"] == frames.OVERALL].sort_values("score", ascending=False)
    if len(overall) == 1:  # one head: nothing to rank it against
        only = overall.iloc[0]
        out.append(
            Claim(f"Reward head overall on {ctx.bench}: {only['variant']} {said(only)}.", "rewardbench-table")
        )
    elif len(overall):
        best, rest = overall.iloc[0], overall.iloc[1:]
        overlap = [r["variant"] for _, r in rest.iterrows() if pd.notna(r["hi"]) and r["hi"] >= best["lo"]]
        verdict = (
            f"its interval overlaps {', '.join(overlap)}, so that ranking is not resolved"
            if overlap
            else "ahead of every other head beyond the intervals"
        )
        others = "; ".join(f"{r['variant']} {said(r)}" for _, r in rest.iterrows())
        out.append(
            Claim(
                f"Best reward head overall on {ctx.bench}: {best['variant']} {said(best)} ({others}); {verdict}.",
                "rewardbench-table",
            )
        )
    per = []
    for item, title in frames.SECTION_TITLES.items():
        rows = frame[frame["item"] == item]
        if rows.empty:
            continue
        top = rows["score"].max()
        winners = rows[rows["score"] == top]
        w = winners.iloc[0]
        per.append(f"{title} {'/'.join(winners['variant'])} {said(w)}")
    if per:
        out.append(Claim("Best per section: " + "; ".join(per) + ".", "fig-rewardbench"))
    cyclic = _cyclic_claim(ctx, heads)
    return out + ([cyclic] if cyclic else [])


def cyclic_pair(ctx: Context, heads: list[str]) -> tuple[str, pd.Series, str | None, pd.Series | None] | None:
    """(pairwise head's name, its cyclic row, scalar head's name, its cyclic row) on the headline benchmark: the
    first pairwise point head and the first scalar head; the kinds of head come from the head facts
    (reward/heads/facts.py), never from type names. None without a pairwise head's cyclic score."""
    pairwise = _first(ctx, heads, lambda f: f.pairwise and not f.bayesian)
    scalar = _first(ctx, heads, lambda f: f.scalar_reward)
    g = _get(ctx, pairwise[0], frames.CYCLIC) if pairwise else None
    if pairwise is None or g is None:
        return None
    b = _get(ctx, scalar[0], frames.CYCLIC) if scalar else None
    return pairwise[1].display, g, (scalar[1].display if scalar else None), b


def learns_cycle(row: pd.Series) -> bool:
    """Whether a cyclic accuracy's interval lies above what a scalar reward can reach (2/3)."""
    return bool(pd.notna(row["lo"]) and row["lo"] > SCALAR_CAP)


def _cyclic_claim(ctx: Context, heads: list[str]) -> Claim | None:
    """Whether the first pairwise point head learns the cyclic set, beside the first scalar head."""
    found = cyclic_pair(ctx, heads)
    if found is None:
        return None
    name, g, scalar, b = found
    text = f"Cyclic set (n={int(g['n'])}): {name} {said(g)}"
    text += f", {scalar} {said(b)}" if scalar and b is not None else ""
    scalar_names = ", ".join(f.display for f in HEAD_FACTS.values() if f.scalar_reward)
    text += f". A scalar reward ({scalar_names}) cannot exceed 66.7% on a 3-cycle; {name} " + (
        "learns it (its interval lies above 66.7%)."
        if learns_cycle(g)
        else "does not show that it learns it here (its interval does not clear 66.7%)."
    )
    return Claim(text, "rewardbench-table")


def _first(
    ctx: Context, variants: list[str], kind: Callable[[HeadFacts], bool]
) -> tuple[str, HeadFacts] | None:
    """The first variant whose head (as its summary records it) is of this kind, with the head's facts."""
    for variant in variants:
        facts = head_facts(_head(ctx, variant))
        if facts is not None and kind(facts):
            return variant, facts
    return None


def _head(ctx: Context, variant: str) -> str | None:
    rows = ctx.scores[ctx.scores["variant"] == variant]["head"]
    return str(rows.iloc[0]) if len(rows) else None


def _longer_wins(ctx: Context, bench: str, variants: list[str]) -> dict[str, str] | None:
    """The "longer response wins" baseline on this benchmark's pairs (the same for every variant): Overall and
    each section, ties counting half (equal lengths carry no length signal either way)."""
    for variant in variants:
        block = frames.benchmark_blocks(ctx.tree.summary("eval", variant)).get(bench)
        baseline = block.get(LONGER_WINS_BASELINE_KEY) if isinstance(block, dict) else None
        if isinstance(baseline, dict):
            cells = {frames.OVERALL: pct(baseline.get("accuracy_ties_half")).replace("%", "")}
            for section, wins in (baseline.get("by_section") or {}).items():
                if isinstance(wins, dict):
                    cells[section] = pct(wins.get("accuracy_ties_half")).replace("%", "")
            return cells
    return None


def _truncation(ctx: Context) -> list:
    """Pairs the reward model's max_length cut while scoring, per variant and benchmark, with the subsets they
    are in (eval summary `truncation`): a score on cut pairs judges responses the model never fully read."""
    rows = []
    for variant in ctx.variants:
        for bench, block in frames.benchmark_blocks(ctx.tree.summary("eval", variant)).items():
            cut = block.get(TRUNCATION_KEY)
            if not isinstance(cut, dict):
                rows.append([variant, bench, "not recorded", NA, NA])
                continue
            per = cut.get("by_subset") or {}
            where = ", ".join(f"{name} {n}" for name, n in per.items() if n) or "none"
            pairs = (
                f"{cut.get('pairs', 0)} ({pct(cut.get('pairs_share'))})" if cut.get("pairs_share") else "0"
            )
            rows.append([variant, bench, pairs, str(cut.get("max_length") or NA), where])
    if not rows:
        return []
    return [
        Table(
            "Pairs truncated by the reward model's max_length",
            ["Variant", "Benchmark", "Pairs cut", "max_length", "Cut pairs per subset"],
            rows,
            "A pair counts when its chosen or rejected sequence was cut (prompt + response longer than "
            "max_length tokens); set reward.*.data.max_length higher to read them whole.",
            anchor="rewardbench-truncation",
        )
    ]


def _board(ctx: Context, bench: str) -> Table:
    frame = ctx.scores[ctx.scores["benchmark"] == bench]
    variants = [v for v in ctx.variants if v in set(frame["variant"])]
    cells = {v: {i: score_text(frame, v, i) for i in ITEMS} for v in variants}
    # columns with no value for any variant (a benchmark without sections, no cyclic subset) are left out
    shown = [i for i in ITEMS if i == frames.OVERALL or any(cells[v][i] != NA for v in variants)]
    rows = [[v, _head(ctx, v) or NA, *[cells[v][i] for i in shown]] for v in variants]
    baseline = _longer_wins(ctx, bench, variants)
    if baseline is not None:
        rows.append(["longer wins", "baseline", *[baseline.get(i, NA) for i in shown]])
    return Table(
        f"Accuracy (%) [95% interval] on {bench}",
        ["Variant", "Head", *[ITEMS[i] for i in shown]],
        rows,
        "Sections and Overall: estimate ± 1.96 recorded standard errors (Overall = mean of the sections); "
        "Cyclic: Wilson interval from its count (intransitive subsets, not part of Overall); "
        "longer wins: picking the longer response (equal lengths count half), on all pairs of the benchmark "
        "and per section.",
        anchor="rewardbench-table" if bench == ctx.bench else f"rewardbench-{bench}",
    )


def build(ctx: Context) -> Section | None:
    if ctx.scores.empty:
        return Section(TITLE, [note("No evaluation summaries among the declared inputs.")], ANCHOR)
    blocks: list = [_board(ctx, ctx.bench)] if ctx.bench else []
    frame = ctx.headline_scores()
    heads = ctx.heads or ctx.variants[:4]
    panels = []
    for item, title in ITEMS.items():
        rows = frame[(frame["item"] == item) & frame["variant"].isin(heads)]
        ests = [
            plots.Estimate(r["variant"], r["score"], r["lo"], r["hi"], ctx.colors[r["variant"]])
            for _, r in rows.set_index("variant")
            .loc[[h for h in heads if h in set(rows["variant"])]]
            .reset_index()
            .iterrows()
        ]
        panels.append((title, ests))
    blocks += ctx.figure(
        "rewardbench",
        "Accuracy per section",
        plots.intervals(panels, ctx.settings.figure_dpi, "accuracy (%)"),
        f"Main heads on {ctx.bench}: dot = accuracy, whiskers = 95% interval, dotted line = chance (50%).",
    )
    for bench in dict.fromkeys(ctx.scores["benchmark"]):
        if bench != ctx.bench:
            blocks.append(_board(ctx, bench))
    blocks.append(note(f"Headline benchmark: {ctx.bench} ({ctx.bench_source})."))
    blocks += _truncation(ctx)
    if ctx.settings.paper_reference_rows:
        rows = [[name, *[f"{v:.2f}" for v in values]] for name, *values in PAPER_ROWS]
        blocks.append(
            Details(
                "Published reference rows (GPM paper; other scale and data, not comparable)",
                [
                    Table(
                        "GPM paper, RewardBench (%)",
                        ["Model", "Chat", "Chat Hard", "Safety", "Reasoning", "Average"],
                        rows,
                    )
                ],
            )
        )
    return Section(TITLE, blocks, ANCHOR)
