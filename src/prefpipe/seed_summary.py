"""Mean ± sd over seeds of the headline figures (sections, four-section average, cyclic, ECE per variant; the
ablation's fix effects; GRPO runs' reward-hacking gaps with paired t intervals, report/seed_hacking.py), from one
results tree per seed; the last step of scripts/seeds.sh.

    python -m prefpipe.seed_summary --configfile config/experiments/seeds.yaml --out results/seeds \\
        results/seeds/seed-0 results/seeds/seed-1 results/seeds/seed-2

The config names the variants (reward.variants narrowed by reward.only) and the headline benchmark
(report.primary_benchmark, else the one the evaluations record), so each tree is read through the same declared
files the report reads (prefpipe.report.inputs), never by listing folders. Writes <out>/summary.json and
<out>/summary.md atomically; exits 2 with one line naming the folder when a tree is missing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from prefpipe.common.config import UserError
from prefpipe.common.io import atomic_write_json, atomic_write_text
from prefpipe.common.logs import setup_logging
from prefpipe.grpo.analyses.hacking import RM_SOURCE
from prefpipe.grpo.paid_quantity import paid_quantity
from prefpipe.report import frames, seed_hacking, seed_stats
from prefpipe.report.inputs import Manifest, read_tree
from prefpipe.reward.heads.registry import get_head_class
from prefpipe.settings.grpo import GrpoSettings
from prefpipe.settings.pipeline import PipelineSettings, load_config


def _risk_averse(run: GrpoSettings) -> bool:
    return any(spec["type"] == RM_SOURCE and spec["risk_aversion"] for spec in run.rewards)


def _measure(run: GrpoSettings) -> tuple[str, str] | None:
    """What the run's reward-model reward pays per comparison at k = 0 (grpo.paid_quantity)."""
    return next((paid_quantity(spec) for spec in run.rewards if spec["type"] == RM_SOURCE), None)


def controls(settings: PipelineSettings) -> dict[str, list[str]]:
    """{risk-averse run: the runs without risk aversion it is compared with}: those paid by the same reward
    model paying the same quantity (its k = 0 control: the risk term alone changes) and those paid by a
    scalar-head reward model (the BT baseline: head and risk term change together)."""

    def scalar(run: GrpoSettings) -> bool:
        variant = settings.reward.get(run.reward_model or "")
        return variant is not None and get_head_class(variant.head.type).scalar_reward

    def own(run: GrpoSettings, other: GrpoSettings) -> bool:
        return other.reward_model == run.reward_model and _measure(other) == _measure(run)

    plain = {
        name: run for name, run in settings.grpo.items() if run.uses_reward_model() and not _risk_averse(run)
    }
    return {
        name: [b for b, other in plain.items() if own(run, other) or scalar(other)]
        for name, run in settings.grpo.items()
        if _risk_averse(run)
    }


def summarize(settings: PipelineSettings, roots: list[Path]) -> dict[str, Any]:
    missing = [str(r) for r in roots if not r.is_dir()]
    if missing:
        raise UserError(f"seed_summary: no results folder {', '.join(missing)}")
    manifest = Manifest.standard(
        list(settings.reward), list(settings.grpo), list(settings.eval.eval.ensembles)
    )
    trees = [read_tree(root, manifest, root.name, strict=True) for root in roots]
    configured = settings.report.primary_benchmark if settings.report else None
    bench, _ = frames.headline(trees[0], configured)
    stats = seed_stats.across(trees, bench)
    variants: dict[str, dict[str, Any]] = {}
    ablation: dict[str, Any] = {}
    for (owner, item), stat in stats.items():
        if owner == "ablation":
            ablation[item] = stat
        else:
            variants.setdefault(owner, {})[item] = stat
    return {
        "experiment": trees[0].experiment,
        "benchmark": bench,
        "trees": [
            {"name": t.name, "root": str(t.root), "seed": t.seed, "experiment": t.experiment} for t in trees
        ],
        "statistic": "mean and sample standard deviation over the trees that have the figure (n)",
        "variants": variants,
        "ablation_fix_effects": ablation,
        "grpo_hacking": seed_hacking.across(
            trees, {run: s.eval.confidence for run, s in settings.grpo.items()}, controls(settings)
        ),
        "missing_files": [note for t in trees for note in t.notes],
    }


def markdown(summary: dict[str, Any]) -> str:
    seeds = ", ".join(str(t["seed"]) for t in summary["trees"])
    items = list(seed_stats.ITEMS)
    lines = [
        f"# {summary['experiment']}: mean ± sd over seeds {seeds} ({summary['benchmark']})",
        "",
        "Accuracies and ECE in %; sample standard deviation over seeds.",
        "",
        "| Variant | " + " | ".join(seed_stats.ITEMS[i] for i in items) + " |",
        "|---|" + "---:|" * len(items),
    ]
    for variant, stats in summary["variants"].items():
        lines.append(f"| {variant} | " + " | ".join(seed_stats.cell(stats.get(i)) for i in items) + " |")
    if summary["ablation_fix_effects"]:
        lines += ["", "Bayesian GPM ablation: each fix's effect on the four-section average (points).", ""]
        lines += ["| Fix | Kind | Effect |", "|---|---|---:|"]
        for key, stat in summary["ablation_fix_effects"].items():
            fix, kind = key.split(" ", 1)
            lines.append(f"| {fix} | {kind} | {seed_stats.cell(stat, signed=True)} |")
    lines += seed_hacking.markdown(summary["grpo_hacking"])
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    parser = argparse.ArgumentParser(prog="python -m prefpipe.seed_summary")
    parser.add_argument("--configfile", nargs="*", default=[], help="the experiment's config overlays")
    parser.add_argument("--out", required=True, help="folder for summary.json and summary.md")
    parser.add_argument("trees", nargs="+", help="one results folder per seed")
    args = parser.parse_args(argv)
    try:
        settings = PipelineSettings.from_config(load_config(*args.configfile))
        summary = summarize(settings, [Path(t) for t in args.trees])
    except UserError as err:
        print(f"seed_summary: {err}", file=sys.stderr)
        return 2
    out = Path(args.out)
    atomic_write_json(out / "summary.json", summary)
    atomic_write_text(out / "summary.md", markdown(summary))
    print(f"seed_summary: {len(args.trees)} trees -> {out / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
