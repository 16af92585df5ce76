"""The `uncertainty` block of an evaluation summary (docs/findings/UNCERTAINTY.md): how well each of a head's candidate
uncertainties flags its own errors, high-disagreement pairs (among all pairs, and among familiar pairs only) and
unfamiliar pairs (AUROC with a bootstrap interval stratified by the target), and its abstention curve's area (AURC)
against the point margin's.
One home for the candidates and targets, shared by the eval stage (evaluation/benchmark.py), the deep-ensemble
stage (evaluation/ensemble.py) and the command-line table (evaluation/uncertainty_summary.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from prefpipe.evaluation.summary_keys import (
    AURC_VS_MARGIN,
    AUROC,
    DISAGREEMENT,
    DISAGREEMENT_FAMILIAR,
    ERRORS,
    EXPECTED_ENTROPY,
    MARGIN,
    MUTUAL_INFORMATION,
    PREDICTIVE_ENTROPY,
    UNFAMILIAR,
)
from prefpipe.evaluation.uncertainty import aurc_comparison, auroc_interval
from prefpipe.settings.evaluation import UncertaintyEvalSettings


def candidates(
    score: np.ndarray, variance: np.ndarray | None, posterior: dict[str, np.ndarray] | None
) -> dict[str, np.ndarray]:
    """Uncertainties of one head (higher = less sure): -|m| for every head (for a point head that is its
    predictive entropy's ranking too); for a Bayesian head also the predictive entropy of s ~ N(m, v) and its two
    parts, the expected entropy (aleatoric, the part for annotator disagreement) and the mutual information
    (epistemic, for unfamiliar pairs) (`posterior`: uncertainty.gaussian_preference of its scores), and the flip
    probability and raw variance, kept to show what docs/findings/UNCERTAINTY.md says not to read."""
    out = {MARGIN: -np.abs(np.asarray(score, dtype=np.float64))}
    if variance is None:
        return out
    if posterior is None:
        raise ValueError("candidates: a Bayesian head needs its posterior measures (gaussian_preference)")
    return out | {
        PREDICTIVE_ENTROPY: posterior["predictive_entropy"],
        EXPECTED_ENTROPY: posterior["expected_entropy"],
        MUTUAL_INFORMATION: posterior["mutual_information"],
        "flip_probability": posterior["flip_probability"],
        "variance": np.asarray(variance, dtype=np.float64),
    }


class Target(NamedTuple):
    """What an uncertainty should flag: `positive` per pair, scored only among the pairs in `among`."""

    positive: np.ndarray
    among: np.ndarray


def targets(
    correct: np.ndarray, pairs: Sequence[dict[str, Any]] | None, disagreement_at: float
) -> dict[str, Target]:
    """Binary targets an uncertainty should flag: the head's errors, and where every pair records them
    (`pairs`, aligned with `correct`), pairs with flip_rate >= disagreement_at, unfamiliar pairs, and (where
    both are recorded) high-disagreement pairs among the familiar ones only, so that a measure of label noise
    is not scored against novelty."""
    wrong = ~np.asarray(correct, dtype=bool)
    every = np.ones(len(wrong), dtype=bool)
    out = {ERRORS: Target(wrong, every)}
    if not pairs:
        return out
    if all(r.get("flip_rate") is not None for r in pairs):
        noisy = np.array([float(r["flip_rate"]) >= disagreement_at for r in pairs])
        out[DISAGREEMENT] = Target(noisy, every)
    if all(r.get("unfamiliar") is not None for r in pairs):
        unfamiliar = np.array([bool(r["unfamiliar"]) for r in pairs])
        out[UNFAMILIAR] = Target(unfamiliar, every)
        if DISAGREEMENT in out:
            out[DISAGREEMENT_FAMILIAR] = Target(out[DISAGREEMENT].positive, ~unfamiliar)
    return out


def uncertainty_block(
    correct: np.ndarray,
    found: dict[str, np.ndarray],
    pairs: Sequence[dict[str, Any]] | None,
    strata: Sequence[Any],
    settings: UncertaintyEvalSettings,
    seed: int,
) -> dict[str, Any]:
    """AUROC [interval] of every candidate for every target of these pairs (targets(), each among its own
    pairs; a target with one class only there is `skipped`), and each candidate's AURC against -|m|'s with a
    paired interval stratified by `strata` (the subsets)."""
    boot = {"resamples": settings.resamples, "confidence": settings.confidence, "seed": seed}
    ok = np.asarray(correct, dtype=bool)
    auroc: dict[str, dict[str, Any]] = {}
    for target, (positive, among) in targets(ok, pairs, settings.disagreement_at).items():
        y = positive[among]
        if y.all() or not y.any():
            auroc[target] = {"skipped": f"{int(y.sum())} of {len(y)} pairs are positive"}
            continue
        auroc[target] = {name: auroc_interval(u[among], y, **boot) for name, u in found.items()}
    selective = {
        name: aurc_comparison(ok, u, found[MARGIN], strata, **boot)
        for name, u in found.items()
        if name != MARGIN
    }
    return {
        "n": int(len(ok)),
        "accuracy": float(ok.mean()),
        "disagreement_at": settings.disagreement_at,
        "confidence": settings.confidence,
        "resamples": settings.resamples,
        AUROC: auroc,
        AURC_VS_MARGIN: selective,
    }
