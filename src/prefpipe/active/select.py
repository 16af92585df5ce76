"""Acquisition: which unlabelled training pairs a round adds to the labelled set (a registry, one entry per
strategy).

Every strategy takes k pairs from the pool (the training pairs not yet labelled) and never one already labelled.
- random: the first k of a permutation of the pool (sorted by id) drawn from numpy's generator seeded with
  (seed, round), so a seed gives the same draw on every machine.
- bgpm: the k pairs of largest posterior mutual information (BALD) of the learner, a Bayesian GPM:
  H(E[sigmoid(s/tau)]) - E[H(sigmoid(s/tau))] for s ~ N(m, v), the epistemic part docs/findings/UNCERTAINTY.md names as
  the quantity for active learning (prefpipe.evaluation.uncertainty.gaussian_preference).
- ensemble: the k pairs where the ensemble's members disagree most, the sd of their scores (eval_ensemble's
  `score_sd`, prefpipe.evaluation.uncertainty.ensemble_preference).
- ensemble_bald: the k pairs of largest mutual information over the members (BALD with the members as the
  posterior samples): H(mean_m p_m) - mean_m H(p_m), p_m = sigmoid(s_m / tau_m) with each member's own tau.
  It ranks the eval's errors where the raw sd does not (docs/findings/ACTIVE_LEARNING.md).
- batchbald / ensemble_batchbald: the greedy BatchBALD batch over joint posterior samples (the learner's seeded
  draws / the members), epig / ensemble_epig: the k pairs of largest EPIG about `epig_targets` pool pairs drawn
  from (seed, round) (prefpipe.active.information).
- balpm: BAL-PM, the learner's BALD plus `diversity_weight` x the entropy gain of the labelled prompts' features
  (prefpipe.active.diversity), picked greedily.
Ties in the uncertainty go to the smaller id, so the selection is a function of the scores alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from prefpipe.active.diversity import select_diverse
from prefpipe.active.information import batch_bald, epig
from prefpipe.active.posterior_samples import FEATURE_PREFIX, SAMPLE_PREFIX
from prefpipe.common.config import ConfigError, DataError
from prefpipe.evaluation.uncertainty import ensemble_preference, gaussian_preference
from prefpipe.settings.active import ActiveLearningSettings

SCORE, VARIANCE, TAU = "score", "variance", "tau"  # the pool-score table's columns beside `id` and `split`


@dataclass(frozen=True)
class Acquisition:
    """One strategy: the variants whose pool scores it reads, their pairs' uncertainties (None: random), and
    whether those variants must be Bayesian heads (True), point heads (False) or either (None)."""

    scorers: Callable[[ActiveLearningSettings], list[str]]
    uncertainty: Callable[[dict[str, pd.DataFrame]], np.ndarray] | None
    bayesian: bool | None
    # a batch-aware strategy: (aligned pool tables, what it may read) -> the indices of its k picks
    greedy: Callable[[dict[str, pd.DataFrame], Picking], list[int]] | None = field(default=None)
    draws: bool = False  # reads the learner's posterior draws and prompt features (posterior_samples > 0)


@dataclass(frozen=True)
class Picking:
    """What a greedy or target-reading strategy reads beside the pool tables."""

    settings: ActiveLearningSettings
    k: int
    seed: int
    round_: int
    labelled: dict[str, pd.DataFrame]  # variant -> its labelled rows (prompt features), may be empty


def _posterior_information(scores: dict[str, pd.DataFrame]) -> np.ndarray:
    ((name, frame),) = scores.items()
    if frame[VARIANCE].isna().any():
        raise ConfigError(
            f"active_learning: the bgpm strategy needs a Bayesian learner; {name} has no variance"
        )
    m, v = frame[SCORE].to_numpy(np.float64), frame[VARIANCE].to_numpy(np.float64)
    return gaussian_preference(m, v, float(frame[TAU].iloc[0]))["mutual_information"]


def _member_sd(scores: dict[str, pd.DataFrame]) -> np.ndarray:
    members = np.stack([f[SCORE].to_numpy(np.float64) for f in scores.values()], axis=1)
    tau = float(next(iter(scores.values()))[TAU].iloc[0])
    return ensemble_preference(members, tau)["score_sd"]


def _member_information(scores: dict[str, pd.DataFrame]) -> np.ndarray:
    logits = np.stack(
        [f[SCORE].to_numpy(np.float64) / f[TAU].to_numpy(np.float64) for f in scores.values()], 1
    )
    return ensemble_preference(logits, 1.0)["mutual_information"]


def _columns(frame: pd.DataFrame, prefix: str, name: str) -> np.ndarray:
    cols = [c for c in frame.columns if c.startswith(prefix)]
    if not cols or frame[cols].isna().any().any():
        raise ConfigError(
            f"active_learning: {name} has no {prefix}* columns (a Bayesian learner scored with posterior_samples > 0)"
        )
    return frame[sorted(cols, key=lambda c: int(c[len(prefix) :]))].to_numpy(np.float64)


def _learner_samples(scores: dict[str, pd.DataFrame]) -> np.ndarray:
    ((name, frame),) = scores.items()
    return _columns(frame, SAMPLE_PREFIX, name)


def _member_probabilities(scores: dict[str, pd.DataFrame]) -> np.ndarray:
    return np.stack(
        [
            1 / (1 + np.exp(-f[SCORE].to_numpy(np.float64) / f[TAU].to_numpy(np.float64)))
            for f in scores.values()
        ],
        1,
    )


def _batch_bald(samples: Callable[[dict[str, pd.DataFrame]], np.ndarray]) -> Callable[..., list[int]]:
    def pick(scores: dict[str, pd.DataFrame], ctx: Picking) -> list[int]:
        return batch_bald(samples(scores), ctx.k, ctx.settings.joint_configs, _seed(ctx))

    return pick


def _epig(samples: Callable[[dict[str, pd.DataFrame]], np.ndarray]) -> Callable[..., list[int]]:
    def pick(scores: dict[str, pd.DataFrame], ctx: Picking) -> list[int]:
        probs = samples(scores)
        count = min(ctx.settings.epig_targets, len(probs))
        targets = np.random.default_rng(_seed(ctx)).choice(len(probs), size=count, replace=False)
        return _top_indices(epig(probs, probs[targets]), ctx.k, scores)

    return pick


def _balpm(scores: dict[str, pd.DataFrame], ctx: Picking) -> list[int]:
    ((name, frame),) = scores.items()
    labelled = _columns(ctx.labelled.get(name, pd.DataFrame()), FEATURE_PREFIX, f"{name}'s labelled rows")
    s = ctx.settings
    return select_diverse(
        _posterior_information(scores), _columns(frame, FEATURE_PREFIX, name), labelled, ctx.k,
        s.diversity_weight, s.diversity_neighbours, _FLOOR,
    )  # fmt: skip


_FLOOR = 1e-6  # distance floor of the entropy estimate (features are unit vectors: distances up to 2)


def _seed(ctx: Picking) -> int:
    return int(np.random.default_rng((ctx.seed, ctx.round_)).integers(2**31))


def _top_indices(values: np.ndarray, k: int, scores: dict[str, pd.DataFrame]) -> list[int]:
    ids = list(next(iter(scores.values()))["id"])
    where = {i: n for n, i in enumerate(ids)}
    return [where[i] for i in top_k(values, ids, k)]


ACQUISITIONS: dict[str, Acquisition] = {
    "random": Acquisition(lambda s: [], None, None),
    "bgpm": Acquisition(lambda s: [s.learner], _posterior_information, True),
    "ensemble": Acquisition(lambda s: list(s.members), _member_sd, False),
    "ensemble_bald": Acquisition(lambda s: list(s.members), _member_information, False),
    "batchbald": Acquisition(lambda s: [s.learner], None, True, _batch_bald(_learner_samples), True),
    "epig": Acquisition(lambda s: [s.learner], None, True, _epig(_learner_samples), True),
    "balpm": Acquisition(lambda s: [s.learner], None, True, _balpm, True),
    "ensemble_batchbald": Acquisition(
        lambda s: list(s.members), None, False, _batch_bald(_member_probabilities)
    ),
    "ensemble_epig": Acquisition(lambda s: list(s.members), None, False, _epig(_member_probabilities)),
}


def acquisition(name: str) -> Acquisition:
    if name not in ACQUISITIONS:
        raise ConfigError(
            f"active_learning.strategies: unknown strategy {name!r} (known: {sorted(ACQUISITIONS)})"
        )
    return ACQUISITIONS[name]


def check_strategies(settings: ActiveLearningSettings, is_bayesian: Callable[[str], bool]) -> None:
    """Every strategy is registered and has the scorers it reads, of the kind of head it needs
    (is_bayesian(variant): whether that reward variant's head is Bayesian)."""
    for name in settings.strategies:
        rule = acquisition(name)
        scorers = rule.scorers(settings)
        if rule.draws and not settings.posterior_samples:
            raise ConfigError(
                f"active_learning.strategies: {name!r} reads the learner's posterior draws; "
                "active_learning.posterior_samples is 0"
            )
        if (rule.uncertainty is not None or rule.greedy is not None) and not scorers:
            raise ConfigError(f"active_learning.strategies: {name!r} needs active_learning.ensemble")
        for variant in scorers:
            if rule.bayesian is not None and is_bayesian(variant) != rule.bayesian:
                kind = "a Bayesian" if rule.bayesian else "a point"
                raise ConfigError(
                    f"active_learning.strategies: {name!r} reads {variant}, which is not {kind} head"
                )


def top_k(uncertainty: np.ndarray, ids: Sequence[str], k: int) -> list[str]:
    """The k ids of largest uncertainty, ties broken by the smaller id."""
    u = np.asarray(uncertainty, dtype=np.float64)
    if len(u) != len(ids) or not np.all(np.isfinite(u)):
        raise DataError(f"acquisition: {len(u)} finite uncertainties needed for {len(ids)} pool pairs")
    id_rank = np.argsort(np.argsort(np.asarray(ids, dtype=str), kind="stable"), kind="stable")
    order = np.lexsort((id_rank, -u))  # the last key sorts first: largest u, then smallest id
    return [ids[i] for i in order[:k]]


def random_pick(ids: Sequence[str], k: int, seed: int, round_: int) -> list[str]:
    """The first k of a permutation of the ids (sorted), drawn from default_rng((seed, round))."""
    pool = sorted(ids)
    order = np.random.default_rng((seed, round_)).permutation(len(pool))
    return [pool[i] for i in order[:k]]


def select(
    name: str,
    settings: ActiveLearningSettings,
    pool: Sequence[str],
    scores: dict[str, pd.DataFrame],
    k: int,
    seed: int,
    round_: int,
    labelled: dict[str, pd.DataFrame] | None = None,
) -> list[str]:
    """The k pool ids strategy `name` labels before round `round_` (scores: variant -> its pool-score table;
    labelled: variant -> its labelled rows, read by balpm)."""
    if k > len(pool):
        raise DataError(f"active_learning: round {round_} adds {k} pairs but only {len(pool)} are unlabelled")
    rule = acquisition(name)
    if rule.uncertainty is None and rule.greedy is None:
        return random_pick(pool, k, seed, round_)
    aligned = {}
    for variant in rule.scorers(settings):
        frame = scores[variant].set_index("id")
        missing = set(pool) - set(frame.index)
        if missing:
            raise DataError(
                f"active_learning: {variant}'s pool scores miss {len(missing)} pairs, e.g. {min(missing)}"
            )
        aligned[variant] = frame.loc[list(pool)].reset_index()
    if rule.greedy is not None:
        picks = rule.greedy(aligned, Picking(settings, k, seed, round_, labelled or {}))
        return [pool[i] for i in picks]
    assert rule.uncertainty is not None
    return top_k(rule.uncertainty(aligned), list(pool), k)
