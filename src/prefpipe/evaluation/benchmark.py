"""Evaluate one benchmark: score its pairs, then per-example table and summary (accuracy + calibration).

per_example columns: id, subset, section (null for cyclic or unassigned subsets), score_chosen_minus_rejected
(s(chosen > rejected); the posterior-mean score for Bayesian heads), variance (Var[s], NaN for point heads),
prob (P(chosen > rejected): prefpipe.evaluation.predictive), correct (score > 0), length (characters of the
prompt plus the longer response), length_chosen, length_rejected (characters, for length-bias analysis),
predictive_entropy (H(prob), nats), mutual_information (the posterior's epistemic part, NaN for point heads);
then flip_rate and unfamiliar where the benchmark's pairs record them (the uncertainty
world, prefpipe.data.synthetic_noise); then, per extra head of the model (the head as fine-tuned, before the
refit), score_<name> and correct_<name>.

Each summary also holds the length split (prefpipe.evaluation.length_split), the length-controlled figures
(prefpipe.evaluation.length_control: reward- and margin-length correlations, length-controlled accuracy),
`truncation` (the pairs the reward model's max_length cut while scoring this benchmark) and `uncertainty`
(prefpipe.evaluation.uncertainty_block: AUROC of the head's uncertainties for its errors and, where recorded, for
high-disagreement and unfamiliar pairs; AURC against the point margin's).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from prefpipe.common.chat import conversation
from prefpipe.common.io import atomic_file
from prefpipe.data.pair_length import response_length
from prefpipe.evaluation.accuracy_summary import is_correct, summarize_scores
from prefpipe.evaluation.calibration import (
    ECE,
    POINT_METHOD,
    PREDICTIVE_METHOD,
    calibration_report,
    mc_expected_sigmoid,
    sigmoid,
)
from prefpipe.evaluation.length_control import length_control_report
from prefpipe.evaluation.length_split import length_report
from prefpipe.evaluation.pair_scoring import (
    PairScorer,
    PairScores,
    score_pairs,
    truncated_pairs,
    truncation_counter,
)
from prefpipe.evaluation.predictive import Predictive, predictive
from prefpipe.evaluation.rewardbench2 import (
    OptionScores,
    expanded_pairs,
    is_ties,
    row_correct,
    row_credit,
    score_options,
    summarize_rows,
)
from prefpipe.evaluation.sections import SectionTable, custom_section_table
from prefpipe.evaluation.summary_keys import (
    CALIBRATION,
    EXTRA_HEADS,
    HEAD_TYPE,
    N_PAIRS,
    PAIR_FIELDS,
    TRUNCATION_KEY,
    UNCERTAINTY,
)
from prefpipe.evaluation.uncertainty import ece_interval
from prefpipe.evaluation.uncertainty_block import candidates, uncertainty_block
from prefpipe.settings.evaluation import UncertaintyEvalSettings

PER_EXAMPLE_COLUMNS = (
    "id",
    "subset",
    "section",
    "score_chosen_minus_rejected",
    "variance",
    "prob",
    "correct",
    "length",
    "length_chosen",
    "length_rejected",
    "predictive_entropy",
    "mutual_information",
)

# Speed figures of a scoring pass: the stage writes them to timing.json, not summary.json (reproducible bytes).
TIMING_KEYS = ("pairs_per_second", "scoring_seconds")


def evaluate_rows(
    model: PairScorer,
    rows: list[dict],
    table: SectionTable,
    batch_size: int,
    n_bins: int,
    coverages: Sequence[float],
    mc_samples: int,
    seed: int,
    length_resamples: int,
    uncertainty: UncertaintyEvalSettings | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Score `rows` with `model`; return the per-example frame and the summary dict for this benchmark
    (`uncertainty`: the bootstrap of its uncertainty block; None = no block)."""
    prompts = [conversation(r) for r in rows]
    chosen = [r["chosen"] for r in rows]
    rejected = [r["rejected"] for r in rows]
    before = truncation_counter(model)
    scored = score_pairs(model, prompts, chosen, rejected, batch_size=batch_size)
    frame, summary = summarize_pairs(
        model, rows, scored, table, n_bins=n_bins, coverages=coverages, mc_samples=mc_samples, seed=seed,
        length_resamples=length_resamples, uncertainty=uncertainty,
    )  # fmt: skip
    summary["batch_size"] = batch_size
    summary[TRUNCATION_KEY] = truncation_report(
        model, before, prompts, chosen, rejected, [r["subset"] for r in rows]
    )
    return frame, summary


def truncation_report(
    model: Any,
    before: Counter[str] | None,
    prompts: list[str],
    chosen: list[str],
    rejected: list[str],
    subsets: list[str],
) -> dict[str, Any] | None:
    """Pairs (in all and per subset) and sequences (by what was cut) that the model's max_length truncated
    while scoring this benchmark; None for a model without a PairEncoder. Pairs are tokenised again only when
    some sequence was cut; `by_subset` lists every subset (0 where nothing was cut)."""
    after = truncation_counter(model)
    if before is None or after is None:
        return None
    sequences = {
        kind: after[kind] - before.get(kind, 0) for kind in after if after[kind] - before.get(kind, 0)
    }
    cut = truncated_pairs(model, prompts, chosen, rejected) if sequences else [False] * len(prompts)
    by_subset = Counter({subset: 0 for subset in subsets})
    by_subset.update(subset for subset, flag in zip(subsets, cut, strict=True) if flag)
    return {
        "max_length": getattr(model.encoder, "max_length", None),
        "pairs": sum(cut),
        "pairs_share": sum(cut) / len(prompts) if prompts else None,
        "sequences": sequences,
        "by_subset": dict(sorted(by_subset.items())),
    }


def _per_example(
    rows: list[dict], scored: PairScores, pred: Predictive, correct: np.ndarray, table: SectionTable
) -> pd.DataFrame:
    """The per_example columns (PER_EXAMPLE_COLUMNS) of scored pairs, then the uncertainty world's per-pair
    fields (PAIR_FIELDS) that every row records."""
    prompts = [r["prompt"] for r in rows]
    chosen = [r["chosen"] for r in rows]
    rejected = [r["rejected"] for r in rows]
    subsets = [r["subset"] for r in rows]
    frame = pd.DataFrame(
        {
            "id": [r["id"] for r in rows],
            "subset": subsets,
            "section": [table.section_of(s) for s in subsets],
            "score_chosen_minus_rejected": scored.score,
            "variance": scored.variance if scored.variance is not None else np.full(len(rows), np.nan),
            "prob": pred.prob,
            "predictive_entropy": pred.entropy,
            "mutual_information": pred.mutual_information,
            "correct": correct,
            "length": [
                len(p) + max(len(c), len(r)) for p, c, r in zip(prompts, chosen, rejected, strict=True)
            ],
            "length_chosen": [len(c) for c in chosen],
            "length_rejected": [len(r) for r in rejected],
        },
        columns=list(PER_EXAMPLE_COLUMNS),
    )
    for name in PAIR_FIELDS:
        if rows and all(r.get(name) is not None for r in rows):
            frame[name] = [r[name] for r in rows]
    return frame


def _extra_heads(
    scored: PairScores,
    frame: pd.DataFrame,
    subsets: list[str],
    table: SectionTable,
    tau: float,
    calibration: dict[str, Any],
) -> dict[str, Any]:
    """{extra head: its scores and ECE}; adds its score_<name> and correct_<name> columns to `frame`."""
    out = {}
    for name, extra in scored.extra.items():
        hits = np.array([is_correct(s) for s in extra.score], dtype=bool)
        frame[f"score_{name}"], frame[f"correct_{name}"] = extra.score, hits
        logit = predictive(extra.score, extra.variance, tau).logit
        ece = calibration_report(logit, hits, extra.variance, score=extra.score, **calibration)["ece"]
        out[name] = {**summarize_scores(subsets, hits, table), CALIBRATION: {"ece": ece}}
    return out


def _variance_checks(
    scored: PairScores,
    correct: np.ndarray,
    prob: np.ndarray,
    tau: float,
    calibration: dict[str, Any],
    mc_samples: int,
    seed: int,
) -> dict[str, Any]:
    """For a head with a score variance: calibration of the posterior mean alone (what the variance changes),
    and the probit approximation of P against a Monte Carlo estimate."""
    out: dict[str, Any] = {
        "calibration_mean_only": calibration_report(scored.score / tau, correct, None, **calibration)
    }
    if mc_samples > 0:
        mc, mc_stderr = mc_expected_sigmoid(scored.score, scored.variance, tau, mc_samples, seed=seed)
        diff = np.abs(mc - prob)
        out["prob_mc_check"] = {
            "samples": mc_samples,
            "max_abs_diff": float(diff.max()),
            "mean_abs_diff": float(diff.mean()),
            "max_mc_stderr": float(mc_stderr.max()),
            "note": "numerically integrated P vs Monte Carlo (differences within a few MC standard errors)",
        }
    return out


def _pair_responses(rows: list[dict], scored: PairScores) -> tuple[np.ndarray, ...] | None:
    """(reward, length, 2 per pair) of both responses of every pair, pair by pair; None without rewards."""
    if scored.rewards is None:
        return None
    lengths = [[response_length(r["chosen"]), response_length(r["rejected"])] for r in rows]
    return scored.rewards.reshape(-1), np.array(lengths).reshape(-1), np.full(len(rows), 2)


def summarize_pairs(
    model: PairScorer,
    rows: list[dict],
    scored: PairScores,
    table: SectionTable,
    n_bins: int,
    coverages: Sequence[float],
    mc_samples: int,
    seed: int,
    length_resamples: int,
    responses: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    uncertainty: UncertaintyEvalSettings | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Per-example frame and summary of scored pairs: accuracy by subset/section, calibration, length split,
    length control, and the uncertainty block when `uncertainty` gives its bootstrap. `responses` (reward,
    length, responses per unit) replaces the pairs' own responses for the reward-length correlation
    (RewardBench 2: each option once, resampled by row)."""
    tau = float(model.tau)
    pred = predictive(scored.score, scored.variance, tau)
    correct = np.array([is_correct(s) for s in scored.score], dtype=bool)
    subsets = [r["subset"] for r in rows]
    frame = _per_example(rows, scored, pred, correct, table)
    calibration = {"n_bins": n_bins, "coverages": coverages}
    summary: dict[str, Any] = {
        N_PAIRS: len(rows),
        HEAD_TYPE: getattr(model, "head_type", None),
        "tau": tau,
        **summarize_scores(subsets, correct, table),
        **length_report(
            [r["chosen"] for r in rows],
            [r["rejected"] for r in rows],
            scored.score,
            [table.section_of(s) for s in subsets],
        ),
        **length_control_report(
            scored.score,
            frame["length_chosen"].to_numpy() - frame["length_rejected"].to_numpy(),
            responses if responses is not None else _pair_responses(rows, scored),
            length_resamples,
            seed,
        ),
        "prob_method": PREDICTIVE_METHOD if scored.variance is not None else POINT_METHOD,
        CALIBRATION: calibration_report(
            pred.logit, correct, scored.variance, score=scored.score, **calibration
        ),
        "pairs_per_second": len(rows) / scored.seconds if scored.seconds > 0 else None,
        "scoring_seconds": scored.seconds,
        "batches": scored.batches,
    }
    if scored.extra:
        summary[EXTRA_HEADS] = _extra_heads(scored, frame, subsets, table, tau, calibration)
    if scored.variance is not None:
        summary |= _variance_checks(scored, correct, pred.prob, tau, calibration, mc_samples, seed)
    if uncertainty is not None:
        summary[UNCERTAINTY] = _uncertainty(rows, scored, pred, correct, uncertainty, seed, n_bins)
    return frame, summary


def _option_responses(rows: list[dict], scores: OptionScores) -> tuple[np.ndarray, ...] | None:
    """(reward, length, options per row) of every option of every row, row by row; None without rewards."""
    if scores.rewards is None:
        return None
    lengths = [response_length(o) for row in rows for o in [*row["chosen"], *row["rejected"]]]
    counts = np.array([len(r) for r in scores.rewards])
    return np.concatenate(scores.rewards), np.array(lengths), counts


def _uncertainty(
    rows: list[dict],
    scored: PairScores,
    pred: Predictive,
    correct: np.ndarray,
    settings: UncertaintyEvalSettings,
    seed: int,
    n_bins: int,
) -> dict[str, Any]:
    """The head's uncertainty block (prefpipe.evaluation.uncertainty_block) on these pairs, with the ECE of the
    calibration block and its interval from the block's bootstrap settings (`ece`)."""
    found = candidates(scored.score, scored.variance, pred.posterior)
    strata = [r["subset"] for r in rows]
    block = uncertainty_block(correct, found, rows, strata, settings, seed)
    boot = {"resamples": settings.resamples, "confidence": settings.confidence, "seed": seed}
    block[ECE] = ece_interval(sigmoid(pred.logit), correct, strata, n_bins=n_bins, **boot)
    return block


def evaluate_rewardbench2(
    model: PairScorer,
    rows: list[dict],
    table: SectionTable | None,
    batch_size: int,
    n_bins: int,
    coverages: Sequence[float],
    mc_samples: int,
    seed: int,
    length_resamples: int,
    uncertainty: UncertaintyEvalSettings | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Score RewardBench 2 rows best-of-n (prefpipe.evaluation.rewardbench2). Subsets, sections and overall
    are the row-level scores; calibration, the length split, the uncertainty block and the per-example table
    are over every (chosen, rejected) pair of every row (`pairwise_accuracy` is their pooled accuracy).
    `table` is unused: RewardBench 2's subsets are its sections."""
    before = truncation_counter(model)
    scores = score_options(model, rows, batch_size)
    pairs, scored = expanded_pairs(rows, scores)
    frame, summary = summarize_pairs(
        model,
        pairs,
        scored,
        custom_section_table({}, "rewardbench2"),
        n_bins=n_bins,
        coverages=coverages,
        mc_samples=mc_samples,
        seed=seed,
        length_resamples=length_resamples,
        responses=_option_responses(rows, scores),
        uncertainty=uncertainty,
    )
    tie_credit = scores.rewards is not None  # scalar heads: the official 1/k tie credit
    decide = row_credit if tie_credit else row_correct
    by_id = {row["id"]: (is_ties(row["subset"]), m) for row, m in zip(rows, scores.matrices, strict=True)}
    frame["row_id"] = [p["row_id"] for p in pairs]
    frame["row_correct"] = [None if by_id[i][0] else row_correct(by_id[i][1]) for i in frame["row_id"]]
    # the credit the row scored: 1/k on a top tie of a scalar head, else 0 or 1 as row_correct
    frame["row_credit"] = [None if by_id[i][0] else float(decide(by_id[i][1])) for i in frame["row_id"]]
    summary["pairwise_accuracy"] = summary.pop("pooled_accuracy")
    for key in ("overall", "overall_stderr", "overall_definition", "overall_sections"):
        summary.pop(key, None)
    summary.update(summarize_rows(rows, scores, tie_credit))
    summary["pooled_accuracy"] = summary["pairwise_accuracy"]
    summary["batch_size"] = batch_size
    prompts = [conversation(p) for p in pairs]
    summary[TRUNCATION_KEY] = truncation_report(
        model,
        before,
        prompts,
        [p["chosen"] for p in pairs],
        [p["rejected"] for p in pairs],
        [p["subset"] for p in pairs],
    )
    return frame, summary


def write_parquet_atomic(frame: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write a parquet file beside its final name (umask-based mode), then rename it into place."""
    with atomic_file(path) as tmp:
        frame.to_parquet(tmp, index=False)
    return Path(path)
