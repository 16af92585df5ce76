"""GRPO learning curves: the policy's accuracy on a fixed set of evaluation prompts during training (train_grpo's
curve.jsonl: greedy and sampled), beside the training reward and the completion length of the same run."""

from __future__ import annotations

import pandas as pd

from prefpipe.grpo import metric_names as gm
from prefpipe.report import frames, plots
from prefpipe.report.document import Section, Table
from prefpipe.report.sections import Context
from prefpipe.report.sections.calibration import groups
from prefpipe.report.stats import NA, num, pct, wilson

TITLE, ANCHOR = "GRPO: learning curves on evaluation prompts", "policy-curve"
DECODINGS = ("greedy", "sampled")


def _curves(ctx: Context) -> dict[str, pd.DataFrame]:
    """{run: its curve points sorted by step}, runs with at least one point."""
    out = {}
    for run, rows in ctx.tree.rows.get("grpo_curve", {}).items():
        if rows:
            out[run] = pd.DataFrame(rows).sort_values("step", kind="stable").reset_index(drop=True)
    return out


def _window_means(metrics: pd.DataFrame, run: str, steps: list[int]) -> list[tuple[float | None, ...]]:
    """Per curve point after s updates: mean training reward and completion length of the updates since the
    previous point (logged steps prev..s-1); None at the first point (no update yet)."""
    mine = metrics[metrics["run"] == run] if not metrics.empty else metrics
    out, prev = [], 0
    for s in steps:
        part = mine[(mine["step"] >= prev) & (mine["step"] < s)] if s > prev else mine.iloc[0:0]
        reward = part[gm.REWARD_MEAN].mean() if gm.REWARD_MEAN in part and not part.empty else None
        length = part[gm.LENGTH_MEAN].mean() if gm.LENGTH_MEAN in part and not part.empty else None
        out.append((reward, length))
        prev = s
    return out


def _table(curves: dict[str, pd.DataFrame], metrics: pd.DataFrame) -> Table:
    rows = []
    for run, frame in curves.items():
        steps = [int(s) for s in frame["step"]]
        for point, (reward, length) in zip(
            frame.itertuples(), _window_means(metrics, run, steps), strict=True
        ):
            n = int(point.n)
            cells = [
                pct(getattr(point, f"{d}_accuracy"), wilson(getattr(point, f"{d}_correct"), n))
                for d in DECODINGS
            ]
            rows.append(
                [
                    run,
                    str(point.step),
                    *cells,
                    f"{num(point.greedy_mean_length, 3)} ({pct(point.greedy_truncated_ratio)})",
                    num(reward, 3) if reward is not None else NA,
                    num(length, 3) if length is not None else NA,
                    f"{n} ({point.split})",
                ]
            )
    return Table(
        "Accuracy during training (evaluation prompts) beside the training reward and length",
        [
            "Run",
            "After step",
            "Greedy [95%]",
            "Sampled [95%]",
            "Greedy length (truncated)",
            "Training reward",
            "Training length",
            "Prompts (split)",
        ],
        rows,
        "After step s: the policy after s updates (0 = the starting policy), on the first eval.curve_prompts "
        "prompts of eval.split (Wilson intervals). Training reward and length: means over the updates since the "
        "previous point (training batches, sampled at the training temperature).",
        anchor="policy-curve-table",
    )


def _figure(
    ctx: Context, curves: dict[str, pd.DataFrame], metrics: pd.DataFrame, group: list[str], i: int
) -> list:
    def line(run: str, frame: pd.DataFrame, column: str, shift: int = 0) -> plots.Curve:
        return plots.Curve(run, frame["step"] + shift, frame[column].astype(float), ctx.colors[run])

    panels = [
        (f"Accuracy on evaluation prompts, {d}", [line(r, curves[r], f"{d}_accuracy") for r in group], False)
        for d in DECODINGS
    ]
    for metric, title in ((gm.REWARD_MEAN, "Training reward (mean)"), (gm.LENGTH_MEAN, "Training length")):
        train = []
        for r in group:
            mine = metrics[metrics["run"] == r].sort_values("step") if not metrics.empty else metrics
            if metric in mine and mine[metric].notna().any():
                train.append(line(r, mine, metric, shift=1))  # update t done = after t + 1 updates
        panels.append((title, train, False))
    png = plots.curves(panels, ctx.settings.smooth_window, ctx.settings.figure_dpi, "updates done")
    caption = (
        f"{', '.join(group)}: accuracy of the policy during training (curve.jsonl) beside the training "
        "reward and completion length per update (faint raw, bold rolling mean)."
    )
    return ctx.figure(f"policy_curve_{i + 1}", "Learning curves", png, caption)


def build(ctx: Context) -> Section | None:
    curves = _curves(ctx)
    if not curves:
        return None
    metrics = frames.metrics(ctx.tree, "grpo_metrics", "run")
    blocks: list = []
    for i, group in enumerate(groups(list(curves), [])):
        blocks += _figure(ctx, curves, metrics, group, i)
    blocks.append(_table(curves, metrics))
    return Section(TITLE, blocks, ANCHOR)
