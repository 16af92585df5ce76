"""Score a round's model on its pool (the training pairs not yet labelled) and on the test pairs: one table
<out>/scores.parquet with id, split (pool | test | labelled), score (s(chosen > rejected), the posterior mean for
a Bayesian head), variance (NaN for point heads) and tau, which the next round's acquisition and the curve read.

A Bayesian head scoring its pool also writes, on the pool rows, `posterior_samples` seeded draws of P(chosen >
rejected) (columns p_sample_<j>, prefpipe.active.posterior_samples), and on the pool and the labelled rows
(split `labelled`, score NaN) the head's posterior-mean embedding of the prompt alone (prompt_feature_<j>), what
BAL-PM's diversity term measures. An ensemble's members need nothing more: sigmoid(score / tau) of each member's
table is its probability.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from prefpipe.active.labelled import SELECTION, TEST, labelled_ids, pool_ids, training_rows
from prefpipe.active.posterior_samples import (
    FEATURE_PREFIX,
    SAMPLE_PREFIX,
    sample_probabilities,
    sequence_noise,
)
from prefpipe.active.select import SCORE, TAU, VARIANCE
from prefpipe.common.chat import conversation
from prefpipe.common.io import atomic_file, read_json, read_jsonl
from prefpipe.common.torch_runtime.device import resolve_device
from prefpipe.evaluation.pair_scoring import encode_sequences, score_pairs
from prefpipe.reward.model import load_reward_model
from prefpipe.settings.active import ActiveLearningSettings

log = logging.getLogger("prefpipe.active_score")
SCORES = "scores.parquet"
POOL, TEST_SPLIT, LABELLED = "pool", "test", "labelled"


def _score(model: Any, rows: list[dict[str, Any]], split: str, batch_size: int) -> pd.DataFrame:
    scored = score_pairs(
        model,
        [conversation(r) for r in rows],
        [r["chosen"] for r in rows],
        [r["rejected"] for r in rows],
        batch_size=batch_size,
    )
    variance = scored.variance if scored.variance is not None else np.full(len(rows), np.nan)
    return pd.DataFrame(
        {"id": [str(r["id"]) for r in rows], "split": split, SCORE: scored.score, VARIANCE: variance}
    )


def score_round(
    settings: ActiveLearningSettings, model_dir: Path, data: Path, labelled: Path, out: Path, pool: bool
) -> Path:
    """Write <out>/scores.parquet for the model in model_dir (data: the experiment's data folder; labelled:
    the round's data folder, whose selection.json says which training pairs are labelled); the pool rows only
    when a selection reads them (`pool`)."""
    if settings.torch_threads:
        torch.set_num_threads(settings.torch_threads)
    rows = training_rows(data)
    unlabelled = set(pool_ids(rows, labelled_ids(labelled))) if pool else set()
    device = str(resolve_device("auto"))
    model = load_reward_model(model_dir, device=device, fast_paths=settings.fast_paths)
    parts = [_score(model, read_jsonl(data / TEST), TEST_SPLIT, settings.batch_size)]
    pool_rows = [r for r in rows if str(r["id"]) in unlabelled]
    if unlabelled and model.bayesian and settings.posterior_samples:
        selection = read_json(labelled / SELECTION)
        draw_seed = (int(selection["seed"]), int(selection["round"]))
        parts.append(_bayes_pool(model, pool_rows, settings, draw_seed))
        taken = [r for r in rows if str(r["id"]) not in unlabelled]
        parts.append(_labelled_features(model, taken, settings.batch_size))
    elif unlabelled:
        parts.append(_score(model, pool_rows, POOL, settings.batch_size))
    frame = pd.concat(parts, ignore_index=True)
    frame[TAU] = float(model.tau)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_file(out / SCORES) as tmp:
        frame.to_parquet(tmp, index=False)
    test = frame[frame["split"] == TEST_SPLIT]
    log.info(
        "scored %d pool and %d test pairs; test accuracy %.4f",
        len(unlabelled),
        len(test),
        (test[SCORE] > 0).mean(),
    )
    return out / SCORES


def _prompt_features(model: Any, rows: list[dict[str, Any]], batch_size: int) -> pd.DataFrame:
    """The head's posterior-mean embedding of each row's prompt with an empty response."""
    prompts = [conversation(r) for r in rows]
    encoded, _ = encode_sequences(model, prompts, [""] * len(rows), batch_size)
    mean = encoded["mean"].double().numpy()
    return pd.DataFrame(mean, columns=[f"{FEATURE_PREFIX}{j}" for j in range(mean.shape[1])])


def _bayes_pool(
    model: Any, rows: list[dict[str, Any]], settings: ActiveLearningSettings, seed: tuple[int, int]
) -> pd.DataFrame:
    """The pool rows' scores and variances, posterior draws of P(chosen > rejected) and prompt features, from
    one encoding of the pool."""
    prompts = [conversation(r) for r in rows]
    n = len(rows)
    sides = [r["chosen"] for r in rows] + [r["rejected"] for r in rows]
    encoded, _ = encode_sequences(model, prompts + prompts, sides, settings.batch_size)
    chosen = {k: v[:n] for k, v in encoded.items() if "/" not in k}
    rejected = {k: v[n:] for k, v in encoded.items() if "/" not in k}
    shape = (settings.posterior_samples, chosen["mean"].shape[1])
    noise = sequence_noise(prompts + prompts, sides, shape, seed)
    probs = sample_probabilities(
        chosen, rejected, (noise[:n], noise[n:]), float(model.tau), model.head.normalize
    )
    score, variance = (v.double().numpy() for v in model.compare(chosen, rejected))
    frame = pd.DataFrame(
        {"id": [str(r["id"]) for r in rows], "split": POOL, SCORE: score, VARIANCE: variance}
    )
    samples = pd.DataFrame(probs, columns=[f"{SAMPLE_PREFIX}{j}" for j in range(probs.shape[1])])
    return frame.join(samples).join(_prompt_features(model, rows, settings.batch_size))


def _labelled_features(model: Any, rows: list[dict[str, Any]], batch_size: int) -> pd.DataFrame:
    features = _prompt_features(model, rows, batch_size)
    ids = pd.DataFrame(
        {"id": [str(r["id"]) for r in rows], "split": LABELLED, SCORE: np.nan, VARIANCE: np.nan}
    )
    return ids.join(features)
