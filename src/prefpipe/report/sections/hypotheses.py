"""The GRPO hypothesis grid (results/grpo_hypotheses/summary.json, prefpipe.grpo.analyses.hypotheses): one row per
hypothesis run with its effect on held-out accuracy and training reward, the diagnostics that fired and the
verdict."""

from __future__ import annotations

from prefpipe.grpo.analyses.hypotheses import diagnostics_text, effect_text, reward_text
from prefpipe.report.document import Claim, Paragraph, Section, Table
from prefpipe.report.sections import Context

TITLE, ANCHOR = "Why does GRPO not improve? The hypothesis grid", "hypotheses"
KIND = "grpo_hypotheses"


def claims(ctx: Context) -> list[Claim]:
    summary = ctx.tree.summary(KIND)
    if not summary:
        return []
    out = []
    for name, test in summary["tests"].items():
        verdicts = ", ".join(f"{run}: {r['verdict']}" for run, r in test["runs"].items())
        out.append(Claim(f"{name} ({test['factor']}): {verdicts}.", "hypotheses-table"))
    return out


def build(ctx: Context) -> Section | None:
    summary = ctx.tree.summary(KIND)
    if not summary:
        return None
    level = round(100 * summary["confidence"])
    rows = [
        [
            name,
            test["factor"],
            run,
            effect_text(r["accuracy_delta"], r["accuracy_ci"]),
            reward_text(r),
            diagnostics_text(r["diagnostics"], summary["baseline_diagnostics"]),
            r["verdict"],
        ]
        for name, test in summary["tests"].items()
        for run, r in test["runs"].items()
    ]
    table = Table(
        f"Effects against the baseline run {summary['baseline']} ({level}% intervals)",
        [
            "Hypothesis",
            "Factor",
            "Run",
            "Held-out accuracy change",
            "Training reward change",
            "Diagnostics fired (new to the run first)",
            "Verdict",
        ],
        rows,
        f"{summary['verdict_rule']}. Accuracy: paired bootstrap over held-out prompts ({summary['decoding']} "
        f"decoding); reward: the training reward over the last {summary['tail_steps']} steps, the total or, where "
        "the runs' reward sources differ, the one source both share (named).",
        ["flag" if r[-1] == "hurts" else "" for r in rows],
        anchor="hypotheses-table",
    )
    base = Paragraph(
        f"Diagnostics fired on the baseline: {diagnostics_text(summary['baseline_diagnostics'])}.", "note"
    )
    return Section(TITLE, [table, base], ANCHOR)
