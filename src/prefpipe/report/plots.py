"""Matplotlib figures as PNG bytes (Agg canvas through the object API: no pyplot state, no display needed).

Two kinds only, so every chart reads the same way: estimates with their 95% intervals (dots and whiskers, one
panel per section or decoding), and training curves (at most MAX_CURVES per panel, raw values faint with a
rolling mean on top). Legends sit outside the axes; a panel whose curves do not vary is left out and named by
the caller in a one-line note. Colours come from one map per report, so a head looks the same everywhere.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from prefpipe.reward.heads.facts import HEAD_FACTS

MAX_CURVES = 4
# A name that is a built-in head type keeps one of these, in the heads' order (reward/heads/facts.py).
HEAD_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c")
FIXED = dict(zip(HEAD_FACTS, HEAD_COLOURS, strict=False))
PALETTE = ("#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#d62728", "#393b79", "#637939")


def to_png(fig: Figure, dpi: int) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    return buffer.getvalue()


def colors(names: Sequence[str]) -> dict[str, str]:
    """Names of built-in head types keep their fixed colours; other names take the palette in the order given."""
    others = [n for n in dict.fromkeys(names) if n not in FIXED]
    return {**FIXED, **{n: PALETTE[i % len(PALETTE)] for i, n in enumerate(others)}}


@dataclass
class Estimate:
    label: str
    value: float
    lo: float | None
    hi: float | None
    color: str


def intervals(
    panels: Sequence[tuple[str, Sequence[Estimate]]], dpi: int, xlabel: str, chance: float | None = 50.0
) -> bytes | None:
    """One panel per entry: each estimate a dot with its 95% interval, in percent; dotted line at chance."""
    panels = [(t, rows) for t, rows in panels if rows]
    if not panels:
        return None
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    height = max(1.8, max(len(rows) for _, rows in panels) * 0.32 + 0.9)
    fig = Figure(figsize=(12, nrows * height), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False).ravel())
    for ax, (title, rows) in zip(axes, panels, strict=False):
        y = np.arange(len(rows))[::-1]
        for yi, est in zip(y, rows, strict=True):
            err = None
            if est.lo is not None and est.hi is not None:
                err = [[100 * (est.value - est.lo)], [100 * (est.hi - est.value)]]
            ax.errorbar(100 * est.value, yi, xerr=err, fmt="o", color=est.color, capsize=3, markersize=5)
        ax.set_yticks(y, [r.label for r in rows], fontsize=8)
        ax.set_ylim(-0.6, len(rows) - 0.4)
        if chance is not None:
            ax.axvline(chance, color="#888888", linestyle=":", linewidth=1)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", alpha=0.3)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    return to_png(fig, dpi)


@dataclass
class Curve:
    label: str
    x: pd.Series
    y: pd.Series
    color: str


def is_flat(curves: Sequence[Curve]) -> bool:
    values = pd.concat([c.y.astype(float) for c in curves]).dropna() if curves else pd.Series(dtype=float)
    return values.empty or bool(np.isclose(values.max(), values.min(), rtol=1e-9, atol=1e-12))


def curves(
    panels: Sequence[tuple[str, Sequence[Curve], bool]],
    smooth: int,
    dpi: int,
    xlabel: str = "step",
    diagonal: bool = False,
) -> bytes | None:
    """Line panels (title, curves, log y); at most MAX_CURVES curves each, one shared legend below;
    `diagonal`: a dotted y = x line (reliability diagrams)."""
    panels = [p for p in panels if p[1]]
    if not panels:
        return None
    for title, group, _ in panels:
        if len(group) > MAX_CURVES:
            raise ValueError(f"panel {title!r}: {len(group)} curves (at most {MAX_CURVES}); facet it")
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = Figure(figsize=(12, 2.6 * nrows + 0.5), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False).ravel())
    legend: dict[str, object] = {}
    for ax, (title, group, log) in zip(axes, panels, strict=False):
        for curve in group:
            y = curve.y.astype(float)
            keep = y > 0 if log else y.notna()
            x, y = curve.x[keep], y[keep]
            faint = smooth > 1 and len(y) > smooth
            ax.plot(x, y, color=curve.color, alpha=0.3 if faint else 1.0, linewidth=0.8)
            if faint:
                ax.plot(x, y.rolling(smooth, min_periods=1).mean(), color=curve.color, linewidth=1.4)
            legend.setdefault(curve.label, ax.get_lines()[-1])
        if diagonal:
            ax.plot([0, 1], [0, 1], color="#888888", linestyle=":", linewidth=1)
        if log:
            ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    fig.legend(
        list(legend.values()),
        list(legend),
        loc="outside lower center",
        ncols=min(len(legend), 6),
        fontsize=8,
        frameon=False,
    )
    return to_png(fig, dpi)
