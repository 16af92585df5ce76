"""The GRPO hypothesis grid: each run changes one factor of a baseline run; per run, the effect on
held-out accuracy and on the training reward, with intervals, the diagnostics that fired and a verdict.

- Accuracy effect: paired over held-out prompts. d_i = trained_correct(run, i) - trained_correct(baseline, i)
  on the prompts both runs were evaluated on (policy_eval per_example.jsonl, the evaluation's primary
  decoding); effect = mean d_i; interval = percentile bootstrap over prompts (resample the n prompts with
  replacement `bootstrap_samples` times; numpy default_rng(seed)), level `confidence`.
- Reward effect: mean training reward (reward_mean) over the last `tail_steps` logged steps, run minus
  baseline; interval = bootstrap resampling each run's tail steps independently (not paired: steps differ).
  Reward definitions differ where the factor is the reward itself (H05): read that row with care.
- Verdict (on accuracy, the question users ask): "helps" when the interval lies above 0, "hurts" when below 0,
  otherwise "no measurable effect".
- Diagnostics: the health checks the report shows too (prefpipe.grpo.health, thresholds report.diagnostics)
  on each run's metrics.jsonl, with the first step at which each fired.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from prefpipe.common.config import DataError
from prefpipe.common.stats import (
    ABOVE_ZERO,
    BELOW_ZERO,
    STRADDLES_ZERO,
    bootstrap_diff_interval,
    bootstrap_mean_interval,
    interval_side,
)
from prefpipe.grpo.health import check_run
from prefpipe.settings.hypotheses import HypothesesSettings

HELPS, HURTS, NO_EFFECT = "helps", "hurts", "no measurable effect"
VERDICT_RULE = (
    "helps: the paired bootstrap interval of the held-out accuracy difference (run - baseline) lies above 0; "
    "hurts: below 0; otherwise no measurable effect"
)


# The verdict from where the accuracy effect's interval lies (common.stats.interval_side).
VERDICT_WORDS = {ABOVE_ZERO: HELPS, STRADDLES_ZERO: NO_EFFECT, BELOW_ZERO: HURTS}


def verdict(interval: tuple[float, float]) -> str:
    return VERDICT_WORDS[interval_side(interval)]


def paired_accuracy(
    run: list[dict], baseline: list[dict], samples: int, confidence: float, seed: int
) -> dict[str, Any]:
    """Paired effect of a run on held-out accuracy (per_example rows of both runs, matched by id)."""
    base = {r["id"]: r["trained_correct"] for r in baseline if r["trained_correct"] is not None}
    pairs = [(float(r["trained_correct"]), float(base[r["id"]])) for r in run if r["id"] in base]
    if not pairs:
        raise DataError(
            "no held-out prompt graded in both the run and the baseline (prompts without answers?)"
        )
    d = np.array([x - y for x, y in pairs])
    return {
        "accuracy": float(np.mean([x for x, _ in pairs])),
        "baseline_accuracy": float(np.mean([y for _, y in pairs])),
        "accuracy_delta": float(d.mean()),
        "accuracy_ci": list(bootstrap_mean_interval(d, samples, confidence, seed)),
        "n_prompts": len(pairs),
    }


def tail_rewards(rows: list[dict], tail: int) -> np.ndarray:
    values = [float(r["reward_mean"]) for r in rows if r.get("reward_mean") is not None]
    return np.array(values[-tail:])


def fired(run: str, rows: list[dict], settings: HypothesesSettings) -> list[dict[str, Any]]:
    """The health checks (grpo/health.py, the report's too) that fired on a run, with their first step."""
    flags = check_run(run, pd.DataFrame(rows), settings.diagnostics)
    return [
        {
            "check": f.check,
            "metric": f.metric,
            "first_step": f.first_step,
            "value": f.value,
            "steps": f.n_steps,
        }
        for f in flags
        if f.status == "flagged"
    ]


def summarise(
    settings: HypothesesSettings,
    per_example: dict[str, list[dict]],
    metrics: dict[str, list[dict]],
    decoding: str | None,
) -> dict[str, Any]:
    """The grid's summary from each run's held-out per-example rows and training metrics."""
    s = settings
    base = s.baseline
    base_tail = tail_rewards(metrics[base], s.tail_steps)
    tests: dict[str, Any] = {}
    for name, test in s.tests.items():
        runs = {}
        for run in test.runs:
            acc = paired_accuracy(
                per_example[run], per_example[base], s.bootstrap_samples, s.confidence, s.seed
            )
            tail = tail_rewards(metrics[run], s.tail_steps)
            reward = {
                "reward_mean": float(tail.mean()),
                "baseline_reward_mean": float(base_tail.mean()),
                "reward_delta": float(tail.mean() - base_tail.mean()),
                "reward_ci": list(
                    bootstrap_diff_interval(tail, base_tail, s.bootstrap_samples, s.confidence, s.seed)
                ),
            }
            runs[run] = {
                **acc,
                **reward,
                "diagnostics": fired(run, metrics[run], s),
                "verdict": verdict(tuple(acc["accuracy_ci"])),
            }
        tests[name] = {"factor": test.factor, "runs": runs}
    return {
        "baseline": base,
        "decoding": decoding,
        "confidence": s.confidence,
        "bootstrap_samples": s.bootstrap_samples,
        "tail_steps": s.tail_steps,
        "verdict_rule": VERDICT_RULE,
        "baseline_diagnostics": fired(base, metrics[base], s),
        "tests": tests,
    }


def _diag_text(items: list[dict]) -> str:
    return "; ".join(f"{d['check']} (step {d['first_step']})" for d in items) or "none"


def markdown(summary: dict[str, Any]) -> str:
    """The six-row table (one row per hypothesis run) and the baseline's own diagnostics."""
    level = round(100 * summary["confidence"])
    lines = [
        f"# GRPO hypotheses (baseline: {summary['baseline']}, held-out decoding: {summary['decoding']})",
        "",
        f"| Hypothesis | Factor | Run | Accuracy change [{level}%] | Reward change [{level}%] "
        "| Diagnostics fired (first step) | Verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, test in summary["tests"].items():
        for run, r in test["runs"].items():
            lo, hi = r["accuracy_ci"]
            rlo, rhi = r["reward_ci"]
            lines.append(
                f"| {name} | {test['factor']} | {run} | {r['accuracy_delta']:+.3f} [{lo:+.3f}, {hi:+.3f}] "
                f"| {r['reward_delta']:+.3f} [{rlo:+.3f}, {rhi:+.3f}] | {_diag_text(r['diagnostics'])} "
                f"| {r['verdict']} |"
            )
    lines += [
        "",
        f"Baseline diagnostics fired: {_diag_text(summary['baseline_diagnostics'])}.",
        "",
        f"Verdict rule: {summary['verdict_rule']}. Accuracy: paired bootstrap over held-out prompts "
        f"({summary['bootstrap_samples']} samples); reward: training reward_mean over the last "
        f"{summary['tail_steps']} steps, bootstrap over steps.",
        "",
    ]
    return "\n".join(lines)
