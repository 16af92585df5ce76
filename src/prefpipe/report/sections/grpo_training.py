"""GRPO training: the runs side by side (at most four per panel), and the diagnostics checks with the first
step where each fires."""

from __future__ import annotations

from prefpipe.grpo import metric_names as gm
from prefpipe.grpo.analyses.health import diagnose, explain_unrecorded
from prefpipe.report import frames
from prefpipe.report.document import Section, Table
from prefpipe.report.sections import Context
from prefpipe.report.sections.calibration import groups
from prefpipe.report.sections.reward_training import training_figures
from prefpipe.report.stats import NA, num

TITLE, ANCHOR = "GRPO training", "grpo-training"
PANELS = (
    (gm.REWARD_MEAN, "Total reward (mean)", False),
    (gm.KL_MEAN.format(name="k3"), "KL to reference, k3 mean per token", False),
    (gm.MAX_ABS_LOG_RATIO, "Max |log-ratio| (nats)", False),
    (gm.ENTROPY, "Entropy (nats/token)", False),
    (gm.LENGTH_MEAN, "Completion length (mean tokens)", False),
    (gm.TRUNCATED_RATIO, "Truncated completions", False),
    (gm.FRAC_REWARD_ZERO_STD, "Groups with zero reward spread", False),
    (gm.GRAD_NORM, "Grad norm before clipping", False),
    (gm.CLIP_RATIO_REGION, "Clipped token ratio", False),
)


def _sources(config: dict) -> str:
    specs = config.get("rewards") or []
    return ", ".join(f"{s.get('type')} x{s.get('weight')}" for s in specs if isinstance(s, dict)) or NA


def _phase_table(metrics, names: list[str]) -> Table | None:
    """Where each run's step time went: the mean share of each phase over its steps (runs that logged them)."""
    keys = [f"{gm.PHASE_PREFIX}{p}_share" for p in gm.PHASES]
    if metrics.empty or not set(keys) <= set(metrics.columns):
        return None
    rows = []
    for run in names:
        part = metrics[metrics["run"] == run]
        if part[keys].notna().all(axis=1).any():
            shares = [f"{100 * part[k].mean():.0f}%" for k in keys]
            rows.append([run, num(part[gm.STEP_TIME].mean()), *shares])
    if not rows:
        return None
    return Table(
        "Where the step time goes (mean share per phase; the device synchronised at each phase boundary)",
        ["Run", "s/step", *gm.PHASES],
        rows,
        anchor="grpo-phases",
    )


def build(ctx: Context) -> Section | None:
    metrics = frames.metrics(ctx.tree, "grpo_metrics", "run")
    if metrics.empty and not ctx.tree.names("grpo"):
        return None
    rows = []
    for run in ctx.runs:
        config = ctx.tree.config("grpo", run) or {}
        summary = ctx.tree.summary("grpo", run) or {}
        rows.append(
            [
                run,
                _sources(config),
                str(config.get("reward_model") or NA),
                num(config.get("beta")),
                num(summary.get("steps")),
                num(summary.get("seconds_per_step")),
            ]
        )
    blocks: list = [
        Table(
            "GRPO runs",
            ["Run", "Rewards (type x weight)", "Reward model", "beta", "Steps", "s/step"],
            rows,
            anchor="grpo-runs",
        )
    ]
    names = [r for r in ctx.runs if not metrics.empty and r in set(metrics["run"])]
    phases = _phase_table(metrics, names)
    if phases is not None:
        blocks.append(phases)
    blocks += training_figures(ctx, metrics, groups(names, []), "run", PANELS, "grpo")
    betas = {r: (ctx.tree.config("grpo", r) or {}).get("beta") for r in ctx.runs}
    flags = explain_unrecorded(diagnose(metrics, "run", ctx.settings.diagnostics), betas)
    if flags:
        fired = [f for f in flags if f.status == "flagged"]
        blocks.append(
            Table(
                f"Diagnostics: {len(fired)} of {len(flags)} checks fired",
                ["Run", "Check", "Status", "First step", "Value", "Rule"],
                [
                    [
                        f.run,
                        f.check,
                        f.status,
                        NA if f.first_step is None else str(f.first_step),
                        num(f.value),
                        f.rule,
                    ]
                    for f in flags
                ],
                "Thresholds from report.diagnostics; each check scans the logged steps in order.",
                [("flag" if f.status == "flagged" else "") for f in flags],
                anchor="grpo-diagnostics",
            )
        )
    return Section(TITLE, blocks, ANCHOR)
