"""The `uncertainty` block of an evaluation summary (issue 33): how well each of a head's candidate
uncertainties flags its own errors, high-disagreement pairs and unfamiliar pairs (AUROC with a bootstrap
interval stratified by the target), and its abstention curve's area (AURC) against the point margin's.
One home for the candidates and targets, shared by the eval stage (evaluation/benchmark.py), the deep-ensemble
stage (evaluation/ensemble.py) and the command-line table (evaluation/uncertainty_summary.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from prefpipe.evaluation.summary_keys import (
    AURC_VS_MARGIN,
    AUROC,
    DISAGREEMENT,
    ERRORS,
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
    predictive entropy's ranking too); for a Bayesian head also the predictive entropy and mutual information
    of s ~ N(m, v) (`posterior`: uncertainty.gaussian_preference of its scores), and the flip probability and
    raw variance, kept to show what docs/UNCERTAINTY.md says not to read."""
    out = {MARGIN: -np.abs(np.asarray(score, dtype=np.float64))}
    if variance is None:
        return out
    if posterior is None:
        raise ValueError("candidates: a Bayesian head needs its posterior measures (gaussian_preference)")
    return out | {
        PREDICTIVE_ENTROPY: posterior["predictive_entropy"],
        MUTUAL_INFORMATION: posterior["mutual_information"],
        "flip_probability": posterior["flip_probability"],
        "variance": np.asarray(variance, dtype=np.float64),
    }


def targets(
    correct: np.ndarray, pairs: Sequence[dict[str, Any]] | None, disagreement_at: float
) -> dict[str, np.ndarray]:
    """Binary targets an uncertainty should flag: the head's errors, and where every pair records them
    (`pairs`, aligned with `correct`), pairs with flip_rate >= disagreement_at and unfamiliar pairs."""
    out = {ERRORS: ~np.asarray(correct, dtype=bool)}
    if not pairs:
        return out
    if all(r.get("flip_rate") is not None for r in pairs):
        out[DISAGREEMENT] = np.array([float(r["flip_rate"]) >= disagreement_at for r in pairs])
    if all(r.get("unfamiliar") is not None for r in pairs):
        out[UNFAMILIAR] = np.array([bool(r["unfamiliar"]) for r in pairs])
    return out


def uncertainty_block(
    correct: np.ndarray,
    found: dict[str, np.ndarray],
    pairs: Sequence[dict[str, Any]] | None,
    strata: Sequence[Any],
    settings: UncertaintyEvalSettings,
    seed: int,
) -> dict[str, Any]:
    """AUROC [interval] of every candidate for every target of these pairs (targets(); a target with one class
    only is `skipped`), and each candidate's AURC against -|m|'s with a paired interval stratified by `strata`
    (the subsets)."""
    boot = {"resamples": settings.resamples, "confidence": settings.confidence, "seed": seed}
    ok = np.asarray(correct, dtype=bool)
    auroc: dict[str, dict[str, Any]] = {}
    for target, positive in targets(ok, pairs, settings.disagreement_at).items():
        if positive.all() or not positive.any():
            auroc[target] = {"skipped": f"{int(positive.sum())} of {len(positive)} pairs are positive"}
            continue
        auroc[target] = {name: auroc_interval(u, positive, **boot) for name, u in found.items()}
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
