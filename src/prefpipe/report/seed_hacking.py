"""Reward hacking over seeds: each GRPO run's standardised hacking gap (summary.json `reward_hacking`, grpo/analyses/hacking.py)
as mean ± sample sd over the results trees, the risk-averse runs' penalty-spread ratio (`risk_penalty`,
grpo/analyses/risk.py) the same way, and each risk-averse run against every other run with a gap, paired by seed: the
mean difference of the gaps with a t interval on n - 1 degrees of freedom. With three seeds t(0.975, 2) = 4.30, so
the interval is wide; it is reported as it is, never narrowed.

A run is risk-averse when its summary has a `risk_penalty` block (a reward-model reward with risk_aversion > 0);
runs without a gap (a pairwise head with group opponents: its mean is fixed by construction) are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prefpipe.common.stats import mean_sd, paired_t_interval
from prefpipe.grpo.metric_names import REWARD_HACKING, RISK_PENALTY
from prefpipe.report.inputs import Tree
from prefpipe.report.stats import as_float

GAP, RATIO = "gap", "spread_ratio"
NOTE = (
    "gap: standardised rm gain - verifier gain (> 0: the reward model's score rose more than the verifier's "
    "accuracy); spread_ratio: the risk penalty's within-group sd over the posterior-mean score's, over all steps "
    "(0: a constant shift that group-relative advantages cancel); differences paired by seed, t interval on "
    "n - 1 dof (wide with few seeds)"
)

WIDE = (
    "With n = {n} seeds the interval is mean ± t·sd/√n with t = {t:.2f} ({dof} dof): wide by design; one that "
    "straddles 0 says these seeds cannot tell the two runs apart."
)


def run_figures(tree: Tree) -> dict[str, dict[str, float]]:
    """{run: {"gap": g, "spread_ratio": r (risk-averse runs only)}} of one tree's runs that have a gap."""
    out: dict[str, dict[str, float]] = {}
    for run in tree.names("grpo"):
        summary = tree.summary("grpo", run) or {}
        hacking = summary.get(REWARD_HACKING) or {}
        gap = as_float(hacking.get(GAP))
        if gap is None:
            continue
        figures = {GAP: gap}
        risk = (summary.get(RISK_PENALTY) or {}).get(hacking.get("rm_part")) or {}
        ratio = as_float((risk.get("all_steps") or {}).get(RATIO))
        if ratio is not None:
            figures[RATIO] = ratio
        out[run] = figures
    return out


def _contrast(trees: Sequence[Tree], per_tree: list[dict], a: str, b: str, confidence: float) -> dict:
    both = [i for i, figures in enumerate(per_tree) if a in figures and b in figures]
    gaps_a, gaps_b = ([per_tree[i][run][GAP] for i in both] for run in (a, b))
    diff = paired_t_interval(gaps_a, gaps_b, confidence)
    return {"a": a, "b": b, "seeds": [trees[i].seed for i in both], **diff}


def across(
    trees: Sequence[Tree], confidence: dict[str, float], controls: dict[str, list[str]] | None = None
) -> dict[str, Any] | None:
    """{note, runs: {run: {gap, spread_ratio}: mean_sd}, contrasts: [a - b paired by seed]}; None when no tree
    has a run with a gap. `confidence`: each run's interval level (grpo.<run>.eval.confidence), a's is used.
    `controls`: the runs each risk-averse run is set against (seed_summary.controls: the baseline and its own
    k = 0 run), so the table holds the contrasts planned, not every pair; None: every run without a penalty."""
    per_tree = [run_figures(tree) for tree in trees]
    runs = list(dict.fromkeys(run for figures in per_tree for run in figures))
    if not runs:
        return None
    stats = {}
    for run in runs:
        items = {item: [f[run][item] for f in per_tree if item in f.get(run, {})] for item in (GAP, RATIO)}
        stats[run] = {item: mean_sd(values) for item, values in items.items() if values}
    averse = [run for run in runs if RATIO in stats[run]]
    contrasts = [
        _contrast(trees, per_tree, a, b, confidence[a])
        for a in averse
        for b in runs
        if b not in averse and (controls is None or b in controls.get(a, []))
    ]
    return {"note": NOTE, "runs": stats, "contrasts": contrasts}


def _stat(stat: dict[str, Any] | None, signed: bool = True) -> str:
    """'+0.42 ± 0.10 (n=3)' (a gap or a difference); unsigned with three decimals for a ratio."""
    if not stat or stat["mean"] is None:
        return "–"
    fmt, sd_fmt = ("+.2f", ".2f") if signed else (".3f", ".3f")
    sd = f" ± {stat['sd']:{sd_fmt}}" if stat["sd"] is not None else ""
    return f"{stat['mean']:{fmt}}{sd} (n={stat['n']})"


def markdown(block: dict[str, Any] | None) -> list[str]:
    """The two tables of summary.md (no lines without a block)."""
    if not block:
        return []
    lines = ["", "## Reward hacking over seeds", "", block["note"] + ".", ""]
    lines += ["| Run | Hacking gap (sd) | Penalty spread ratio |", "|---|---:|---:|"]
    for run, stats in block["runs"].items():
        lines.append(f"| {run} | {_stat(stats.get(GAP))} | {_stat(stats.get(RATIO), signed=False)} |")
    if block["contrasts"]:
        lines += ["", "| Difference of gaps | Mean ± sd | t interval | dof |", "|---|---:|---:|---:|"]
    for c in block["contrasts"]:
        ci = "–" if c["ci"] is None else f"[{c['ci'][0]:+.2f}, {c['ci'][1]:+.2f}] ({c['confidence']:.0%})"
        lines.append(f"| {c['a']} − {c['b']} | {_stat(c)} | {ci} | {c['dof']} |")
    for n, t in sorted({(c["n"], c["t"]) for c in block["contrasts"] if c["t"] is not None}):
        lines += ["", WIDE.format(n=n, t=t, dof=n - 1)]
    return lines
