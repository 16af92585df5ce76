"""Calibration of P(chosen > rejected) on the headline benchmark: ECE, Brier, NLL, reliability diagrams and
selective accuracy (at most four variants per panel)."""

from __future__ import annotations

import pandas as pd

from prefpipe.evaluation.calibration import ECE, RELIABILITY, SELECTIVE
from prefpipe.evaluation.summary_keys import CALIBRATION
from prefpipe.report import frames, plots
from prefpipe.report.document import Section, Table
from prefpipe.report.sections import Context
from prefpipe.report.stats import num

TITLE, ANCHOR = "Calibration", "calibration"


def calibration_blocks(ctx: Context) -> dict[str, dict]:
    out = {}
    for v in ctx.variants:
        block = frames.benchmark_blocks(ctx.tree.summary("eval", v)).get(ctx.bench or "", {}).get(CALIBRATION)
        if isinstance(block, dict):
            out[v] = block
    return out


def groups(names: list[str], first: list[str]) -> list[list[str]]:
    """The main heads first, then the rest in groups of at most plots.MAX_CURVES."""
    head = [n for n in first if n in names][: plots.MAX_CURVES]
    rest = [n for n in names if n not in head]
    size = plots.MAX_CURVES
    return ([head] if head else []) + [rest[i : i + size] for i in range(0, len(rest), size)]


def _curve(ctx: Context, v: str, points: list, x: str) -> plots.Curve | None:
    frame = pd.DataFrame([p for p in points if isinstance(p, dict)])
    if frame.empty or x not in frame or "accuracy" not in frame:
        return None
    frame = frame.sort_values(x)
    return plots.Curve(v, frame[x], frame["accuracy"], ctx.colors[v])


def build(ctx: Context) -> Section | None:
    cal = calibration_blocks(ctx)
    if not cal:
        return None
    rows = [
        [v, num(b.get(ECE)), num(b.get("brier")), num(b.get("nll")), num(b.get("mean_confidence"))]
        for v, b in cal.items()
    ]
    blocks: list = [
        Table(
            f"Calibration on {ctx.bench} (lower is better)",
            ["Variant", "ECE", "Brier", "NLL", "Mean confidence"],
            rows,
            anchor="calibration-table",
        )
    ]
    panels = []
    for i, group in enumerate(groups(list(cal), ctx.heads)):
        tag = "main heads" if i == 0 and set(group) <= set(ctx.heads) else f"group {i + 1}"
        rel = [c for v in group if (c := _curve(ctx, v, cal[v].get(RELIABILITY) or [], "confidence"))]
        sel = [c for v in group if (c := _curve(ctx, v, cal[v].get(SELECTIVE) or [], "coverage"))]
        panels += [(f"Reliability: {tag}", rel, False), (f"Selective accuracy: {tag}", sel, False)]
    rel_panels = [p for p in panels if p[0].startswith("Reliability")]
    sel_panels = [p for p in panels if p[0].startswith("Selective")]
    dpi = ctx.settings.figure_dpi
    blocks += ctx.figure(
        "calibration",
        "Reliability diagrams",
        plots.curves(rel_panels, 1, dpi, xlabel="predicted confidence (bin mean)", diagonal=True),
        "Observed accuracy per confidence bin; the dotted diagonal is perfect calibration.",
    )
    blocks += ctx.figure(
        "selective",
        "Selective accuracy",
        plots.curves(sel_panels, 1, dpi, xlabel="coverage (share of pairs answered)"),
        "Accuracy on the pairs kept when the model abstains on its least certain ones first.",
    )
    return Section(TITLE, blocks, ANCHOR)
