"""Fit the reward head alone, full batch, on cached features of every training pair (train.head_fit).

Why: a GPM score is skew-symmetric, so a head at its small random initialisation sits on a saddle for a
preference cycle (the first-order gradients of a -> b, b -> c, c -> a cancel), and small batches show the cycle's
pairs too rarely to leave it. One no-grad forward over all pairs, then Adam steps on the head over the whole
set, gets there in seconds: after fine-tuning (the head refitted to the final backbone's features; the default)
and optionally before it (before_steps). The loss is the head's own training loss at a given optimizer step (a Bayesian head's KL
weight is the warm-up weight at that step).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import torch

from prefpipe.common.progress import Progress, progress
from prefpipe.reward.collate import TokenizedRow
from prefpipe.reward.heads.disentangle import split_pairs
from prefpipe.reward.losses import LossParts
from prefpipe.reward.model import RewardModel
from prefpipe.settings.reward import RewardSettings

log = logging.getLogger(__name__)


@dataclass
class CachedFeatures:
    """Raw head inputs of n pairs: rows [0, n) are the chosen responses, [n, 2n) the rejected ones."""

    pooled: torch.Tensor  # (2n, head_input_size), before standardisation
    prompt: torch.Tensor  # (2n, H)
    lengths: torch.Tensor  # (2, n): the responses' lengths (disentangle.pair_lengths), for a length head

    @property
    def n(self) -> int:
        return self.pooled.shape[0] // 2


@torch.no_grad()
def cache_features(
    rm: RewardModel,
    chosen: list[TokenizedRow],
    rejected: list[TokenizedRow],
    lengths: torch.Tensor,
    batch_size: int,
) -> CachedFeatures:
    """One eval-mode forward of the backbone over every pair (rows sorted by length: less padding)."""
    was_training = rm.training
    rm.eval()
    rows = list(chosen) + list(rejected)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i].input_ids))
    pooled, prompt = [], []
    starts = range(0, len(order), batch_size)
    for start in progress(starts, len(starts), "head fit features"):
        batch = rm.encoder.pad([rows[i] for i in order[start : start + batch_size]])
        p, h = rm.features(**{k: v.to(rm.device) for k, v in batch.items()})
        pooled.append(p.float())
        prompt.append(h.float())
    rm.train(was_training)
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order, dtype=torch.long)] = torch.arange(len(order))
    return CachedFeatures(torch.cat(pooled)[inverse], torch.cat(prompt)[inverse], lengths)


def pair_loss(rm: RewardModel, feats: CachedFeatures, step: int) -> LossParts:
    """The head's training loss over all cached pairs (train or eval mode, as the head is)."""
    out = rm.score_features(feats.pooled, feats.prompt)
    return rm.head.loss(*split_pairs(out, feats.lengths), step)


def _evaluate(rm: RewardModel, feats: CachedFeatures, step: int) -> tuple[float, float]:
    rm.head.eval()
    with torch.no_grad():
        parts = pair_loss(rm, feats, step)
    return float(parts.loss), float((parts.score > 0).float().mean())


def fit_head(
    rm: RewardModel,
    feats: CachedFeatures,
    steps: int,
    learning_rate: float,
    step: int,
    schedule: str,
    label: str = "",
) -> dict[str, Any]:
    """`steps` full-batch Adam steps on the head's parameters (the backbone is not touched), at a constant
    learning rate or one that decays to 0 along a cosine (`schedule`); returns the eval-mode loss and pair
    accuracy on the cached pairs before and after, and the time taken."""
    t0 = time.time()
    was_training = rm.head.training
    loss0, acc0 = _evaluate(rm, feats, step)
    params = [p for p in rm.head.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=learning_rate)
    decay = (
        torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps) if schedule == "cosine" else None
    )
    rm.head.train()
    trace, every = [], max(1, steps // 10)
    bar = Progress(steps, f"head fit {label}".rstrip())
    for i in range(steps):
        parts = pair_loss(rm, feats, step)
        loss = parts.loss.detach()
        if i % every == 0:
            trace.append(round(float(loss), 6))
        lr = optimizer.param_groups[0]["lr"]
        optimizer.zero_grad(set_to_none=True)
        parts.loss.backward()
        optimizer.step()
        if decay is not None:
            decay.step()
        bar.step(loss=loss, lr=lr)
    bar.close()
    loss1, acc1 = _evaluate(rm, feats, step)
    rm.head.train(was_training)
    return {
        "steps": steps,
        "pairs": feats.n,
        "loss_start": loss0,
        "loss_end": loss1,
        "accuracy_start": acc0,
        "accuracy_end": acc1,
        "loss_trace": trace,  # the train-mode loss every steps/10 steps (Bayesian heads: on samples)
        "seconds": round(time.time() - t0, 3),
    }


def fit_stage(
    rm: RewardModel,
    settings: RewardSettings,
    rows: tuple[list[TokenizedRow], list[TokenizedRow]],
    lengths: torch.Tensor,
    steps: int,
    step: int,
    standardize: bool,
    name: str,
) -> dict[str, Any]:
    """Cache features (with the pairs' response `lengths` (2, n), for a length head), set the standardisation
    buffers when asked (head.standardize, once, before training), fit the head for `steps` steps at optimizer step `step`; log and return the metrics."""
    t0 = time.time()
    # The training micro-batch size (part of the run's fingerprint), not eval.batch_size: batch composition moves
    # features by float rounding, which 1000 Adam steps amplify, so a resumed run must batch exactly alike.
    feats = cache_features(rm, rows[0], rows[1], lengths, settings.train.micro_batch_size)
    seconds = round(time.time() - t0, 3)
    if standardize:
        rm.head.input_norm.fit(feats.pooled)
    fit = settings.train.head_fit
    metrics = fit_head(rm, feats, steps, fit.learning_rate, step, fit.schedule, name)
    metrics["feature_seconds"] = seconds
    log.info(
        "head fit %s: %d full-batch steps on %d pairs, loss %.4f -> %.4f, accuracy %.3f -> %.3f "
        "(features %.1fs, fit %.1fs)",
        name, steps, feats.n, metrics["loss_start"], metrics["loss_end"], metrics["accuracy_start"],
        metrics["accuracy_end"], seconds, metrics["seconds"],
    )  # fmt: skip
    return metrics
