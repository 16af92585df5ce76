"""Prompt overlap between the training pairs and each benchmark: how many training-pair prompts occur among the
benchmark's prompts and how many benchmark rows repeat a training prompt, exactly and after normalisation
(prefpipe.data.normalize.benchmark_prompt_overlap). The counts depend on the data only, so the first evaluated
variant that recorded them speaks for all. Shown only where the evaluation recorded them."""

from __future__ import annotations

from typing import Any

from prefpipe.evaluation.summary_keys import PROMPT_OVERLAP
from prefpipe.report import frames
from prefpipe.report.document import Claim, Section, Table
from prefpipe.report.sections import Context
from prefpipe.report.stats import NA

TITLE, ANCHOR = "Prompt overlap with the training pairs", "prompt-overlap"


def _counts(ctx: Context) -> dict[str, dict[str, Any]]:
    """{benchmark: its prompt_overlap block}, from the first variant that recorded one."""
    out: dict[str, dict[str, Any]] = {}
    for variant in ctx.variants:
        for bench, block in frames.benchmark_blocks(ctx.tree.summary("eval", variant)).items():
            counts = (block.get("data") or {}).get(PROMPT_OVERLAP)
            if bench not in out and isinstance(counts, dict):
                out[bench] = counts
    return out


def _share(count: Any, total: Any) -> str:
    if not isinstance(count, int) or not isinstance(total, int):
        return NA
    return f"{count} ({100 * count / total:.1f}%)" if total else str(count)


def claims(ctx: Context) -> list[Claim]:
    found = {b: c for b, c in _counts(ctx).items() if c.get("benchmark_rows_normalised")}
    if not found:
        return []
    parts = ", ".join(
        f"{b} {_share(c['benchmark_rows_normalised'], c.get('benchmark_rows'))}" for b, c in found.items()
    )
    return [
        Claim(f"Benchmark rows whose prompt repeats a training prompt (normalised text): {parts}.", ANCHOR)
    ]


def build(ctx: Context) -> Section | None:
    found = _counts(ctx)
    if not found:
        return None
    rows = [
        [
            bench,
            str(c.get("benchmark_rows", NA)),
            _share(c.get("benchmark_rows_exact"), c.get("benchmark_rows")),
            _share(c.get("benchmark_rows_normalised"), c.get("benchmark_rows")),
            str(c.get("train_pairs", NA)),
            _share(c.get("train_pairs_exact"), c.get("train_pairs")),
            _share(c.get("train_pairs_normalised"), c.get("train_pairs")),
        ]
        for bench, c in found.items()
    ]
    table = Table(
        "Prompts shared by the training pairs and each benchmark",
        [
            "Benchmark",
            "Rows",
            "Rows with a training prompt (exact)",
            "(normalised)",
            "Training pairs",
            "Training pairs with a benchmark prompt (exact)",
            "(normalised)",
        ],
        rows,
        "Exact: identical prompt strings as the model reads them. Normalised: Unicode NFKC, case-folded, "
        "punctuation dropped (operators and number separators kept) and whitespace collapsed, the test the data "
        "stage's leakage check uses (data.max_overlap_share). A benchmark from outside the data stage is refused "
        "when its normalised share is above data.max_overlap_share; the data stage's own test split is "
        "counted only.",
    )
    return Section(TITLE, [table], ANCHOR)
