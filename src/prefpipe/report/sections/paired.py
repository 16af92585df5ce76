"""GRPO: paired comparisons on the same evaluation prompts (prefpipe.grpo.analyses.paired). Per run: trained - base
(eval_policy's `paired` block); per arm (the seeds of one setting, report.policy_comparison.arms): pooled per
prompt, with mean ± sd over its runs; per contrast [A, B]: trained accuracy of A - B, paired over prompts."""

from __future__ import annotations

from typing import Any

from prefpipe.grpo import metric_names as gm
from prefpipe.grpo.analyses import paired
from prefpipe.report.document import Claim, Section, Table
from prefpipe.report.sections import Context
from prefpipe.report.sections.policy import verdict
from prefpipe.report.seed_stats import cell
from prefpipe.report.stats import NA, num, pts

TITLE, ANCHOR = "GRPO: paired differences on the same prompts", "paired"


def _word(ci: list[float]) -> str:
    """improved / no clear change / worse: where the interval lies against 0 (the policy table's words)."""
    return verdict((ci[0], ci[1]))


def _run_rows(ctx: Context) -> list[list[str]]:
    rows = []
    for run in ctx.runs:
        decodings = (ctx.tree.summary("policy_eval", run) or {}).get(gm.DECODINGS_KEY) or {}
        for decoding, block in decodings.items():
            p = (block or {}).get(gm.PAIRED)
            if not isinstance(p, dict):
                continue
            rows.append(
                [
                    run,
                    decoding,
                    pts(p["delta"], p["ci"]),
                    _word(p["ci"]),
                    f"{p.get('only_a', NA)} / {p.get('only_b', NA)}",
                    num(p.get("mcnemar_p"), 3),
                    str(p["n"]),
                ]
            )
    return rows


def _stat_settings(ctx: Context, runs: list[str]) -> tuple[int, float, int] | None:
    """Bootstrap samples, confidence and seed of the first run's own paired interval (its eval_policy
    summary), so pooled and contrast intervals are drawn the way each run's was; None when not recorded."""
    decodings = (ctx.tree.summary("policy_eval", runs[0]) or {}).get(gm.DECODINGS_KEY) or {}
    for block in decodings.values():
        p = (block or {}).get(gm.PAIRED)
        if isinstance(p, dict) and {"samples", "confidence", "seed"} <= set(p):
            return int(p["samples"]), float(p["confidence"]), int(p["seed"])
    return None


def _arms(ctx: Context) -> dict[str, dict[str, list[dict]]]:
    """{arm: {run: per_example rows}} for the runs evaluated here."""
    examples = {r: rows for r, rows in ctx.tree.rows.get("policy_examples", {}).items() if rows}
    arms = ctx.settings.policy_comparison.arm_runs(list(examples))
    return {name: {r: examples[r] for r in runs} for name, runs in arms.items()}


def _pooled(ctx: Context, arms: dict[str, dict[str, list[dict]]]) -> list[list[str]]:
    rows = []
    for name, runs in arms.items():
        stat = _stat_settings(ctx, list(runs))
        if len(runs) < 2 or stat is None:
            continue
        for decoding in gm.DECODINGS:
            got = paired.arm(runs, decoding, *stat)
            pooled = got["pooled"]
            rows.append(
                [
                    name,
                    decoding,
                    pts(pooled["delta"], pooled["ci"]),
                    _word(pooled["ci"]),
                    cell(got["across_runs"], signed=True),
                    str(pooled["n"]),
                ]
            )
    return rows


def contrasts(ctx: Context) -> list[dict[str, Any]]:
    """Each configured contrast whose arms were evaluated, per decoding (the claims read these too)."""
    arms, out = _arms(ctx), []
    for a, b in ctx.settings.policy_comparison.contrasts:
        if a not in arms or b not in arms:
            continue
        stat = _stat_settings(ctx, list(arms[a]))
        if stat is None:
            continue
        for decoding in gm.DECODINGS:
            got = paired.contrast(arms[a], arms[b], decoding, *stat)
            out.append({"a": a, "b": b, "decoding": decoding, **got})
    return out


def claims(ctx: Context) -> list[Claim]:
    return [
        Claim(
            f"{c['a']} − {c['b']} ({c['decoding']}), trained accuracy paired over {c['n']} prompts: "
            f"{pts(c['delta'], c['ci'])}, {_word(c['ci'])}.",
            "paired-contrasts",
        )
        for c in contrasts(ctx)
    ]


def build(ctx: Context) -> Section | None:
    runs = _run_rows(ctx)
    if not runs:
        return None
    method = "percentile bootstrap over prompts (grpo eval.bootstrap_samples, eval.confidence)"
    blocks: list = [
        Table(
            "Trained − base per run, paired over prompts",
            [
                "Run",
                "Decoding",
                "Change [95%]",
                "Verdict",
                "Only trained / only base right",
                "McNemar p",
                "Prompts",
            ],
            runs,
            f"Both policies answer the same prompts; the interval is a {method}; McNemar's exact test on the "
            "prompts only one of the two got right.",
            anchor="paired-runs",
        )
    ]
    arms = _arms(ctx)
    pooled = _pooled(ctx, arms)
    if pooled:
        blocks.append(
            Table(
                "Trained − base per arm (seeds pooled per prompt)",
                ["Arm", "Decoding", "Pooled change [95%]", "Verdict", "Mean ± sd over runs (pts)", "Prompts"],
                pooled,
                "Pooled: per prompt, the mean over the arm's runs of trained − base; interval: bootstrap over "
                "prompts (these seeds held fixed). The spread between seeds is the mean ± sd column.",
                anchor="paired-arms",
            )
        )
    found = contrasts(ctx)
    if found:
        rows = [
            [f"{c['a']} − {c['b']}", c["decoding"], pts(c["delta"], c["ci"]), _word(c["ci"]), str(c["n"])]
            for c in found
        ]
        blocks.append(
            Table(
                "Difference between runs, paired over prompts",
                ["Contrast", "Decoding", "Trained accuracy difference [95%]", "Verdict", "Prompts"],
                rows,
                "Per prompt: mean trained correctness over arm A's runs minus arm B's; bootstrap over prompts.",
                anchor="paired-contrasts",
            )
        )
    return Section(TITLE, blocks, ANCHOR)
