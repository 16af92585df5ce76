"""The GRPO hypothesis grid (results/grpo_hypotheses/summary.json, prefpipe.grpo.hypotheses): one row per
hypothesis run with its effect on held-out accuracy and training reward, the diagnostics that fired and the
verdict."""

from __future__ import annotations

from prefpipe.report.document import Claim, Paragraph, Section, Table
from prefpipe.report.sections import Context

TITLE, ANCHOR = "Why does GRPO not improve? The hypothesis grid", "hypotheses"
KIND = "grpo_hypotheses"


def _signed(value: float, ci: list[float]) -> str:
    return f"{value:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]"


def _diagnostics(items: list[dict], baseline: list[dict] | None = None) -> str:
    """The checks that fired, those the baseline did not show first: a long cell is cut at its end (the full
    text in its tooltip), so what a hypothesis adds must not be the part cut (H02's prompt loss was)."""
    seen = {d["check"] for d in baseline or []}
    ordered = sorted(items, key=lambda d: d["check"] in seen)  # stable: the run's own order within each part
    return "; ".join(f"{d['check']} (step {d['first_step']})" for d in ordered) or "none"


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
            _signed(r["accuracy_delta"], r["accuracy_ci"]),
            _signed(r["reward_delta"], r["reward_ci"]),
            _diagnostics(r["diagnostics"], summary["baseline_diagnostics"]),
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
        f"decoding); reward: reward_mean over the last {summary['tail_steps']} training steps.",
        ["flag" if r[-1] == "hurts" else "" for r in rows],
        anchor="hypotheses-table",
    )
    base = Paragraph(
        f"Diagnostics fired on the baseline: {_diagnostics(summary['baseline_diagnostics'])}.", "note"
    )
    return Section(TITLE, [table, base], ANCHOR)
