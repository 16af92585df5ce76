"""The two rows of the what-to-use-when board (uses.py) read over seeds, each with a t interval on n - 1
degrees of freedom (common.stats.paired_t_interval):

- label saving, from results/active_learning/summary.json: per strategy and seed the share of labels it needs
  fewer than random selection for the same target (the full-data target where the rounds ran over the whole
  pool, else random's accuracy after its last round), the curve stage's own per-seed figures;
- RL safety, from the GRPO summaries of this experiment's trees (this run's and the compared seeds'): each
  risk-averse run's hacking gap minus its k = 0 control's (the run paid by the same reward model paying the
  same quantity, grpo.paid_quantity, and no aversion), paired by seed (report/seed_hacking.py's gaps).
The best is the largest saving / the most negative gap difference; the runner-up's gap to it is paired by
seed too, so "resolved" means that interval excludes 0."""

from __future__ import annotations

from typing import Any

from prefpipe.common.stats import STRADDLES_ZERO, interval_side, paired_t_interval
from prefpipe.grpo.analyses.hacking import RM_SOURCE
from prefpipe.grpo.paid_quantity import paid_quantity
from prefpipe.report import seed_hacking
from prefpipe.report.inputs import Tree
from prefpipe.report.scoreboard.across import by_experiment
from prefpipe.report.scoreboard.uses_types import LEVEL, Use
from prefpipe.report.sections import Context, active_learning

REFERENCE = "random"


def _resolved(diff: dict[str, Any]) -> bool | None:
    return None if diff["ci"] is None else interval_side(diff["ci"]) != STRADDLES_ZERO


def _with_ci(diff: dict[str, Any], scale: float, fmt: str) -> str:
    text = format(scale * diff["mean"], fmt)
    if diff["ci"] is not None:
        lo, hi = (format(scale * c, fmt) for c in diff["ci"])
        text += f" [{lo}, {hi}]"
    return text + f" ({diff['n']} seed{'s' if diff['n'] != 1 else ''})"


def _ranked(
    series: dict[str, list[float]], baseline: dict[str, list[float]], sign: float
) -> list[tuple[str, dict[str, Any]]]:
    """(name, series - its baseline paired by seed) ordered best first (largest sign * mean)."""
    found = {k: paired_t_interval(v, baseline[k], LEVEL) for k, v in series.items()}
    return sorted(found.items(), key=lambda kv: -sign * kv[1]["mean"])


def _use(name: str, measure: str, anchor: str, ranked: list, series: dict, scale: float, fmt: str) -> Use:
    """The row: the best's figure and the runner-up's, and the best minus the runner-up paired by seed."""
    (best, diff), rest = ranked[0], ranked[1:]
    use = Use(name, measure, best, _with_ci(diff, scale, fmt), anchor)
    if rest:
        runner, other = rest[0]
        use.runner, use.runner_figure = runner, _with_ci(other, scale, fmt)
        if len(series[best]) == len(series[runner]):  # the same seeds: the gap paired by seed
            gap = paired_t_interval(series[best], series[runner], LEVEL)
            use.by, use.resolved = _with_ci(gap, scale, fmt), _resolved(gap)
    return use


def _saving_inputs(summary: dict[str, Any]) -> tuple[str, dict[str, dict], dict[str, float]] | None:
    """(what the target is, {strategy: per-seed labels needed}, random's per-seed labels for it)."""
    full = summary.get("full_data") or {}
    if full.get("whole_pool") and REFERENCE in full.get("strategies", {}):
        table = {s: row["per_seed"] for s, row in full["strategies"].items()}
        return f"full data × {full['fraction']:g}", table, table[REFERENCE]
    needed = summary.get("labels_needed")
    if not needed:
        return None
    final = float(summary["labels"][-1])
    table = {s: row["per_seed"] for s, row in needed.items()}
    return f"random's at {final:.0f}", table, dict.fromkeys(table[REFERENCE], final)


def label_saving(ctx: Context) -> Use | None:
    summary = ctx.tree.summary(active_learning.KIND)
    found = _saving_inputs(summary) if summary else None
    if found is None:
        return None
    target, table, base = found
    measure = f"% labels saved vs random (to {target})"
    shares = {
        s: [1.0 - v / base[seed] for seed, v in per_seed.items()]
        for s, per_seed in table.items()
        if s != REFERENCE and all(v is not None and base.get(seed) for seed, v in per_seed.items())
    }
    if not shares:
        missed = ", ".join(s for s in table if s != REFERENCE)
        return Use(
            "Label saving",
            measure,
            "none",
            f"no strategy reaches it on every seed ({missed})",
            "active-learning",
        )
    zeros = {s: [0.0] * len(v) for s, v in shares.items()}
    use = _use(
        "Label saving",
        measure,
        active_learning.TABLE_ANCHOR,
        _ranked(shares, zeros, 1.0),
        shares,
        100.0,
        "+.1f",
    )
    described = active_learning.DESCRIBED.get(use.winner)
    use.winner += f" ({described})" if described else ""
    return use


def _risk_spec(config: dict[str, Any] | None) -> tuple[str, float, tuple[str, str]] | None:
    """(reward model, risk aversion, what it pays at k = 0) of a run paid by a reward model, from its
    config.json."""
    specs = [s for s in (config or {}).get("rewards") or [] if s.get("type") == RM_SOURCE]
    if not specs or not (config or {}).get("reward_model"):
        return None
    spec = specs[0]
    return (
        config["reward_model"],
        float(spec.get("risk_aversion") or 0.0),
        paid_quantity(spec),
    )


def controls(tree: Tree) -> dict[str, str]:
    """{risk-averse run: its k = 0 control}: the same reward model paying the same quantity without aversion."""
    specs = {run: s for run in tree.names("grpo") if (s := _risk_spec(tree.config("grpo", run)))}
    plain = {(rm, measure): run for run, (rm, k, measure) in specs.items() if k == 0}
    return {
        run: plain[(rm, measure)]
        for run, (rm, k, measure) in specs.items()
        if k > 0 and (rm, measure) in plain
    }


def rl_safety(ctx: Context) -> Use | None:
    pairs = controls(ctx.tree)
    if not pairs:
        return None
    trees = by_experiment(ctx)[ctx.tree.experiment]
    gaps = [seed_hacking.run_figures(t) for t in trees]
    series: dict[str, list[float]] = {}
    baseline: dict[str, list[float]] = {}
    for run, control in pairs.items():
        both = [g for g in gaps if run in g and control in g]
        if both:
            series[run] = [g[run][seed_hacking.GAP] - g[control][seed_hacking.GAP] for g in both]
            baseline[run] = [0.0] * len(both)
    if not series:
        return None
    ranked = _ranked(series, baseline, -1.0)
    measure = "hacking gap − its k = 0 control's"
    use = _use("RL safety", measure, "overoptimisation", ranked, series, 1.0, "+.2f")
    use.winner += f" (vs {pairs[use.winner]})"
    return use
