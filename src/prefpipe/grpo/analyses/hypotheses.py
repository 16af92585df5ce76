"""The GRPO hypothesis grid: each run changes one factor of a baseline run; per run, the effect on
held-out accuracy and on the training reward, with intervals, the diagnostics that fired and a verdict.

- Accuracy effect: paired over held-out prompts. d_i = trained_correct(run, i) - trained_correct(baseline, i)
  on the prompts both runs were evaluated on (policy_eval per_example.jsonl, the evaluation's primary
  decoding); effect = mean d_i; interval = percentile bootstrap over prompts (resample the n prompts with
  replacement `bootstrap_samples` times; numpy default_rng(seed)), level `confidence`.
- Reward effect: mean training reward over the last `tail_steps` logged steps, run minus baseline; interval =
  bootstrap resampling each run's tail steps independently (not paired: steps differ). Only like is compared
  with like (`compared_reward`): the total reward_mean when both runs sum the same reward sources; the one
  source they share (its `reward/<source>_mean`) when the sources differ (H05's verifier + reward model against
  the verifier alone compares the verifier part); no reward effect when they share none (the reward model
  alone against the verifier: a reward-model score minus a verifier score is not a change).
- Verdict (on accuracy, the question users ask): "helps" when the interval lies above 0, "hurts" when below 0,
  otherwise "no measurable effect".
- Diagnostics: the health checks the report shows too (prefpipe.grpo.analyses.health, thresholds report.diagnostics)
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
from prefpipe.grpo.analyses.health import check_run
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


TOTAL_REWARD = "reward_mean"
SOURCE_PREFIX, SOURCE_SUFFIX = "reward/", "_mean"  # the trainer's per-source columns: reward/<source>_mean


def reward_sources(rows: list[dict]) -> set[str]:
    """The reward sources a run's metrics log (reward/<source>_mean columns)."""
    return {
        key[len(SOURCE_PREFIX) : -len(SOURCE_SUFFIX)]
        for row in rows
        for key in row
        if key.startswith(SOURCE_PREFIX) and key.endswith(SOURCE_SUFFIX)
    }


def compared_reward(run_rows: list[dict], base_rows: list[dict]) -> str | None:
    """The metric the reward effect compares: the total when both runs sum the same sources, else the one
    source both have, else None (nothing in common to compare)."""
    run_sources, base_sources = reward_sources(run_rows), reward_sources(base_rows)
    if run_sources == base_sources:
        return TOTAL_REWARD
    shared = run_sources & base_sources
    return f"{SOURCE_PREFIX}{shared.pop()}{SOURCE_SUFFIX}" if len(shared) == 1 else None


def tail_rewards(rows: list[dict], tail: int, metric: str = TOTAL_REWARD) -> np.ndarray:
    values = [float(r[metric]) for r in rows if r.get(metric) is not None]
    return np.array(values[-tail:])


def reward_effect(run_rows: list[dict], base_rows: list[dict], s: HypothesesSettings) -> dict[str, Any]:
    """The reward effect's fields (reward_metric None and no delta where the runs share no reward source)."""
    metric = compared_reward(run_rows, base_rows)
    if metric is None:
        return {"reward_metric": None, "reward_delta": None, "reward_ci": None}
    tail, base_tail = (
        tail_rewards(run_rows, s.tail_steps, metric),
        tail_rewards(base_rows, s.tail_steps, metric),
    )
    return {
        "reward_metric": metric,
        "reward_mean": float(tail.mean()),
        "baseline_reward_mean": float(base_tail.mean()),
        "reward_delta": float(tail.mean() - base_tail.mean()),
        "reward_ci": list(
            bootstrap_diff_interval(tail, base_tail, s.bootstrap_samples, s.confidence, s.seed)
        ),
    }


def effect_text(value: float, ci: list[float]) -> str:
    """An effect with its interval as the grid's tables show it: +0.012 [-0.030, +0.054]."""
    return f"{value:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]"


def reward_text(r: dict[str, Any]) -> str:
    """A row's reward effect as the tables show it."""
    if r.get("reward_delta") is None:
        return "none: no shared reward source"
    metric = r.get("reward_metric", TOTAL_REWARD)
    part = "" if metric == TOTAL_REWARD else f" ({metric[len(SOURCE_PREFIX) : -len(SOURCE_SUFFIX)]} only)"
    return effect_text(r["reward_delta"], r["reward_ci"]) + part


def diagnostics_text(items: list[dict], baseline: list[dict] | None = None) -> str:
    """The checks that fired, those the baseline did not show first: a long cell is cut at its end (the full
    text in its tooltip), so what a hypothesis adds must not be the part cut (H02's prompt loss was)."""
    seen = {d["check"] for d in baseline or []}
    ordered = sorted(items, key=lambda d: d["check"] in seen)  # stable: the run's own order within each part
    return "; ".join(f"{d['check']} (step {d['first_step']})" for d in ordered) or "none"


def fired(run: str, rows: list[dict], settings: HypothesesSettings) -> list[dict[str, Any]]:
    """The health checks (grpo/analyses/health.py, the report's too) that fired on a run, with their first step."""
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
    tests: dict[str, Any] = {}
    for name, test in s.tests.items():
        runs = {}
        for run in test.runs:
            acc = paired_accuracy(
                per_example[run], per_example[base], s.bootstrap_samples, s.confidence, s.seed
            )
            runs[run] = {
                **acc,
                **reward_effect(metrics[run], metrics[base], s),
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


def markdown(summary: dict[str, Any]) -> str:
    """The six-row table (one row per hypothesis run) and the baseline's own diagnostics."""
    level = round(100 * summary["confidence"])
    lines = [
        f"# GRPO hypotheses (baseline: {summary['baseline']}, held-out decoding: {summary['decoding']})",
        "",
        f"| Hypothesis | Factor | Run | Accuracy change [{level}%] | Reward change [{level}%] "
        "| Diagnostics fired (first step; new to the run first) | Verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, test in summary["tests"].items():
        for run, r in test["runs"].items():
            diagnostics = diagnostics_text(r["diagnostics"], summary["baseline_diagnostics"])
            lines.append(
                f"| {name} | {test['factor']} | {run} | {effect_text(r['accuracy_delta'], r['accuracy_ci'])} "
                f"| {reward_text(r)} | {diagnostics} | {r['verdict']} |"
            )
    lines += [
        "",
        f"Baseline diagnostics fired: {diagnostics_text(summary['baseline_diagnostics'])}.",
        "",
        f"Verdict rule: {summary['verdict_rule']}. Accuracy: paired bootstrap over held-out prompts "
        f"({summary['bootstrap_samples']} samples); reward: training reward over the last "
        f"{summary['tail_steps']} steps (the total, or the one source both runs share, named), bootstrap over steps.",
        "",
    ]
    return "\n".join(lines)
