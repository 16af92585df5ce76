"""Score a round's model on its pool (the training pairs not yet labelled) and on the test pairs: one table
<out>/scores.parquet with id, split (pool | test), score (s(chosen > rejected), the posterior mean for a
Bayesian head), variance (NaN for point heads) and tau, which the next round's acquisition and the curve read.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from prefpipe.active.labelled import TEST, labelled_ids, pool_ids, training_rows
from prefpipe.active.select import SCORE, TAU, VARIANCE
from prefpipe.common.chat import conversation
from prefpipe.common.io import atomic_file, read_jsonl
from prefpipe.common.torch_runtime.device import resolve_device
from prefpipe.evaluation.pair_scoring import score_pairs
from prefpipe.reward.model import load_reward_model
from prefpipe.settings.active import ActiveLearningSettings

log = logging.getLogger("prefpipe.active_score")
SCORES = "scores.parquet"
POOL, TEST_SPLIT = "pool", "test"


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
    if unlabelled:
        parts.append(
            _score(model, [r for r in rows if str(r["id"]) in unlabelled], POOL, settings.batch_size)
        )
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
