"""Assemble the report Document from collected trees: one function per report section, in reading order.

Every section says "not recorded" (with the file it looked for) instead of showing nothing or a made-up number.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from prefpipe.report import compare, fmt, plots, run_tables, tables
from prefpipe.report.collect import ResultsTree
from prefpipe.report.diagnostics import REWARD_CHECKS, Flag, diagnose, explain_unrecorded
from prefpipe.report.document import Document, Figure, Heading, Paragraph, Preformatted, Section, Table
from prefpipe.report.samples import sample_text
from prefpipe.report.settings import Settings


def _notes(tree: ResultsTree, *areas: str) -> list[Paragraph]:
    out = []
    for area in areas:
        for note in tree.notes_for(area):
            if note.kind == "missing":
                out.append(Paragraph(f"Not recorded: {note.message}.", "note"))
            elif note.kind == "unreadable":
                out.append(Paragraph(note.message, "warning"))
    return out


def _figure(name: str, title: str, png: bytes | None, caption: str = "") -> list[Any]:
    """A figure block if there was something to draw; the name becomes a file name (figures/<name>.png)."""
    safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", name)
    return [Figure(safe, title, png, caption)] if png else []


def overview(tree: ResultsTree, others: Sequence[ResultsTree], s: Settings) -> Section:
    facts = [
        f"Experiment: {tree.experiment or s.experiment}; seed: {tree.seed if tree.seed is not None else 'not recorded'}; "
        f"results directory: {tree.root}.",
        f"Reward-model variants: {', '.join(tree.variants) or 'none recorded'}.",
        f"GRPO runs: {', '.join(tree.runs) or 'none recorded'}.",
    ]
    bench, source = headline_benchmark(tree, s)
    if bench is not None:
        facts.append(f"Headline benchmark (ablation table and charts): {bench} ({source}).")
    if others:
        facts.append("Compared results trees: " + ", ".join(f"{t.name} ({t.root})" for t in others) + ".")
    blocks: list[Any] = [Paragraph(text) for text in facts]
    blocks += _headline_notes(tree, s)
    blocks += _notes(tree, "tree")
    unreadable = [n for t in (tree, *others) for n in t.notes if n.kind == "unreadable"]
    if unreadable:
        blocks.append(
            Paragraph(
                f"{len(unreadable)} file(s) could not be read fully; see the warnings below each section.",
                "warning",
            )
        )
    return Section("Overview", blocks)


def data_and_base(tree: ResultsTree) -> Section:
    blocks: list[Any] = []
    if tree.data_summary is not None:
        blocks.append(run_tables.key_value_table("Data (results/data/summary.json)", tree.data_summary))
    if tree.base_summary is not None:
        blocks.append(run_tables.key_value_table("Base model (results/base/summary.json)", tree.base_summary))
    return Section("Data and base model", blocks + _notes(tree, "data", "base"))


def rewardbench(tree: ResultsTree, s: Settings) -> Section:
    blocks: list[Any] = _notes(tree, "eval")
    if tree.eval_overall.empty:
        if s.paper_reference_rows:
            blocks.append(tables.rewardbench_table(tree, with_paper=True))
        return Section("RewardBench", blocks)
    blocks.insert(0, tables.rewardbench_table(tree, s.paper_reference_rows))
    for bench in tables.benchmarks(tree):
        if not tree.eval_subsets[tree.eval_subsets["benchmark"] == bench].empty:
            blocks.append(tables.subset_table(tree, bench))
    return Section("RewardBench", blocks)


def primary_benchmark(tree: ResultsTree, s: Settings) -> str | None:
    return headline_benchmark(tree, s)[0]


def headline_benchmark(tree: ResultsTree, s: Settings) -> tuple[str | None, str]:
    """The benchmark for the ablation and the comparison chart, and where that choice came from: the config
    (`report.primary_benchmark`), else what the evaluation stage recorded as `primary_benchmark` in
    eval/<variant>/summary.json, else synthetic/default/the first benchmark with scores."""
    names = tables.benchmarks(tree)
    if not names:
        return None, "no evaluation summaries"
    if s.primary_benchmark in names:
        return s.primary_benchmark, "report.primary_benchmark"
    recorded = tree.recorded_primary
    if recorded is not None:
        who = sorted(v for v, b in tree.eval_primary.items() if b == recorded)
        where = f"all {len(who)} variants" if len(who) == len(tree.eval_primary) else ", ".join(who)
        return recorded, (
            f"as recorded by the evaluation stage: primary_benchmark in eval/<variant>/summary.json of {where}"
        )
    for preferred in ("synthetic", "default"):
        if preferred in names:
            return (
                preferred,
                f"no primary_benchmark recorded in eval/*/summary.json; the {preferred} benchmark",
            )
    return names[0], "no primary_benchmark recorded in eval/*/summary.json; the first benchmark with scores"


def _headline_notes(tree: ResultsTree, s: Settings) -> list[Paragraph]:
    """Say when the configured or recorded primary benchmark could not be used as given."""
    out = []
    names = tables.benchmarks(tree)
    if s.primary_benchmark is not None and names and s.primary_benchmark not in names:
        out.append(
            Paragraph(
                f"report.primary_benchmark = {s.primary_benchmark!r} has no scores in eval/*/summary.json "
                f"(benchmarks with scores: {', '.join(names)}); using {primary_benchmark(tree, s)}.",
                "warning",
            )
        )
    named = {b for b in tree.eval_primary.values() if b in names}
    if len(named) > 1:
        per = "; ".join(f"{v}: {b}" for v, b in sorted(tree.eval_primary.items()))
        out.append(Paragraph(f"Evaluation summaries name different primary benchmarks ({per}).", "warning"))
    return out


def ablation(tree: ResultsTree, s: Settings) -> Section:
    bench = primary_benchmark(tree, s)
    if bench is None:
        return Section(
            "Bayesian GPM ablation", [Paragraph("Not recorded: no evaluation summaries to compare.", "note")]
        )
    blocks: list[Any] = []
    if s.ablation_reference not in tree.reward_configs:
        blocks.append(
            Paragraph(
                f"Not recorded: results/reward/{s.ablation_reference}/config.json (the fixed reference) is missing, "
                "so variants cannot be described by their differing settings.",
                "note",
            )
        )
    table, chart_rows = tables.ablation_table(
        tree, bench, s.ablation_reference, s.ablation_variants, s.ablation_baselines, s.ablation_ignore_keys
    )
    gpm = tables.section_scores(tree, bench, "gpm").get("overall") if "gpm" in tree.variants else None
    blocks.insert(0, table)
    blocks += _figure(
        "ablation",
        "Bayesian GPM ablation",
        plots.section_bars(chart_rows, s.figure_dpi, reference=gpm),
        f"Section accuracy per variant on {bench}; dashed line: GPM overall; dotted: chance.",
    )
    return Section("Bayesian GPM ablation", blocks)


def training_curves(tree: ResultsTree, s: Settings) -> Section:
    blocks: list[Any] = _notes(tree, "reward")
    if tree.reward_metrics.empty:
        return Section("Reward-model training curves", blocks)
    blocks += _figure(
        "reward_training",
        "Reward-model training curves",
        plots.training_curves(tree.reward_metrics, tree.variants, s.smooth_window, s.figure_dpi),
        f"Faint: raw values; bold: rolling mean over {s.smooth_window} logged steps. KL panels on a log scale "
        "(zeros omitted).",
    )
    blocks.append(tables.training_summary_table(tree))
    flags = diagnose(tree.reward_metrics, "variant", s.thresholds, REWARD_CHECKS)
    flagged = [f for f in flags if f.status == "flagged"]
    if flagged:
        blocks.append(run_tables.diagnostics_table(flagged, "Reward-model training: unhealthy signs"))
    return Section("Reward-model training curves", blocks)


def calibration(tree: ResultsTree, s: Settings) -> Section:
    blocks: list[Any] = _notes(tree, "calibration")
    if not tree.calibration.empty:
        blocks.append(tables.calibration_table(tree))
    for bench in tables.benchmarks(tree):
        rel = tree.reliability[tree.reliability["benchmark"] == bench]
        sel = tree.selective[tree.selective["benchmark"] == bench]
        blocks += _figure(
            f"calibration_{bench}",
            f"Calibration: {bench}",
            plots.calibration(rel, sel, tree.variants, s.figure_dpi),
            "Left: reliability diagram (marker area ~ pairs in the bin). Right: accuracy on the pairs kept when "
            "abstaining on the most uncertain ones.",
        )
    return Section("Calibration", blocks)


def grpo(tree: ResultsTree, s: Settings, flags: Sequence[Flag]) -> Section:
    blocks: list[Any] = _notes(tree, "grpo")
    if not tree.runs:
        return Section("GRPO training", blocks)
    blocks.insert(0, run_tables.grpo_runs_table(tree))
    for run in tree.runs:
        frame = tree.grpo_metrics[tree.grpo_metrics["run"] == run]
        if frame.empty:
            blocks.append(Paragraph(f"Not recorded: results/grpo/{run}/metrics.jsonl has no rows.", "note"))
            continue
        blocks.append(Heading(f"Run {run}"))
        blocks += _figure(
            f"grpo_{run}",
            f"GRPO diagnostics: {run}",
            plots.grpo_run(frame, [f for f in flags if f.run == run], s.smooth_window, s.figure_dpi),
            f"Faint: raw values; bold: rolling mean over {s.smooth_window} steps; red dotted lines: first step of "
            "a flagged check.",
        )
    return Section("GRPO training", blocks)


def diagnostics(tree: ResultsTree, s: Settings, flags: Sequence[Flag]) -> Section:
    t = s.thresholds
    text = (
        "Each check scans the per-step GRPO metrics and reports the first step where it fires "
        f"(thresholds from report.diagnostics): KL k3 mean > {t.kl_mean_max:g}; KL spike > {t.kl_spike_factor:g} x the "
        f"median of the previous {t.baseline_window} steps (floor {t.kl_spike_floor:g}); |max log-ratio| > "
        f"{t.log_ratio_abs_max:g} nats; share of zero-std reward groups >= {t.zero_std_frac_max:g}; grad norm > "
        f"{t.grad_norm_max:g} or > {t.grad_norm_spike_factor:g} x its recent median; truncated completions > "
        f"{t.truncated_ratio_max:g}; entropy < {t.entropy_min:g}; any NaN/inf."
    )
    blocks: list[Any] = [Paragraph(text)]
    if flags:
        n = sum(f.status == "flagged" for f in flags)
        blocks.append(
            Paragraph(f"{n} check(s) flagged across {len(tree.runs)} run(s).", "warning" if n else "text")
        )
        blocks.append(run_tables.diagnostics_table(flags, "GRPO diagnostics"))
    else:
        blocks.append(Paragraph("Not recorded: no GRPO metrics to check.", "note"))
    return Section("GRPO diagnostics", blocks)


def before_after(tree: ResultsTree, s: Settings) -> Section:
    blocks: list[Any] = _notes(tree, "policy_eval")
    if not tree.policy_eval.empty:
        blocks.insert(0, run_tables.policy_table(tree))
        blocks += _figure(
            "policy_eval",
            "Held-out verifier accuracy before and after GRPO",
            plots.policy_bars(tree.policy_eval, s.figure_dpi),
            "Error bars: the recorded 95% interval.",
        )
    return Section("Before / after GRPO", blocks)


def samples(tree: ResultsTree, s: Settings) -> Section:
    blocks: list[Any] = _notes(tree, "samples")
    for run in tree.runs:
        rows = tree.samples.get(run) or []
        if not rows:
            continue
        steps = [r.get("step") for r in rows if isinstance(r.get("step"), int | float)]
        last = max(steps) if steps else None
        chosen = [r for r in rows if last is None or r.get("step") == last][: s.samples_per_run]
        blocks.append(Heading(f"Run {run}: {len(chosen)} of {len(rows)} logged samples (last logged step)"))
        for i, row in enumerate(chosen, start=1):
            blocks.append(Preformatted(f"{run} sample {i}", sample_text(row, s.sample_max_chars)))
    return Section("Sample completions", blocks)


def comparison(trees: Sequence[ResultsTree], s: Settings) -> Section:
    if len(trees) < 2:
        return Section(
            "Comparison across experiments and seeds",
            [Paragraph("No extra results directories configured (report.compare); nothing to compare.")],
        )
    blocks: list[Any] = [
        Paragraph(
            "Trees are grouped by the experiment name recorded in their stage configs; within an experiment each "
            "tree counts as one seed. Cells: mean ± sample standard deviation over seeds (n = trees with a value)."
        )
    ]
    per_tree = compare.eval_across(trees)
    if not per_tree.empty:
        agg = compare.aggregate(per_tree, ["overall", *tables.SECTIONS, "cyclic"])
        bench = primary_benchmark(trees[0], s) or str(agg["benchmark"].iloc[0])
        rows = [
            [r["experiment"], r["benchmark"], r["item"], r["seeds"]]
            + [
                fmt.mean_sd(r.get(f"{v}_mean"), r.get(f"{v}_sd"), r.get(f"{v}_n", 0))
                for v in ("overall", *tables.SECTIONS, "cyclic")
            ]
            for r in agg.to_dict("records")
        ]
        columns = [
            "Experiment",
            "Benchmark",
            "Variant",
            "Seeds",
            "Overall",
            *tables.SECTION_TITLES.values(),
            "Cyclic",
        ]
        blocks.append(Table("Reward models across experiments and seeds (%)", columns, rows))
        blocks += _figure(
            "compare_overall",
            "Overall accuracy across experiments",
            plots.compare_bars(
                agg[agg["benchmark"] == bench], "overall", "overall accuracy (%)", s.figure_dpi
            ),
            f"Benchmark {bench}. Mean over seeds, error bars ± one standard deviation.",
        )
        runs = [
            [
                r["tree"],
                r["experiment"],
                str(r["seed"]) if r["seed"] is not None else "not recorded",
                r["benchmark"],
                r["item"],
                fmt.pct(r["overall"]),
            ]
            for r in per_tree.to_dict("records")
        ]
        blocks.append(
            Table(
                "Per tree: overall accuracy (%)",
                ["Tree", "Experiment", "Seed", "Benchmark", "Variant", "Overall"],
                runs,
            )
        )
    policy = compare.policy_across(trees)
    if not policy.empty:
        agg = compare.aggregate(policy, ["base", "trained", "gain"])
        rows = [
            [r["experiment"], r["item"], r["seeds"]]
            + [
                fmt.mean_sd(r.get(f"{v}_mean"), r.get(f"{v}_sd"), r.get(f"{v}_n", 0))
                for v in ("base", "trained", "gain")
            ]
            for r in agg.to_dict("records")
        ]
        blocks.append(
            Table(
                "GRPO across experiments and seeds: held-out verifier accuracy (%)",
                ["Experiment", "Run", "Seeds", "Base", "Trained", "Gain (points)"],
                rows,
            )
        )
    for tree in trees[1:]:
        blocks += [
            Paragraph(f"[{tree.name}] {p.text}", p.kind) for p in _notes(tree, "tree", "eval", "policy_eval")
        ]
    return Section("Comparison across experiments and seeds", blocks)


def run_facts(tree: ResultsTree) -> Section:
    blocks: list[Any] = [run_tables.facts_table(tree), run_tables.versions_table(tree)]
    if not tree.benchmarks.empty:
        blocks.append(run_tables.benchmark_table(tree))
    blocks += _notes(tree, "facts")
    return Section("Run facts", blocks)


def build_document(
    tree: ResultsTree, others: Sequence[ResultsTree], s: Settings
) -> tuple[Document, dict[str, Any]]:
    """The whole report plus build statistics for the run record."""
    flags = explain_unrecorded(diagnose(tree.grpo_metrics, "run", s.thresholds), tree)
    trees = [tree, *others]
    sections = [
        overview(tree, others, s),
        data_and_base(tree),
        rewardbench(tree, s),
        ablation(tree, s),
        training_curves(tree, s),
        calibration(tree, s),
        grpo(tree, s, flags),
        diagnostics(tree, s, flags),
        before_after(tree, s),
        samples(tree, s),
        comparison(trees, s),
        run_facts(tree),
        Section("Appendix: metric keys", run_tables.keys_tables(trees)),
    ]
    subtitle = (
        f"Experiment {tree.experiment or s.experiment}: reward models (BT, GPM, Bayesian GPM), RewardBench-style "
        "evaluation, GRPO. Self-contained report generated by prefpipe.report."
    )
    doc = Document(s.title, subtitle, sections)
    stats = {
        "n_variants": len(tree.variants),
        "n_runs": len(tree.runs),
        "n_trees": len(trees),
        "n_figures": len(doc.figures()),
        "n_tables": len(doc.tables()),
        "n_not_recorded": sum(n.kind == "missing" for t in trees for n in t.notes),
        "n_unreadable": sum(n.kind == "unreadable" for t in trees for n in t.notes),
        "n_flags": sum(f.status == "flagged" for f in flags),
        "flags": [f.__dict__ for f in flags if f.status == "flagged"],
    }
    return doc, stats
