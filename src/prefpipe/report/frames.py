"""Tidy tables from one results tree, read with the metric names the stages write (imported from where they are
written), with a 95% interval on every accuracy (stats.interval says how each is obtained).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from prefpipe.evaluation import accuracy_summary as acc
from prefpipe.evaluation.summary_keys import BENCHMARKS, HEAD_TYPE, N_PAIRS, PRIMARY_BENCHMARK
from prefpipe.grpo import metric_names as gm
from prefpipe.report.inputs import Tree
from prefpipe.report.stats import as_float, interval

SECTION_TITLES = {"chat": "Chat", "chat_hard": "Chat Hard", "safety": "Safety", "reasoning": "Reasoning"}
OVERALL, CYCLIC = acc.OVERALL, acc.CYCLIC
SCORE_COLUMNS = ["benchmark", "variant", "head", "item", "score", "lo", "hi", "n"]
POLICY_COLUMNS = ["run", "decoding", "primary", "side", "accuracy", "lo", "hi", "n"]


def benchmark_blocks(summary: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """{benchmark: its block} of one eval summary (a summary without `benchmarks` is one benchmark)."""
    if not isinstance(summary, dict):
        return {}
    nested = summary.get(BENCHMARKS)
    if isinstance(nested, dict):
        return {str(k): v for k, v in nested.items() if isinstance(v, dict) and acc.SECTIONS in v}
    return {str(summary.get("benchmark") or "default"): summary} if acc.SECTIONS in summary else {}


def scores(tree: Tree) -> pd.DataFrame:
    """One row per (benchmark, variant, item): item is a section, `overall` or `cyclic`."""
    rows = []
    for variant in tree.names("eval"):
        for bench, block in benchmark_blocks(tree.summary("eval", variant)).items():
            key = {"benchmark": bench, "variant": variant, "head": block.get(HEAD_TYPE) or variant}
            for section, sec in (block.get(acc.SECTIONS) or {}).items():
                if isinstance(sec, dict) and as_float(sec.get(acc.SCORE)) is not None:
                    ci = interval(sec, acc.SCORE, acc.STDERR) or (None, None)
                    rows.append({**key, "item": section, "score": sec[acc.SCORE], "lo": ci[0], "hi": ci[1]})
                    rows[-1]["n"] = sec.get(acc.N)
            if as_float(block.get(OVERALL)) is not None:
                ci = interval(block, OVERALL, acc.OVERALL_STDERR) or (None, None)
                n = block.get(N_PAIRS)
                rows.append(
                    {**key, "item": OVERALL, "score": block[OVERALL], "lo": ci[0], "hi": ci[1], "n": n}
                )
            cyc = block.get(CYCLIC)
            if isinstance(cyc, dict) and as_float(cyc.get(acc.ACCURACY)) is not None and cyc.get(acc.N):
                ci = interval(cyc, acc.ACCURACY) or (None, None)
                rows.append({**key, "item": CYCLIC, "score": cyc[acc.ACCURACY], "lo": ci[0], "hi": ci[1]})
                rows[-1]["n"] = cyc[acc.N]
    return pd.DataFrame(rows, columns=SCORE_COLUMNS)


def policy(tree: Tree) -> pd.DataFrame:
    """Held-out verifier accuracy per (run, decoding, side) with its 95% interval."""
    rows = []
    for run in tree.names("policy_eval"):
        summary = tree.summary("policy_eval", run) or {}
        primary = summary.get(gm.DECODING)
        decodings = summary.get(gm.DECODINGS_KEY)
        if not isinstance(decodings, dict):
            decodings = {primary or "primary": summary}
        for decoding, block in decodings.items():
            for side in ("base", "trained"):
                side_block = block.get(side) if isinstance(block, dict) else None
                if not isinstance(side_block, dict) or as_float(side_block.get(gm.ACCURACY)) is None:
                    continue
                ci = interval(side_block, gm.ACCURACY) or (None, None)
                rows.append(
                    {
                        "run": run,
                        "decoding": decoding,
                        "primary": decoding == primary,
                        "side": side,
                        "accuracy": side_block[gm.ACCURACY],
                        "lo": ci[0],
                        "hi": ci[1],
                        "n": side_block.get(gm.N),
                    }
                )
    return pd.DataFrame(rows, columns=POLICY_COLUMNS)


# A multi-turn run's held-out figures (eval_policy's `episodes` block beside its exact match): (measure, where
# each side's value is, where the paired trained - base is, whether it is a share of questions).
EXACT_MATCH = "exact match"
EPISODE_MEASURES = (
    (EXACT_MATCH, ("{side}", gm.ACCURACY), (gm.PAIRED,), True),
    ("token F1", ("episodes", "{side}", "f1"), ("episodes", "f1_paired"), True),
    (
        "tool calls per episode",
        ("episodes", "{side}", "calls_per_episode"),
        ("episodes", "calls_paired"),
        False,
    ),
    ("support recall", ("episodes", "{side}", "support_recall"), ("episodes", "support_recall_paired"), True),
)
EPISODE_COLUMNS = [
    "run",
    "decoding",
    "primary",
    "measure",
    "share",
    "base",
    "trained",
    "delta",
    "lo",
    "hi",
    "n",
]


def _at(block: Any, path: tuple[str, ...], side: str = "") -> Any:
    for key in path:
        block = block.get(key.format(side=side)) if isinstance(block, dict) else None
    return block


def episodes(tree: Tree) -> pd.DataFrame:
    """Per (multi-turn run, decoding, measure): base, trained and trained - base paired over the held-out
    questions with its interval, as eval_policy recorded them (runs without an `episodes` block: none)."""
    rows = []
    for run in tree.names("policy_eval"):
        summary = tree.summary("policy_eval", run) or {}
        for decoding, block in (summary.get(gm.DECODINGS_KEY) or {}).items():
            if not isinstance(_at(block, ("episodes",)), dict):
                continue
            for measure, side_path, paired_path, share in EPISODE_MEASURES:
                paired = _at(block, paired_path)
                sides = {side: as_float(_at(block, side_path, side)) for side in ("base", "trained")}
                ci = (paired or {}).get("ci") or (None, None)
                rows.append(
                    {
                        "run": run, "decoding": decoding, "primary": decoding == summary.get(gm.DECODING),
                        "measure": measure, "share": share, **sides,
                        "delta": as_float((paired or {}).get("delta")), "lo": ci[0], "hi": ci[1],
                        "n": (paired or {}).get("n"),
                    }
                )  # fmt: skip
    return pd.DataFrame(rows, columns=EPISODE_COLUMNS)


FAILURE_COLUMNS = ["run", "decoding", "primary", "what", "base", "trained", "base_n", "trained_n"]


def episode_failures(tree: Tree) -> pd.DataFrame:
    """Per (multi-turn run, decoding): each failure class's share of the held-out episodes (with its count) and
    each limit's share (search, reading, answering; count None), base and trained, as eval_policy recorded them
    (grpo/analyses/episode_failures.py)."""
    rows = []
    for run in tree.names("policy_eval"):
        summary = tree.summary("policy_eval", run) or {}
        for decoding, block in (summary.get(gm.DECODINGS_KEY) or {}).items():
            failures = _at(block, ("episodes", "failures"))
            if not isinstance(failures, dict):
                continue
            base, trained = failures.get("base") or {}, failures.get("trained") or {}
            head = {"run": run, "decoding": decoding, "primary": decoding == summary.get(gm.DECODING)}
            for part in ("shares", "limits"):
                for what in base.get(part) or {}:
                    counts = {f"{s}_n": (f.get("counts") or {}).get(what) if part == "shares" else None
                              for s, f in (("base", base), ("trained", trained))}  # fmt: skip
                    sides = {
                        s: as_float(_at(f, (part, what))) for s, f in (("base", base), ("trained", trained))
                    }
                    rows.append(
                        head | {"what": what if part == "shares" else f"limit: {what}"} | sides | counts
                    )
    return pd.DataFrame(rows, columns=FAILURE_COLUMNS)


def metrics(tree: Tree, kind: str, key: str) -> pd.DataFrame:
    """metrics.jsonl rows of every variant (kind reward_metrics) or run (grpo_metrics), keyed by `key`."""
    frames = []
    for name, rows in tree.rows.get(kind, {}).items():
        flat = [{k: v for k, v in r.items() if not isinstance(v, dict | list)} for r in rows]
        bad = [
            ",".join(k for k, v in r.items() if isinstance(v, float) and not math.isfinite(v)) for r in flat
        ]
        if flat:
            frames.append(pd.DataFrame(flat).assign(**{key: name, "nonfinite": bad}))
    return (
        pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[key, "step", "nonfinite"])
    )


def headline(tree: Tree, configured: str | None) -> tuple[str | None, str]:
    """The headline benchmark and where that choice came from: report.primary_benchmark, else the
    `primary_benchmark` the evaluation summaries record, else the first benchmark with scores."""
    names: list[str] = []
    recorded = []
    for variant in tree.names("eval"):
        summary = tree.summary("eval", variant) or {}
        names += [b for b in benchmark_blocks(summary) if b not in names]
        if isinstance(summary.get(PRIMARY_BENCHMARK), str):
            recorded.append(summary[PRIMARY_BENCHMARK])
    if configured in names:
        return configured, "report.primary_benchmark"
    recorded = [b for b in recorded if b in names]
    if recorded:
        return max(set(recorded), key=recorded.count), "primary_benchmark of the evaluation summaries"
    return (names[0], "the first benchmark with scores") if names else (None, "no evaluation summaries")
