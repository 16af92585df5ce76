"""Held-out verifier accuracy of the base and the GRPO-trained policy, greedy and sampled, with intervals."""

from __future__ import annotations

import pandas as pd

from prefpipe.common.stats import ABOVE_ZERO, BELOW_ZERO, STRADDLES_ZERO, interval_side
from prefpipe.grpo import metric_names as gm
from prefpipe.report import plots
from prefpipe.report.document import Claim, Section, Table
from prefpipe.report.sections import Context
from prefpipe.report.stats import NA, diff_interval, pct, pts

TITLE, ANCHOR = "GRPO: held-out accuracy before and after", "policy"
BASE_COLOR = "#8c959f"


def change(ctx: Context, run: str, decoding: str) -> tuple[pd.Series, pd.Series, float, tuple] | None:
    """(base row, trained row, trained - base, its 95% interval) for one run and decoding."""
    frame = ctx.policy[(ctx.policy["run"] == run) & (ctx.policy["decoding"] == decoding)]
    base, trained = frame[frame["side"] == "base"], frame[frame["side"] == "trained"]
    if base.empty or trained.empty:
        return None
    b, t = base.iloc[0], trained.iloc[0]
    recorded = _paired_ci(ctx, run, decoding)
    ci = recorded or diff_interval(t["accuracy"], (t["lo"], t["hi"]), b["accuracy"], (b["lo"], b["hi"]))
    return b, t, t["accuracy"] - b["accuracy"], ci


def _paired_ci(ctx: Context, run: str, decoding: str) -> tuple[float, float] | None:
    """The paired interval of trained - base eval_policy recorded (None for results written before it)."""
    decodings = (ctx.tree.summary("policy_eval", run) or {}).get(gm.DECODINGS_KEY) or {}
    block = ((decodings.get(decoding) or {}).get(gm.PAIRED)) or {}
    ci = block.get("ci")
    return (float(ci[0]), float(ci[1])) if isinstance(ci, list) and len(ci) == 2 else None


# The words for where the interval of trained - base lies (common.stats.interval_side).
VERDICT_WORDS = {ABOVE_ZERO: "improved", STRADDLES_ZERO: "no clear change", BELOW_ZERO: "worse"}


def verdict(ci: tuple[float, float]) -> str:
    return VERDICT_WORDS[interval_side(ci)]


def _ci(row: pd.Series) -> tuple[float, float] | None:
    return (row["lo"], row["hi"]) if pd.notna(row["lo"]) else None


def claims(ctx: Context) -> list[Claim]:
    out = []
    for run in dict.fromkeys(ctx.policy["run"]):
        parts = []
        mine = ctx.policy[ctx.policy["run"] == run].sort_values("primary", ascending=False, kind="stable")
        for decoding in dict.fromkeys(mine["decoding"]):
            found = change(ctx, run, decoding)
            if found:
                b, t, delta, ci = found
                parts.append(
                    f"{decoding} {pct(b['accuracy'], _ci(b))} → {pct(t['accuracy'], _ci(t))}, "
                    f"{verdict(ci)} ({pts(delta, ci)})"
                )
        if parts:
            out.append(
                Claim(
                    f"GRPO run {run}, held-out verifier accuracy: " + "; ".join(parts) + ".", "policy-table"
                )
            )
    return out


def build(ctx: Context) -> Section | None:
    if ctx.policy.empty:
        return None
    rows, panels = [], {}
    for run in dict.fromkeys(ctx.policy["run"]):
        for decoding in dict.fromkeys(ctx.policy[ctx.policy["run"] == run]["decoding"]):
            found = change(ctx, run, decoding)
            if not found:
                continue
            b, t, delta, ci = found
            n = int(t["n"]) if pd.notna(t["n"]) else NA
            rows.append(
                [
                    run,
                    decoding,
                    pct(b["accuracy"], _ci(b)),
                    pct(t["accuracy"], _ci(t)),
                    pts(delta, ci),
                    verdict(ci),
                    str(n),
                ]
            )
            panels.setdefault(decoding, []).extend(
                [
                    plots.Estimate(f"{run}: base", b["accuracy"], b["lo"], b["hi"], BASE_COLOR),
                    plots.Estimate(f"{run}: trained", t["accuracy"], t["lo"], t["hi"], ctx.colors[run]),
                ]
            )
    blocks: list = [
        Table(
            "Held-out verifier accuracy, base vs trained",
            ["Run", "Decoding", "Base [95%]", "Trained [95%]", "Change [95%]", "Verdict", "Prompts"],
            rows,
            "Accuracy intervals: Wilson, as recorded by eval_policy; change interval: paired over prompts "
            "(bootstrap, the paired-differences section), or for results recorded without it a normal "
            "approximation from the two Wilson intervals (conservative: both answer the same prompts).",
            anchor="policy-table",
        )
    ]
    blocks += ctx.figure(
        "policy_eval",
        "Held-out accuracy before and after GRPO",
        plots.intervals(
            [(f"{d} decoding", e) for d, e in panels.items()],
            ctx.settings.figure_dpi,
            "verifier accuracy (%)",
            chance=None,
        ),
        "Grey: base policy; coloured: after GRPO; whiskers: 95% Wilson intervals.",
    )
    return Section(TITLE, blocks, ANCHOR)
