"""The Bayesian GPM ablation: each variant against the broken one (the variant farthest in settings from the
fixed reference), with the interval of the change, so the fixes that matter stand out."""

from __future__ import annotations

import fnmatch
import json
from typing import Any

import pandas as pd

from prefpipe.common.stats import STRADDLES_ZERO, interval_side
from prefpipe.evaluation.accuracy_summary import OVERALL
from prefpipe.evaluation.summary_keys import (
    AS_FINETUNED,
    HURTS,
    ITEM_TITLES,
    MATTERS,
    MOST_IMPORTANT,
    NEUTRAL,
    ROWS,
    VARIANTS,
)
from prefpipe.report import frames, plots
from prefpipe.report.document import Claim, Section, Table
from prefpipe.report.sections import Context
from prefpipe.report.stats import NA, diff_interval, pct, pts

VERDICTS = {MATTERS: "matters", NEUTRAL: "no clear effect", HURTS: "hurts"}

TITLE, ANCHOR = "Bayesian GPM ablation", "ablation"


def _flat(config: dict[str, Any], ignore: list[str], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if key in ignore or path in ignore:
            continue
        out.update(_flat(value, ignore, path) if isinstance(value, dict) else {path: value})
    return out


def _settings(ctx: Context, variant: str) -> dict[str, Any] | None:
    config = ctx.tree.config("reward", variant)
    if config is None:
        return None
    config = config.get("resolved", config) if isinstance(config.get("resolved"), dict) else config
    return _flat(config, ctx.settings.ablation.ignore_keys)


def diff(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """'key=value' for every setting of a that differs from b."""
    return [f"{k}={json.dumps(a.get(k))}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def order(ctx: Context) -> tuple[list[str], str | None]:
    """Ablation variants (broken first, the fixed reference last) and the broken one.

    The reference and the broken variant are the ablation stage's (results/ablation/summary.json records the
    `ablation.reference` and `ablation.broken` it used) when it ran; only without it does the report fall back
    to ablation.reference and the variant farthest from it in settings."""
    ab = ctx.settings.ablation
    paired = paired_summary(ctx)
    reference = paired["reference"] if paired is not None else ab.reference
    names = [v for v in ctx.variants if any(fnmatch.fnmatchcase(v, p) for p in ab.variants)]
    ref = _settings(ctx, reference)
    if ref is None:
        return names, None
    dist = {v: len(diff(s, ref)) if (s := _settings(ctx, v)) is not None else -1 for v in names}
    ordered = sorted(names, key=lambda v: (v == reference, -dist[v], v))
    if paired is not None and paired["broken"] in names:
        ordered.remove(paired["broken"])
        return [paired["broken"], *ordered], paired["broken"]
    broken = ordered[0] if ordered and dist[ordered[0]] > 0 else None
    return ordered, broken


_FARTHEST = "the variant farthest from {} in settings (no broken variant trained)"


def _is_declared_broken(ctx: Context, variant: str) -> bool:
    """The broken variant is the one the config (or the ablation stage) names, not the fallback of `order`."""
    paired = paired_summary(ctx)
    return variant == (paired["broken"] if paired is not None else ctx.settings.ablation.broken)


def _broken_label(ctx: Context, broken: str) -> str:
    """ "broken: every fix off" only for the declared broken variant: an experiment that trains just a few
    Bayesian variants (uncertainty.yaml: bgpm and bgpm-kl) compares them against the farthest one, which has
    fixes on."""
    if _is_declared_broken(ctx, broken):
        return "broken: every fix off"
    return _FARTHEST.format(ctx.settings.ablation.reference)


def _overall(ctx: Context, variant: str) -> pd.Series | None:
    frame = ctx.headline_scores()
    row = frame[(frame["variant"] == variant) & (frame["item"] == frames.OVERALL)]
    return row.iloc[0] if len(row) and pd.notna(row["lo"].iloc[0]) else None


def fix_change(ctx: Context, variant: str, broken: str) -> tuple[float, tuple[float, float]] | None:
    a, b = _overall(ctx, variant), _overall(ctx, broken)
    if a is None or b is None:
        return None
    return a["score"] - b["score"], diff_interval(
        a["score"], (a["lo"], a["hi"]), b["score"], (b["lo"], b["hi"])
    )


def paired_summary(ctx: Context) -> dict[str, Any] | None:
    """results/ablation/summary.json (the ablation stage's paired bootstrap rows), when the run has it."""
    summary = ctx.tree.summary("ablation")
    return summary if summary and isinstance(summary.get(ROWS), list) else None


def fix_cell(item: dict[str, Any] | None) -> str:
    """A fix's contribution in points with its interval (sign: > 0 means the fix helps)."""
    if not item:
        return NA
    lo, hi = item["fix_interval"]
    return f"{100 * item['fix_effect']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"


# The ablation stage's protocols: (key in its summary, None = the top level; how the report names the models;
# anchor of their table). The heads as fine-tuned come first: the verdicts are read on them, since the refit
# can rescue a fine-tuning run that broken settings collapsed (README, "Two ablation protocols").
PROTOCOLS = (
    (AS_FINETUNED, "each head as fine-tuned (before the refit)", "ablation-finetuned"),
    (None, "the saved models (after the head refit)", "ablation-paired"),
)


def protocols(paired: dict[str, Any]) -> list[tuple[dict[str, Any], str, str]]:
    """(rows block, label, anchor) of each protocol the ablation summary holds."""
    out = []
    for key, label, anchor in PROTOCOLS:
        block = paired if key is None else paired.get(key)
        if isinstance(block, dict) and isinstance(block.get(ROWS), list):
            out.append((block, label, anchor))
    return out


def _paired_claims(paired: dict[str, Any]) -> list[Claim]:
    return [_paired_claim(paired, block, label, anchor) for block, label, anchor in protocols(paired)]


def _paired_claim(paired: dict[str, Any], block: dict[str, Any], label: str, anchor: str) -> Claim:
    conf = round(100 * paired["confidence"])
    parts = []
    for kind, where in (
        ("added", f"added to {paired['broken']}"),
        ("removed", f"removed from {paired['reference']}"),
    ):
        rows = [r for r in block[ROWS] if r["kind"] == kind and OVERALL in r["items"]]
        if not rows:
            continue
        by = {
            v: [
                f"{r['fix']} {fix_cell(r['items'][OVERALL])}"
                for r in rows
                if r["items"][OVERALL]["verdict"] == v
            ]
            for v in VERDICTS
        }
        said = [f"{VERDICTS[v]}: {', '.join(by[v])}" for v in VERDICTS if by[v]]
        parts.append(f"{where}, " + "; ".join(said))
    best = (block.get(MOST_IMPORTANT) or {}).get("overall")
    scores = {
        v: block[VARIANTS][v]["scores"][OVERALL]["score"] for v in (paired["reference"], paired["broken"])
    }
    text = (
        f"Which Bayesian GPM fixes matter, measured on {label} (four-section average on {paired['benchmark']}: "
        f"{paired['reference']} {100 * scores[paired['reference']]:.1f}, {paired['broken']} "
        f"{100 * scores[paired['broken']]:.1f}; points with {conf}% paired bootstrap intervals over "
        f"{paired['n_pairs']} pairs): "
        + ". ".join(parts)
        + (f". The fix that matters most: {best}." if best else ". No fix clears its interval.")
    )
    return Claim(text, anchor)


def _paired_table(paired: dict[str, Any], block: dict[str, Any], label: str, anchor: str) -> Table:
    items = [i for i in paired.get("items", []) if i != OVERALL]
    rows = []
    for r in block[ROWS]:
        what = f"{r['variant']} vs {r['baseline']}"
        rows.append(
            [
                r["fix"],
                r["kind"],
                what,
                fix_cell(r["items"].get(OVERALL)),
                r["items"].get(OVERALL, {}).get("verdict", NA),
            ]
            + [fix_cell(r["items"].get(i)) for i in items]
        )
    conf = round(100 * paired["confidence"])
    return Table(
        f"Each fix's effect on {paired['benchmark']}, added to {paired['broken']} and removed from "
        f"{paired['reference']}: {label}",
        ["Fix", "Kind", "Contrast", f"Average [{conf}%]", "Verdict", *(ITEM_TITLES.get(i, i) for i in items)],
        rows,
        f"Points; > 0 means the fix helps (a removal row's difference with its sign flipped). {conf}% percentile "
        f"intervals from {paired['bootstrap_resamples']} paired bootstrap resamples of the {paired['n_pairs']} "
        "test pairs (drawn within each subset, the same draw for both variants; section-weighted scores "
        "recomputed as the evaluation does). Verdict on the average: matters (interval above 0), neutral "
        "(contains 0), hurts (below 0). Written by the ablation stage (results/ablation/summary.json). The "
        "head refit (train.head_fit) fits each head alone on frozen features after fine-tuning, which can rescue "
        "a run the broken settings collapsed; the heads as fine-tuned show what the Bayesian objective trained.",
        anchor=anchor,
    )


def claims(ctx: Context) -> list[Claim]:
    paired = paired_summary(ctx)
    if paired is not None:
        return _paired_claims(paired)
    ordered, broken = order(ctx)
    if broken is None or _overall(ctx, broken) is None:
        return []
    b = _overall(ctx, broken)
    matter, unclear = [], []
    for v in ordered[1:]:
        change = fix_change(ctx, v, broken)
        if change is None:
            continue
        text = f"{v} {pts(*change)}"
        (unclear if interval_side(change[1]) == STRADDLES_ZERO else matter).append(text)
    against = (
        broken
        if _is_declared_broken(ctx, broken)
        else f"{broken}, {_FARTHEST.format(ctx.settings.ablation.reference)}"
    )
    text = f"Bayesian fixes vs {against} ({pct(b['score'], (b['lo'], b['hi']))} overall on {ctx.bench}): "
    text += (
        ("changes beyond the interval: " + "; ".join(matter)) if matter else "no change beyond its interval"
    )
    text += (". No clear effect: " + "; ".join(unclear)) if unclear else ""
    return [Claim(text + ".", "ablation-table")]


def build(ctx: Context) -> Section | None:
    ordered, broken = order(ctx)
    if not ordered or ctx.bench is None:
        return None
    ab = ctx.settings.ablation
    rows, ests = [], []
    broken_config = _settings(ctx, broken) if broken else None
    for v in [*ordered, *[b for b in ab.baselines if b in ctx.variants]]:
        config = _settings(ctx, v)
        if v in ab.baselines:
            what = "baseline (not Bayesian)"
        elif v == broken:
            what = _broken_label(ctx, broken)
        elif config is None or broken_config is None:
            what = NA
        else:
            what = "; ".join(diff(config, broken_config)) or "same settings as broken"
        over = _overall(ctx, v)
        change = fix_change(ctx, v, broken) if broken and v != broken else None
        rows.append(
            [
                v,
                what,
                pct(over["score"], (over["lo"], over["hi"])) if over is not None else NA,
                pts(*change) if change else NA,
            ]
        )
        if over is not None:
            ests.append(plots.Estimate(v, over["score"], over["lo"], over["hi"], ctx.colors[v]))
    paired = paired_summary(ctx)
    blocks: list = [_paired_table(paired, *p) for p in protocols(paired)] if paired is not None else []
    blocks += [
        Table(
            f"Overall accuracy on {ctx.bench} per ablation variant",
            ["Variant", f"Fix applied to {broken or 'broken'}", "Overall [95%]", f"Change vs {broken} [95%]"],
            rows,
            "Settings from each variant's config.json; the change interval treats the two estimates as "
            "independent (normal approximation). Section scores are in the table above.",
            anchor="ablation-table",
        )
    ]
    blocks += ctx.figure(
        "ablation",
        "Bayesian GPM ablation",
        plots.intervals(
            [(f"Overall accuracy on {ctx.bench}", ests)], ctx.settings.figure_dpi, "accuracy (%)"
        ),
        "One dot per variant with its 95% interval; a fix matters when its interval clears the broken one's.",
    )
    return Section(TITLE, blocks, ANCHOR)
