"""Reward hacking: how far the reward model's verdict on the trained policy drifts from the verifier's. For each
run evaluated with a reward model: how often that model prefers the trained completion over the base one, next
to the change in held-out verifier accuracy. Runs trained on the reward model alone are the ones at risk."""

from __future__ import annotations

import pandas as pd

from prefpipe.grpo import metric_names as gm
from prefpipe.grpo.metric_names import REWARD_HACKING
from prefpipe.report import plots
from prefpipe.report.document import Claim, Section, Table
from prefpipe.report.sections import Context, policy
from prefpipe.report.stats import NA, num, pct, pts, wilson

TITLE, ANCHOR = "Reward model vs verifier (reward hacking)", "hacking"
RM_SOURCE = "reward_model"  # grpo.rewards[].type of the reward-model source (grpo/rewards.py)


def rm_only(ctx: Context, run: str) -> bool:
    specs = (ctx.tree.config("grpo", run) or {}).get("rewards") or []
    return bool(specs) and all(isinstance(s, dict) and s.get("type") == RM_SOURCE for s in specs)


def _rows(ctx: Context) -> list[tuple[str, bool, float, tuple, str, float, tuple]]:
    out = []
    for run in ctx.runs:
        summary = ctx.tree.summary("policy_eval", run) or {}
        block = summary.get(gm.REWARD_MODEL)
        decoding = summary.get(gm.DECODING)
        found = policy.change(ctx, run, decoding) if decoding else None
        if not isinstance(block, dict) or not isinstance(block.get(gm.WIN_RATE), float) or not found:
            continue
        n = int(found[1]["n"])
        win = block[gm.WIN_RATE]
        out.append((run, rm_only(ctx, run), win, wilson(win * n, n), decoding, found[2], found[3]))
    return out


def claims(ctx: Context) -> list[Claim]:
    return [
        Claim(
            f"Reward-model-only run {run}: the reward model prefers the trained policy on {pct(win, wci)} of "
            f"held-out prompts, while verifier accuracy changed {pts(delta, dci)} ({decoding}).",
            "hacking-table",
        )
        for run, only, win, wci, decoding, delta, dci in _rows(ctx)
        if only
    ]


def _curves(ctx: Context) -> dict[str, dict]:
    """Each run's over-optimisation block (train_grpo summary `reward_hacking`), where it has one."""
    out = {}
    for run in ctx.runs:
        block = (ctx.tree.summary("grpo", run) or {}).get(REWARD_HACKING)
        if isinstance(block, dict) and block.get("steps"):
            out[run] = block
    return out


def _overoptimisation(ctx: Context) -> list:
    blocks = _curves(ctx)
    if not blocks:
        return []
    runs = list(blocks)[: plots.MAX_CURVES]

    def curve(run: str, key: str) -> plots.Curve:
        b = blocks[run]
        return plots.Curve(run, pd.Series(b["steps"]), pd.Series(b[key], dtype=float), ctx.colors[run])

    png = plots.curves(
        [
            ("Reward-model score (optimised reward part)", [curve(r, "rm_score") for r in runs], False),
            ("Verifier accuracy on training batches", [curve(r, "verifier_accuracy") for r in runs], False),
        ],
        ctx.settings.smooth_window,
        ctx.settings.figure_dpi,
    )
    table = Table(
        "Over-optimisation gap (Gao et al.)",
        [
            "Run",
            "Verifier optimised",
            "RM score first → last",
            "Verifier acc. first → last",
            "RM gain (sd)",
            "Verifier gain (sd)",
            "Gap",
        ],
        [
            [
                run,
                "yes" if b["verifier_optimised"] else "no",
                f"{num(b['rm_score_first'])} → {num(b['rm_score_last'])}",
                f"{num(b['verifier_accuracy_first'])} → {num(b['verifier_accuracy_last'])}",
                num(b["rm_gain_sd"]),
                num(b["verifier_gain_sd"]),
                NA if b["gap"] is None else f"{b['gap']:+.3f}",
            ]
            for run, b in blocks.items()
        ],
        next(iter(blocks.values()))["definition"],
        anchor="overoptimisation",
    )
    caption = "Per training step: the reward-model part the policy is paid by, and the verifier (never optimised here)."
    return [*ctx.figure("overoptimisation", "Reward-model score vs verifier accuracy", png, caption), table]


def build(ctx: Context) -> Section | None:
    rows = [
        [run, "reward model only" if only else "with other rewards", pct(win, wci), decoding, pts(delta, dci)]
        for run, only, win, wci, decoding, delta, dci in _rows(ctx)
    ]
    extra = _overoptimisation(ctx)
    if not rows:
        return Section(TITLE, extra, ANCHOR) if extra else None
    table = Table(
        "Reward-model win rate of trained over base vs verifier accuracy change",
        ["Run", "Trained on", "RM win rate [95%]", "Decoding", "Verifier change [95%]"],
        rows,
        "Win rate: share of held-out prompts where s(trained > base) > 0 (Wilson interval; ties count as "
        "losses). A high win rate with no verifier gain is the reward model being gamed.",
        anchor="hacking-table",
    )
    return Section(TITLE, [table, *extra], ANCHOR)
