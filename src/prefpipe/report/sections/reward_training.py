"""Reward-model training curves: one figure per group of at most four variants (main heads first); panels whose
curves do not vary are left out and named in the caption."""

from __future__ import annotations

from prefpipe.grpo.analyses.health import REWARD_CHECKS, diagnose
from prefpipe.report import frames, plots
from prefpipe.report.document import Section, Table
from prefpipe.report.sections import Context
from prefpipe.report.sections.calibration import groups
from prefpipe.report.stats import num
from prefpipe.reward import metrics as rt

TITLE, ANCHOR = "Reward-model training", "reward-training"
PANELS = (
    (rt.PREFERENCE_LOSS, "Preference loss", False),
    (rt.PROB, "Mean P(chosen > rejected)", False),
    (rt.ACCURACY, "Train accuracy", False),
    (rt.KL_LOSS, "KL loss (log)", True),
    (rt.KL_BETA, "KL weight (log)", True),
    (rt.GRAD_NORM, "Grad norm before clipping", False),
)


def training_figures(
    ctx: Context, metrics, name_groups: list[list[str]], key: str, spec, prefix: str
) -> list:
    """One curve figure per group of variants or runs (at most four curves a panel), named <prefix>_<n>."""
    blocks: list = []
    title = TITLES[prefix]
    for i, group in enumerate(name_groups):
        shown, flat = panels(ctx, metrics, group, key, spec)
        caption = f"{', '.join(group)}: faint raw values, bold rolling mean over {ctx.settings.smooth_window} steps."
        caption += f" Constant, not drawn: {'; '.join(flat)}." if flat else ""
        blocks += ctx.figure(
            f"{prefix}_{i + 1}",
            title,
            plots.curves(shown, ctx.settings.smooth_window, ctx.settings.figure_dpi),
            caption,
        )
    return blocks


TITLES = {
    "reward_training": "Reward-model training",
    "grpo": "GRPO training",
    "episodes": "Multi-turn training episodes",
}


def panels(ctx: Context, metrics, group: list[str], key: str, spec) -> tuple[list, list[str]]:
    """(panels with something to show, titles of the flat ones) for one group of names."""
    shown, flat = [], []
    for metric, title, log in spec:
        cs = []
        for name in group:
            mine = metrics[metrics[key] == name].sort_values("step")
            if metric in mine and mine[metric].notna().any():
                cs.append(plots.Curve(name, mine["step"], mine[metric], ctx.colors[name]))
        if not cs:
            continue
        if plots.is_flat(cs):
            flat.append(f"{title} = {num(cs[0].y.dropna().iloc[0])}")
        else:
            shown.append((title, cs, log))
    return shown, flat


def build(ctx: Context) -> Section | None:
    metrics = frames.metrics(ctx.tree, "reward_metrics", "variant")
    if metrics.empty:
        return None
    blocks: list = []
    names = [v for v in ctx.variants if v in set(metrics["variant"])]
    blocks += training_figures(ctx, metrics, groups(names, ctx.heads), "variant", PANELS, "reward_training")
    last = metrics.sort_values("step").groupby("variant").last()
    rows = [[v, *[num(last.loc[v].get(m)) for m, _, _ in PANELS]] for v in names]
    blocks.append(Table("Last logged values", ["Variant", *[t for _, t, _ in PANELS]], rows))
    flags = [
        f
        for f in diagnose(metrics, "variant", ctx.settings.diagnostics, REWARD_CHECKS)
        if f.status == "flagged"
    ]
    if flags:
        blocks.append(
            Table(
                "Unhealthy signs",
                ["Variant", "Check", "First step", "Value", "Rule"],
                [[f.run, f.check, str(f.first_step), num(f.value), f.rule] for f in flags],
            )
        )
    return Section(TITLE, blocks, ANCHOR)
