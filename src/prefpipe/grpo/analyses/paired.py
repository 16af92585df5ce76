"""Paired comparisons of policies on the same evaluation prompts (eval_policy per_example.jsonl rows).

- A run: d_i = trained_correct_i - base_correct_i (both policies answered prompt i).
- An arm (the seeds of one setting, `report.policy_comparison.arms`): per prompt, the mean over its runs of
  d_i (on the prompts every run answered); interval = bootstrap over prompts of that mean. It holds the prompts
  fixed and averages the seeds, so it measures these seeds' average effect; the spread between seeds is the
  mean ± sd of the runs' own effects, shown beside it.
- A contrast of two arms (A - B, e.g. verifier+RM - verifier): per prompt, mean trained_correct over A's runs
  minus the same over B's runs; bootstrap over prompts.
Intervals: common.stats.paired_difference (percentile bootstrap over prompts, seeded).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from prefpipe.common.config import DataError
from prefpipe.common.stats import mean_sd, paired_difference

BASE, TRAINED = "base", "trained"


def correct_key(side: str, decoding: str) -> str:
    """The per_example.jsonl column: 1/0 (true/false) when the side's completion under `decoding` was right."""
    return f"{side}_correct_{decoding}"


def outcomes(rows: list[dict], decoding: str) -> dict[str, tuple[float, float]]:
    """{prompt id: (base correct, trained correct)} of one run, graded prompts only."""
    b, t = correct_key(BASE, decoding), correct_key(TRAINED, decoding)
    return {
        str(r["id"]): (float(r[b]), float(r[t]))
        for r in rows
        if r.get(b) is not None and r.get(t) is not None
    }


def _common(per_run: list[dict[str, tuple[float, float]]], what: str) -> list[str]:
    ids = set.intersection(*(set(o) for o in per_run)) if per_run else set()
    if not ids:
        raise DataError(f"{what}: no evaluation prompt graded in every run compared")
    return sorted(ids)


def arm(
    runs: dict[str, list[dict]], decoding: str, samples: int, confidence: float, seed: int
) -> dict[str, Any]:
    """The arm's pooled paired effect (trained - base) and each run's own, with the mean ± sd over runs."""
    per_run = {name: outcomes(rows, decoding) for name, rows in runs.items()}
    ids = _common(list(per_run.values()), f"arm of runs {', '.join(runs)}")
    base = np.array([[per_run[r][i][0] for i in ids] for r in runs]).mean(axis=0)
    trained = np.array([[per_run[r][i][1] for i in ids] for r in runs]).mean(axis=0)
    own = {
        r: paired_difference(
            [o[1] for o in per_run[r].values()],
            [o[0] for o in per_run[r].values()],
            samples,
            confidence,
            seed,
        )
        for r in runs
    }
    return {
        "runs": list(runs),
        "pooled": paired_difference(trained, base, samples, confidence, seed),
        "per_run": own,
        "across_runs": mean_sd([own[r]["delta"] for r in runs]),
    }


def contrast(
    a: dict[str, list[dict]],
    b: dict[str, list[dict]],
    decoding: str,
    samples: int,
    confidence: float,
    seed: int,
) -> dict[str, Any]:
    """Trained accuracy of arm A minus arm B, paired over the prompts every run of both answered."""
    oa = [outcomes(rows, decoding) for rows in a.values()]
    ob = [outcomes(rows, decoding) for rows in b.values()]
    ids = _common(oa + ob, f"contrast of runs {', '.join(a)} with {', '.join(b)}")
    ta = np.array([[o[i][1] for i in ids] for o in oa]).mean(axis=0)
    tb = np.array([[o[i][1] for i in ids] for o in ob]).mean(axis=0)
    return {"runs_a": list(a), "runs_b": list(b)} | paired_difference(ta, tb, samples, confidence, seed)
