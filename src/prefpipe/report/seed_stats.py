"""The headline figures of several results trees (seeds of one experiment) as mean ± sample sd.

Per tree: every variant's section scores, four-section average and cyclic accuracy on the headline benchmark,
its ECE and the four-section average of its head as fine-tuned (before the refit), and each ablation row's fix
effect in both of the ablation's protocols (results/ablation/summary.json). The report's across-seeds section
and the three-seed command's summary file (prefpipe.seed_summary) both come from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prefpipe.common.stats import mean_sd
from prefpipe.evaluation.summary_keys import AS_FINETUNED, CALIBRATION, EXTRA_HEADS, ROWS
from prefpipe.report import frames
from prefpipe.report.inputs import Tree
from prefpipe.report.stats import as_float

ITEMS = {
    frames.OVERALL: "Four-section average",
    **frames.SECTION_TITLES,
    frames.CYCLIC: "Cyclic",
    "ece": "ECE",
}
# The four-section average of the head as fine-tuned, before the head refit (models that kept it).
FINETUNED_ITEM = "overall_as_finetuned"
ITEMS[FINETUNED_ITEM] = "Average, head as fine-tuned"


def tree_figures(tree: Tree, bench: str | None) -> dict[tuple[str, str], float]:
    """{(variant, item): value} and {("ablation", "<fix> <kind>"): fix effect} of one tree."""
    out: dict[tuple[str, str], float] = {}
    scores = frames.scores(tree)
    for row in scores[scores["benchmark"] == bench].itertuples():
        out[(row.variant, row.item)] = float(row.score)
    for variant in tree.names("eval"):
        block = frames.benchmark_blocks(tree.summary("eval", variant)).get(bench or "")
        ece = as_float(((block or {}).get(CALIBRATION) or {}).get("ece"))
        if ece is not None:
            out[(variant, "ece")] = ece
        finetuned = ((block or {}).get(EXTRA_HEADS) or {}).get(AS_FINETUNED) or {}
        if as_float(finetuned.get(frames.OVERALL)) is not None:
            out[(variant, FINETUNED_ITEM)] = float(finetuned[frames.OVERALL])
    ablation = tree.summary("ablation") or {}
    if ablation.get("benchmark") == bench:
        for suffix, block in (("", ablation), (", as fine-tuned", ablation.get(AS_FINETUNED) or {})):
            for row in block.get(ROWS) or []:
                effect = as_float((row.get("items") or {}).get(frames.OVERALL, {}).get("fix_effect"))
                if effect is not None:
                    out[("ablation", f"{row['fix']} {row['kind']}{suffix}")] = effect
    return out


def across(trees: Sequence[Tree], bench: str | None) -> dict[tuple[str, str], dict[str, Any]]:
    """{(variant or "ablation", item): mean_sd over the trees that have it}, in first-seen order."""
    per_tree = [tree_figures(tree, bench) for tree in trees]
    keys = list(dict.fromkeys(k for figures in per_tree for k in figures))
    return {k: mean_sd([f[k] for f in per_tree if k in f]) for k in keys}


def cell(stat: dict[str, Any] | None, scale: float = 100.0, signed: bool = False) -> str:
    """'78.5 ± 1.2 (n=3)'; signed for effects ('+4.1 ± 0.9 (n=3)')."""
    if not stat or stat["mean"] is None:
        return "–"
    fmt = "+.1f" if signed else ".1f"
    text = f"{scale * stat['mean']:{fmt}}"
    return text + (f" ± {scale * stat['sd']:.1f}" if stat["sd"] is not None else "") + f" (n={stat['n']})"
