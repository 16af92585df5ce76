"""What the ablation stage does (entry: prefpipe.ablation; the report's section: report/sections/ablation.py):
which Bayesian GPM fixes matter, with paired bootstrap intervals.

For every fix in `ablation.fixes` two contrasts on the same test pairs (prefpipe.evaluation.paired_bootstrap):
- `added`: broken + only this fix, minus broken;
- `removed`: the fixed reference without only this fix, minus the reference.
Each row holds the measured `effect` (variant - baseline) and the fix's own contribution `fix_effect` (the
effect for `added`, minus it for `removed`), per item (overall = the four-section average, and each section),
with percentile intervals, and a verdict on the fix from the interval of `fix_effect`: `matters` (above 0),
`hurts` (below 0) or `neutral` (contains 0).

Two protocols when the evaluation scored each model's head as fine-tuned too (`as_finetuned`: the head before
the full-batch refit of train.head_fit): the top-level rows are the saved models (after the refit, the ones every
other stage uses), `as_finetuned` holds the same contrasts on the heads as fine-tuned. Why both: the refit fits
the head alone on frozen features, which can rescue a fine-tuning run that the broken settings collapsed, so
the saved models measure the refit as much as the Bayesian objective; the heads as fine-tuned measure the
objective as the GPM papers train it (end to end, no refit).

Reads results/eval/<variant>/summary.json and per_example.parquet (the rows of the chosen benchmark), writes
<out>/summary.json (keys below) and <out>/summary.md. The point estimates are recomputed from the per-example
decisions and must equal each variant's recorded scores (else the files do not belong together: a DataError).
"""

from __future__ import annotations

import argparse
import logging
import math
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from prefpipe.common.config import DataError
from prefpipe.common.io import atomic_write_text, read_json
from prefpipe.common.run_record import RunRecord
from prefpipe.common.stats import ABOVE_ZERO, BELOW_ZERO, STRADDLES_ZERO, interval_side, percentile_interval
from prefpipe.evaluation.accuracy_summary import OVERALL
from prefpipe.evaluation.paired_bootstrap import (
    draw,
    point_scores,
    recorded_table,
    resampled_scores,
)
from prefpipe.evaluation.summary_keys import (
    AS_FINETUNED,
    CALIBRATION,
    EXTRA_HEADS,
    HURTS,
    ITEM_TITLES,
    MATTERS,
    MOST_IMPORTANT,
    NEUTRAL,
    ROWS,
    VARIANTS,
    VERDICTS,
)
from prefpipe.settings.ablation import AblationStageSettings
from prefpipe.settings.build import to_mapping

log = logging.getLogger("prefpipe.ablation")
# Per-example decisions of the head as fine-tuned, before the refit (an extra head of the evaluation).
FINETUNED_COLUMN = f"correct_{AS_FINETUNED}"


# The verdict on a fix from where the interval of its effect lies (common.stats.interval_side).
VERDICT_WORDS = {ABOVE_ZERO: MATTERS, STRADDLES_ZERO: NEUTRAL, BELOW_ZERO: HURTS}


def verdict(interval: tuple[float, float]) -> str:
    """The fix matters when its whole interval is above 0, hurts when below, else it is neutral."""
    return VERDICT_WORDS[interval_side(interval)]


def _load(eval_dir: Path, variant: str, benchmark: str | None) -> tuple[str, dict[str, Any], pd.DataFrame]:
    """(benchmark, its summary block, its per-example rows sorted by id) of one variant."""
    folder = eval_dir / variant
    summary = read_json(folder / "summary.json")
    name = benchmark or summary.get("primary_benchmark")
    blocks = summary.get("benchmarks") or {}
    if name not in blocks:
        raise DataError(f"{folder / 'summary.json'}: no benchmark {name!r} (has {sorted(blocks)})")
    frame = pd.read_parquet(folder / "per_example.parquet")
    keep = ["id", "subset", "correct"] + ([FINETUNED_COLUMN] if FINETUNED_COLUMN in frame else [])
    frame = frame.loc[frame["benchmark"] == name, keep]
    if frame.empty or frame["id"].duplicated().any():
        why = "no rows" if frame.empty else "duplicate ids"
        raise DataError(f"{folder / 'per_example.parquet'}: benchmark {name!r} has {why}")
    return name, blocks[name], frame.sort_values("id", kind="stable").reset_index(drop=True)


def run_ablation(settings: AblationStageSettings, eval_dir: Path, out: Path) -> dict[str, Any]:
    """Compute every trained contrast; write summary.json and summary.md under `out`; return the summary."""
    contrasts = settings.contrasts()
    names = list(dict.fromkeys(v for _, _, variant, base in contrasts for v in (base, variant)))
    loaded = {v: _load(eval_dir, v, settings.benchmark) for v in names}
    bench, block, ref = loaded[names[0]]
    table = recorded_table(block, f"{eval_dir / names[0] / 'summary.json'}: benchmarks.{bench}")
    record = RunRecord(out, "ablation", to_mapping(settings))
    for v, (_, _, frame) in loaded.items():
        if not frame["id"].equals(ref["id"]):
            raise DataError(
                f"{eval_dir / v / 'per_example.parquet'}: its {bench} pairs differ from "
                f"{eval_dir / names[0] / 'per_example.parquet'} (a paired bootstrap needs the same pairs)"
            )
    rng = np.random.default_rng(settings.seed)
    draws = draw(list(ref["subset"]), settings.bootstrap_resamples, rng)
    blocks = {v: v_block for v, (_, v_block, _) in loaded.items()}
    frames = {v: frame for v, (_, _, frame) in loaded.items()}
    protocol = partial(_protocol, settings, contrasts, eval_dir, draws, table, blocks, frames)
    refit = protocol("correct", None)  # the saved heads: the models every other stage uses
    done = {(r["fix"], r["kind"]) for r in refit[ROWS]}
    summary = {
        "benchmark": bench,
        "n_pairs": len(ref),
        "reference": settings.reference,
        "broken": settings.broken,
        "bootstrap_resamples": settings.bootstrap_resamples,
        "confidence": settings.confidence,
        "method": (
            "paired stratified bootstrap: pairs drawn with replacement within each subset, the same draw for "
            "both variants; percentile interval; scores recomputed with the evaluation's section map and weights"
        ),
        "items": [i for i in ITEM_TITLES if i in refit[VARIANTS][names[0]]["scores"]],
        **refit,
        "skipped": [
            f"{fix}.{kind}"
            for fix in settings.fixes
            for kind in ("added", "removed")
            if (fix, kind) not in done
        ],
    }
    if all(FINETUNED_COLUMN in frame for frame in frames.values()):
        # The same contrasts on each model's head as fine-tuned, before the head refit: what the Bayesian
        # objective itself trained, which the refit (a full-batch fit of the head on frozen features) can mask.
        summary[AS_FINETUNED] = protocol(FINETUNED_COLUMN, AS_FINETUNED)
    atomic_write_text(out / "summary.md", markdown(summary))
    record.finish(summary, timing={})  # timing.json: the summary stays byte-identical across reruns
    log.info("ablation on %s (%d pairs): most important %s", bench, len(ref), summary[MOST_IMPORTANT])
    if AS_FINETUNED in summary:
        log.info(
            "as fine-tuned (before the head refit): most important %s", summary[AS_FINETUNED][MOST_IMPORTANT]
        )
    return summary


def _protocol(
    settings: AblationStageSettings,
    contrasts: list[tuple[str, str, str, str]],
    eval_dir: Path,
    draws: Any,
    table: Any,
    blocks: dict[str, dict[str, Any]],
    frames: dict[str, pd.DataFrame],
    column: str,
    extra_head: str | None,
) -> dict[str, Any]:
    """{variants, rows, most_important, verdicts} from the per-example decisions in `column` (the saved head's
    `correct`, or an extra head's); point scores are checked against the variant's recorded ones."""
    points, boots, variants = {}, {}, {}
    for v, frame in frames.items():
        recorded = blocks[v] if extra_head is None else (blocks[v].get(EXTRA_HEADS) or {}).get(extra_head, {})
        points[v] = point_scores(list(frame["subset"]), list(frame[column]), table)
        _check_recorded(points[v], recorded, eval_dir / v / "summary.json")
        boots[v] = resampled_scores(list(frame[column]), draws, table)
        variants[v] = {
            "scores": {
                item: {
                    "score": points[v][item],
                    "interval": percentile_interval(boots[v][item], settings.confidence),
                }
                for item in points[v]
            },
            "ece": (recorded.get(CALIBRATION) or {}).get("ece"),
        }
    rows = [_row(fix, kind, v, b, points, boots, settings.confidence) for fix, kind, v, b in contrasts]
    return {
        VARIANTS: variants,
        ROWS: rows,
        MOST_IMPORTANT: most_important(rows),
        VERDICTS: {
            kind: {r["fix"]: r["items"][OVERALL]["verdict"] for r in rows if r["kind"] == kind}
            for kind in ("added", "removed")
        },
    }


def _check_recorded(points: dict[str, float], block: dict[str, Any], path: Path) -> None:
    recorded = block.get(OVERALL)
    if recorded is None or not math.isclose(points[OVERALL], recorded, rel_tol=0, abs_tol=1e-9):
        raise DataError(
            f"{path}: recorded overall {recorded} but its per_example.parquet gives {points[OVERALL]} "
            "(the two files are from different runs)"
        )


def _row(
    fix: str,
    kind: str,
    variant: str,
    baseline: str,
    points: dict[str, dict[str, float]],
    boots: dict[str, dict[str, np.ndarray]],
    confidence: float,
) -> dict[str, Any]:
    sign = 1.0 if kind == "added" else -1.0
    items = {}
    for item in points[variant]:
        if item not in points[baseline]:
            continue
        diff = boots[variant][item] - boots[baseline][item]
        lo, hi = percentile_interval(diff, confidence)
        effect = points[variant][item] - points[baseline][item]
        fix_interval = (lo + 0.0, hi + 0.0) if sign > 0 else (0.0 - hi, 0.0 - lo)  # no -0.0
        items[item] = {
            "effect": effect,
            "interval": [lo, hi],
            "fix_effect": sign * effect + 0.0,
            "fix_interval": list(fix_interval),
            "verdict": verdict(fix_interval),
        }
    return {"fix": fix, "kind": kind, "variant": variant, "baseline": baseline, "items": items}


def most_important(rows: list[dict[str, Any]]) -> dict[str, str | None]:
    """Per kind (and over both), the fix with the largest overall contribution among those that matter."""
    best: dict[str, str | None] = {}
    for kind in ("added", "removed"):
        ranked = [r for r in rows if r["kind"] == kind and r["items"][OVERALL]["verdict"] == MATTERS]
        ranked.sort(key=lambda r: -r["items"][OVERALL]["fix_effect"])
        best[kind] = ranked[0]["fix"] if ranked else None
    mean: dict[str, list[float]] = {}
    for r in rows:
        if r["items"][OVERALL]["verdict"] == MATTERS:
            mean.setdefault(r["fix"], []).append(r["items"][OVERALL]["fix_effect"])
    best["overall"] = max(mean, key=lambda f: sum(mean[f]) / len(mean[f])) if mean else None
    return best


def _pts(value: float, interval: list[float]) -> str:
    return f"{100 * value:+.1f} [{100 * interval[0]:+.1f}, {100 * interval[1]:+.1f}]"


def markdown(summary: dict[str, Any]) -> str:
    """summary.md: per protocol (the heads as fine-tuned, when scored, first; then the saved heads) the
    variants' overall scores, one row per contrast with every item, and a line on which fix matters most."""
    conf = round(100 * summary["confidence"])
    lines = [
        f"# Bayesian GPM ablation on {summary['benchmark']} ({summary['n_pairs']} pairs)",
        "",
        f"Fix effect in points with its {conf}% interval ({summary['bootstrap_resamples']} paired bootstrap "
        f"resamples). added: {summary['broken']} + the fix vs {summary['broken']}; removed: "
        f"{summary['reference']} vs {summary['reference']} without the fix (sign flipped, so > 0 means the fix "
        "helps). Verdict: matters (interval above 0), neutral (contains 0), hurts (below 0).",
    ]
    # the heads as fine-tuned first: they are what the verdicts are read on (the refit can rescue a collapsed
    # fine-tuning run, README "Two ablation protocols"); the saved models follow
    protocols = [("Saved models (after the head refit)", summary)]
    if AS_FINETUNED in summary:
        protocols.insert(0, ("As fine-tuned (each head before the refit)", summary[AS_FINETUNED]))
    for title, block in protocols:
        lines += ["", f"## {title}", "", _overall_line(summary, block), ""]
        lines += _fix_table(summary["items"], block)
    return "\n".join(lines) + "\n"


def _overall_line(summary: dict[str, Any], block: dict[str, Any]) -> str:
    scores = {v: block[VARIANTS][v]["scores"][OVERALL] for v in (summary["reference"], summary["broken"])}
    fixed, broken = (scores[summary[k]] for k in ("reference", "broken"))
    return (
        f"{ITEM_TITLES[OVERALL]}: {summary['reference']} {100 * fixed['score']:.1f}, {summary['broken']} "
        f"{100 * broken['score']:.1f} ({100 * (fixed['score'] - broken['score']):+.1f} points). Most important "
        "(largest effect among the fixes that matter): "
        + "; ".join(f"{kind} {fix or 'none'}" for kind, fix in block[MOST_IMPORTANT].items())
    )


def _fix_table(items: list[str], block: dict[str, Any]) -> list[str]:
    lines = [
        "| Fix | Kind | Variant | " + " | ".join(ITEM_TITLES[i] for i in items) + " |",
        "|---|---|---|" + "---|" * len(items),
    ]
    for r in block[ROWS]:
        cells = [
            f"{_pts(r['items'][i]['fix_effect'], r['items'][i]['fix_interval'])} {r['items'][i]['verdict']}"
            if i in r["items"]
            else "–"
            for i in items
        ]
        lines.append(f"| {r['fix']} | {r['kind']} | {r['variant']} | " + " | ".join(cells) + " |")
    return lines


def run(settings: AblationStageSettings, args: argparse.Namespace) -> None:
    run_ablation(settings, Path(args.eval), Path(args.out))
