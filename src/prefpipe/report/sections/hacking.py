"""Reward hacking: how far the reward model's verdict on the trained policy drifts from the verifier's. For each
run evaluated with a reward model: how often that model prefers the trained completion over the base one, next
to the change in held-out verifier accuracy. Runs trained on the reward model alone are the ones at risk."""

from __future__ import annotations

import pandas as pd

from prefpipe.grpo import metric_names as gm
from prefpipe.grpo.analyses.hacking import FIXED_MEAN_NOTE, mean_fixed_by_construction, without_rm_gain
from prefpipe.grpo.metric_names import REWARD_HACKING
from prefpipe.report import plots
from prefpipe.report.document import Claim, Section, Table
from prefpipe.report.sections import Context, policy
from prefpipe.report.sections.calibration import groups
from prefpipe.report.stats import NA, num, pct, pts, wilson
from prefpipe.reward.heads.facts import head_facts

TITLE, ANCHOR = "Reward model vs verifier (reward hacking)", "hacking"
RM_SOURCE = "reward_model"  # grpo.rewards[].type of the reward-model source (grpo/rewards.py)


def rm_only(ctx: Context, run: str) -> bool:
    specs = (ctx.tree.config("grpo", run) or {}).get("rewards") or []
    return bool(specs) and all(isinstance(s, dict) and s.get("type") == RM_SOURCE for s in specs)


def win_rows(ctx: Context) -> list[tuple[str, bool, float, tuple, str, float, tuple]]:
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
        for run, only, win, wci, decoding, delta, dci in win_rows(ctx)
        if only
    ]


def _scalar_reward_model(ctx: Context, run: str) -> bool:
    """Whether the run's reward model has a scalar head (from its training config; unknown: True)."""
    variant = (ctx.tree.config("grpo", run) or {}).get("reward_model")
    head = ((ctx.tree.config("reward", variant) or {}).get("head") or {}) if isinstance(variant, str) else {}
    facts = head_facts(head.get("type"))
    return facts.scalar_reward if facts else True


def _curves(ctx: Context) -> dict[str, dict]:
    """Each run's over-optimisation block (train_grpo summary `reward_hacking`), where it has one. A pairwise
    head's group-relative reward has a fixed batch mean (grpo.hacking.mean_fixed_by_construction): its gain is
    left out here too for runs whose summary was written before the trainer did so."""
    out = {}
    for run in ctx.runs:
        block = (ctx.tree.summary("grpo", run) or {}).get(REWARD_HACKING)
        if not (isinstance(block, dict) and block.get("steps")):
            continue
        specs = (ctx.tree.config("grpo", run) or {}).get("rewards") or []
        rm = next((s for s in specs if isinstance(s, dict) and s.get("type") == RM_SOURCE), {})
        if mean_fixed_by_construction(rm, _scalar_reward_model(ctx, run)):
            block = without_rm_gain(block)
        out[run] = block
    return out


def _first_last(block: dict, key: str, fmt) -> str:
    """Mean of the first and of the last `window` steps of a per-step series (blocks written before the
    series existed: NA)."""
    series, w = block.get(key), int(block.get("window") or 1)
    if not series:
        return NA
    return f"{fmt(sum(series[:w]) / len(series[:w]))} → {fmt(sum(series[-w:]) / len(series[-w:]))}"


PANELS = (
    ("Reward-model score (optimised reward part)", "rm_score"),
    ("Verifier accuracy on training batches", "verifier_accuracy"),
    ("RM gain (sd of its per-batch spread)", "rm_gain_sd_by_step"),
    ("Verifier gain (sd of its per-batch spread)", "verifier_gain_sd_by_step"),
    ("Completion length (mean tokens)", "completion_length"),
    ("Truncated completions", "truncated_ratio"),
)
CAPTION = (
    "Per training step: the reward-model part the policy is paid by and the verifier (optimised or not, per the "
    "table), each also as its gain over its first steps in its own spread, beside the completion length and the "
    "truncated share. RM gain running ahead of verifier gain while answers grow: hacking."
)


def _figure(ctx: Context, blocks: dict[str, dict], group: list[str], i: int) -> list:
    """The per-step panels of at most plots.MAX_CURVES runs."""

    def panel(title: str, key: str) -> tuple[str, list, bool]:
        curves = [
            plots.Curve(
                r, pd.Series(blocks[r]["steps"]), pd.Series(blocks[r][key], dtype=float), ctx.colors[r]
            )
            for r in group
            if blocks[r].get(key) is not None
        ]
        return title, curves, False

    png = plots.curves(
        [panel(title, key) for title, key in PANELS], ctx.settings.smooth_window, ctx.settings.figure_dpi
    )
    name = "overoptimisation" if i == 0 else f"overoptimisation_{i + 1}"
    return ctx.figure(name, "Reward-model score vs verifier accuracy", png, f"{', '.join(group)}. {CAPTION}")


def _caption(blocks: dict[str, dict]) -> str:
    """The gap's definition, and why a run's RM gain is blank where it is."""
    fixed = [run for run, b in blocks.items() if b.get("rm_gain_note")]
    caption = next(iter(blocks.values()))["definition"]
    return f"{caption}. RM gain blank for {', '.join(fixed)}: {FIXED_MEAN_NOTE}." if fixed else caption


def _overoptimisation(ctx: Context) -> list:
    blocks = _curves(ctx)
    if not blocks:
        return []
    figures = [f for i, g in enumerate(groups(list(blocks), [])) for f in _figure(ctx, blocks, g, i)]
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
            "Length first → last",
            "Truncated first → last",
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
                _first_last(b, "completion_length", num),
                _first_last(b, "truncated_ratio", pct),
            ]
            for run, b in blocks.items()
        ],
        _caption(blocks),
        anchor="overoptimisation",
    )
    return [*figures, table]


def build(ctx: Context) -> Section | None:
    rows = [
        [run, "reward model only" if only else "with other rewards", pct(win, wci), decoding, pts(delta, dci)]
        for run, only, win, wci, decoding, delta, dci in win_rows(ctx)
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
