"""Is the Bayesian GPM's uncertainty informative? (docs/findings/UNCERTAINTY.md) From each evaluated head's `uncertainty` block on
the headline benchmark and each deep ensemble's summary: AUROC of every recorded uncertainty for the head's own
errors, for high-disagreement pairs (among all pairs and among familiar ones) and for unfamiliar pairs (where the
test pairs record them), with 95% intervals, and the abstention curve's area against the point margin's. The
answer sentence reads the reference Bayesian head's predictive entropy and its aleatoric and epistemic parts
(expected entropy, mutual information), beside GPM's |margin| and the ensembles.
"""

from __future__ import annotations

from typing import Any

from prefpipe.evaluation.summary_keys import (
    AURC_VS_MARGIN,
    AUROC,
    DISAGREEMENT,
    DISAGREEMENT_FAMILIAR,
    ERRORS,
    EXPECTED_ENTROPY,
    MARGIN,
    MEMBER_SD,
    MUTUAL_INFORMATION,
    PREDICTIVE_ENTROPY,
    UNCERTAINTY,
    UNFAMILIAR,
)
from prefpipe.report import frames
from prefpipe.report.document import Claim, Section, Table
from prefpipe.report.sections import Context
from prefpipe.report.stats import NA, finite

TITLE, ANCHOR = "Uncertainty", "uncertainty"
TABLE_ANCHOR = "uncertainty-table"
TARGETS = {
    ERRORS: "its errors",
    DISAGREEMENT: "high-disagreement pairs",
    DISAGREEMENT_FAMILIAR: "high-disagreement pairs among familiar ones",
    UNFAMILIAR: "unfamiliar pairs",
}
LABELS = {
    MARGIN: "-|margin| (point estimate)",
    PREDICTIVE_ENTROPY: "predictive entropy",
    EXPECTED_ENTROPY: "expected entropy",
    MUTUAL_INFORMATION: "mutual information",
    "flip_probability": "flip probability Φ(-|m|/sd)",
    "variance": "score variance",
    MEMBER_SD: "members' score sd",
    "member_disagreement": "share of members disagreeing",
}
POINT_HEAD = "gpm"  # the point head whose |margin| the Bayesian GPM meets (docs/findings/UNCERTAINTY.md)


def blocks(ctx: Context) -> dict[str, dict[str, Any]]:
    """{head: uncertainty block}: evaluated variants on the headline benchmark, then deep ensembles."""
    out = {}
    for v in ctx.variants:
        block = frames.benchmark_blocks(ctx.tree.summary("eval", v)).get(ctx.bench or "", {}).get(UNCERTAINTY)
        if isinstance(block, dict):
            out[v] = block
    for name in ctx.tree.names("eval_ensemble"):
        block = (ctx.tree.summary("eval_ensemble", name) or {}).get(UNCERTAINTY)
        if isinstance(block, dict):
            out[f"ensemble {name}"] = block
    return out


def _auroc(block: dict[str, Any], target: str, measure: str) -> dict[str, Any] | None:
    found = (block.get(AUROC) or {}).get(target) or {}
    value = found.get(measure)
    return value if isinstance(value, dict) and finite(value.get("value")) else None


def _said(a: dict[str, Any] | None) -> str:
    """'0.833 [0.786, 0.879]' (an AUROC and its interval)."""
    if a is None:
        return NA
    return f"{a['value']:.3f} [{a['low']:.3f}, {a['high']:.3f}]"


def _aurc(block: dict[str, Any], measure: str) -> str:
    found = (block.get(AURC_VS_MARGIN) or {}).get(measure)
    if not isinstance(found, dict):
        return NA
    d = found["difference"]
    return f"{found['uncertainty']:.4f} ({d['value']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}])"


def _measures(block: dict[str, Any]) -> list[str]:
    names: dict[str, None] = {}
    for rows in (block.get(AUROC) or {}).values():
        names |= {k: None for k in rows if k != "skipped"}
    return list(names)


def build(ctx: Context) -> Section | None:
    found = blocks(ctx)
    if not found:
        return None
    targets = [t for t in TARGETS if any(_measures_for(b, t) for b in found.values())]
    rows = [
        [head, LABELS.get(m, m), *[_said(_auroc(b, t, m)) for t in targets], _aurc(b, m)]
        for head, b in found.items()
        for m in _measures(b)
    ]
    columns = ["Head", "Uncertainty", *[f"AUROC: {TARGETS[t]} [95%]" for t in targets]]
    caption = (
        "AUROC 0.5 = no information. AURC: area under the risk-coverage curve when abstaining on this "
        "uncertainty first (lower is better), with its paired difference from the point margin's [95%]. "
        "High-disagreement: the test pair's subset has a training flip rate at or above the threshold recorded "
        "in the block (among familiar ones: unfamiliar pairs left out); unfamiliar: its kind of prompt never "
        "occurs in training. Predictive entropy (total) = expected entropy (aleatoric: for disagreement) + "
        "mutual information (epistemic: for unfamiliar pairs and active learning)."
    )
    table = Table(
        f"How well each head's uncertainty flags what it should, on {ctx.bench}",
        [*columns, "AURC (− margin's) [95%]"],
        rows,
        caption,
        anchor=TABLE_ANCHOR,
    )
    return Section(TITLE, [table], ANCHOR)


def _measures_for(block: dict[str, Any], target: str) -> list[str]:
    return [k for k in ((block.get(AUROC) or {}).get(target) or {}) if k != "skipped"]


def _informative(a: dict[str, Any] | None) -> str:
    if a is None:
        return "not measured"
    if a["low"] > 0.5:
        return "informative"
    return "worse than chance" if a["high"] < 0.5 else "not distinguishable from chance"


def claims(ctx: Context) -> list[Claim]:
    found = blocks(ctx)
    reference = ctx.settings.ablation.reference
    block = found.get(reference)
    if block is None or _auroc(block, ERRORS, PREDICTIVE_ENTROPY) is None:
        return []
    # per target the reference head measures: its predictive entropy's AUROC and the point head's |margin|
    measured = [
        (target, title, entropy, _auroc(found.get(POINT_HEAD, {}), target, MARGIN))
        for target, title in TARGETS.items()
        if (entropy := _auroc(block, target, PREDICTIVE_ENTROPY)) is not None
    ]
    parts = []
    for target, title, entropy, point in measured:
        text = f"{title}: predictive entropy {_said(entropy)} ({_informative(entropy)})"
        if (aleatoric := _auroc(block, target, EXPECTED_ENTROPY)) is not None:
            text += f", expected entropy {_said(aleatoric)}"
        text += f", mutual information {_said(_auroc(block, target, MUTUAL_INFORMATION))}"
        if point is not None:
            text += f"; {POINT_HEAD}'s |margin| {_said(point)}"
        for head, other in found.items():
            if head.startswith("ensemble ") and (sd := _auroc(other, target, MEMBER_SD)) is not None:
                text += f"; {head}'s members' sd {_said(sd)}"
                # the members as posterior samples (BALD): free of the members' different score scales
                if (ens_mi := _auroc(other, target, MUTUAL_INFORMATION)) is not None:
                    text += f", mutual information {_said(ens_mi)}"
        parts.append(text)
    aurc = ((block.get(AURC_VS_MARGIN) or {}).get(PREDICTIVE_ENTROPY) or {}).get("difference")
    abstain = ""
    if isinstance(aurc, dict):
        side = "lower" if aurc["high"] < 0 else "higher" if aurc["low"] > 0 else "no different"
        abstain = (
            f" Abstaining on the entropy first gives an AURC {side} than abstaining on its own |margin| "
            f"({aurc['value']:+.4f} [{aurc['low']:+.4f}, {aurc['high']:+.4f}])."
        )
    text = (
        f"The uncertainty in detail: on {ctx.bench}, {reference}'s AUROC [95%] for "
        + "; for ".join(parts)
        + "."
        + abstain
    )
    return [Claim(_verdicts(measured, reference), TABLE_ANCHOR), Claim(text, TABLE_ANCHOR)]


def _verdicts(measured: list[tuple], reference: str) -> str:
    """The answer in one short line, a verdict per target from the predictive entropy's interval, so the
    first screen reads it before the figures of the detailed claim."""
    parts = []
    for _, title, entropy, point in measured:
        text = f"for {title} {_informative(entropy)} ({entropy['value']:.2f}"
        text += f"; {POINT_HEAD}'s |margin| {point['value']:.2f})" if point is not None else ")"
        parts.append(text)
    return (
        f"Is the Bayesian GPM's uncertainty informative? {reference}'s predictive entropy, AUROC: "
        + "; ".join(parts)
        + "."
    )
