"""Length bias: accuracy when the chosen response is the longer one vs the shorter one, how often each model
picks the longer response, and the "longer wins" baseline; then the length-controlled accuracy and the reward-
and margin-length correlations (prefpipe.evaluation.length_control defines them). Shown only where the
evaluation recorded them."""

from __future__ import annotations

from typing import Any

from prefpipe.data.pair_length import CHOSEN_LONGER, CHOSEN_SHORTER, EQUAL_LENGTH
from prefpipe.evaluation.length_control import (
    LENGTH_CONTROLLED_KEY,
    MARGIN_CORRELATION_KEY,
    REWARD_CORRELATION_KEY,
)
from prefpipe.evaluation.length_split import (
    LENGTH_SPLIT_KEY,
    LONGER_PICK_CI_KEY,
    LONGER_PICK_RATE_KEY,
    LONGER_WINS_BASELINE_KEY,
)
from prefpipe.report import frames
from prefpipe.report.document import Claim, Section, Table
from prefpipe.report.sections import Context
from prefpipe.report.stats import NA, corr, interval, pct

TITLE, ANCHOR = "Length bias", "length-bias"
LENGTH_SPLIT, LONGER_PICK_RATE, LONGER_WINS = LENGTH_SPLIT_KEY, LONGER_PICK_RATE_KEY, LONGER_WINS_BASELINE_KEY
SPLITS = {CHOSEN_LONGER: "Chosen longer", CHOSEN_SHORTER: "Chosen shorter", EQUAL_LENGTH: "Equal length"}


def length_blocks(ctx: Context, bench: str) -> dict[str, dict[str, Any]]:
    out = {}
    for variant in ctx.variants:
        block = frames.benchmark_blocks(ctx.tree.summary("eval", variant)).get(bench)
        if isinstance(block, dict) and isinstance(block.get(LENGTH_SPLIT), dict):
            out[variant] = block
    return out


def _acc(block: Any) -> str:
    if not isinstance(block, dict):
        return NA
    text = pct(block.get("accuracy"), interval(block, "accuracy"))
    return text + (f" (n={block['n']})" if isinstance(block.get("n"), int) else "")


def recorded_ci(block: Any, key: str = "ci95") -> Any:
    return block.get(key) if isinstance(block, dict) and isinstance(block.get(key), list) else None


def _corr(block: Any) -> str:
    """'Pearson [interval] (Spearman rho)' of a correlation block, or NA (a pairwise head has no reward one)."""
    if not isinstance(block, dict):
        return NA
    text = corr(block.get("pearson"), recorded_ci(block, "pearson_ci95"))
    return text + (f" (ρ {corr(block.get('spearman'))})" if block.get("spearman") is not None else "")


def _control_table(bench: str, found: dict[str, dict[str, Any]]) -> Table | None:
    """Length-controlled accuracy, longer-pick rate and the two correlations per variant, where recorded."""
    rows = [
        [
            v,
            pct((b[LENGTH_CONTROLLED_KEY] or {}).get("accuracy"), recorded_ci(b[LENGTH_CONTROLLED_KEY])),
            pct(b.get(LONGER_PICK_RATE), recorded_ci(b, LONGER_PICK_CI_KEY)),
            _corr(b.get(REWARD_CORRELATION_KEY)),
            _corr(b.get(MARGIN_CORRELATION_KEY)),
        ]
        for v, b in found.items()
        if isinstance(b.get(LENGTH_CONTROLLED_KEY), dict)
    ]
    if not rows:
        return None
    return Table(
        f"Length-controlled accuracy and length correlation: {bench}",
        ["Variant", "Length-controlled accuracy", "Picks longer", "r(reward, length)", "r(margin, Δlength)"],
        rows,
        "Length in characters. Length-controlled accuracy: a logistic regression of 'picked the chosen response' "
        "on the length difference (chosen − rejected), read at zero difference. r(reward, length): Pearson "
        "(Spearman ρ) of each scored response's reward with its length, scalar heads only (– for pairwise "
        "heads). r(margin, Δlength): Pearson (ρ) of s(a > b) with len(a) − len(b), each pair in both orders. "
        "Bootstrap 95% intervals (pairs resampled); 'picks longer': Wilson interval. Definitions: "
        "docs/findings/FINDINGS.md, 'How length is measured'.",
    )


def claims(ctx: Context) -> list[Claim]:
    found = length_blocks(ctx, ctx.bench) if ctx.bench else {}
    if not found:
        return []
    rates = [(v, b[LONGER_PICK_RATE]) for v, b in found.items() if isinstance(b.get(LONGER_PICK_RATE), float)]
    base = next((b.get(LONGER_WINS) for b in found.values() if isinstance(b.get(LONGER_WINS), dict)), None)
    if not rates:
        return []
    low, high = min(rates, key=lambda r: r[1]), max(rates, key=lambda r: r[1])
    text = f"Length bias on {ctx.bench}: models pick the longer response {pct(low[1])} ({low[0]}) to {pct(high[1])}"
    text += f" ({high[0]}) of the time" + (f"; 'longer wins' alone scores {_acc(base)}" if base else "")
    controlled = [
        (v, b[LENGTH_CONTROLLED_KEY]) for v, b in found.items()
        if isinstance(b.get(LENGTH_CONTROLLED_KEY), dict) and b[LENGTH_CONTROLLED_KEY].get("accuracy") is not None
    ]  # fmt: skip
    if controlled:
        parts = ", ".join(f"{v} {pct(c['accuracy'], recorded_ci(c))}" for v, c in controlled)
        text += f"; at equal length (length-controlled accuracy) they score {parts}"
    return [Claim(text + ".", "length-bias")]


def build(ctx: Context) -> Section | None:
    blocks: list = []
    for bench in dict.fromkeys(ctx.scores["benchmark"]):
        found = length_blocks(ctx, bench)
        if not found:
            continue
        rows = [
            [
                v,
                *[_acc(b[LENGTH_SPLIT].get(k)) for k in SPLITS],
                pct(b.get(LONGER_PICK_RATE), recorded_ci(b, LONGER_PICK_CI_KEY)),
            ]
            for v, b in found.items()
        ]
        base = next(
            (b.get(LONGER_WINS) for b in found.values() if isinstance(b.get(LONGER_WINS), dict)), None
        )
        if base:
            rows.append(["'longer wins' baseline", NA, NA, NA, _acc(base)])
        blocks.append(
            Table(
                f"Accuracy by which response is longer: {bench}",
                ["Variant", *SPLITS.values(), "Picks longer"],
                rows,
                "Accuracy [95% interval] within each split; a model that relies on length is strong when the "
                "chosen response is longer and weak when it is shorter.",
            )
        )
        control = _control_table(bench, found)
        if control is not None:
            blocks.append(control)
    return Section(TITLE, blocks, ANCHOR) if blocks else None
