"""Score preference pairs with any reward model that follows the contract API (encode / compare).

All 2N (prompt, response) sequences are encoded in batches of similar length (longest first, so an
out-of-memory error shows up in the first batch, and padding is minimal), then put back in row order and
compared chosen-vs-rejected. The model decides how text becomes tokens; scores must not depend on the batch
a sequence lands in, which tests check with batch sizes 1 and 16.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import torch

from prefpipe.common.progress import progress

log = logging.getLogger(__name__)


class PairScorer(Protocol):
    """What evaluation needs from a reward model (prefpipe.reward.model's API)."""

    head_type: str  # the name, for summaries and logs only (behaviour follows `bayesian`)
    tau: float
    bayesian: bool  # compare() must return a score variance

    def encode(
        self, prompts: list[str], responses: list[str], batch_size: int
    ) -> dict[str, torch.Tensor]: ...

    def compare(
        self, enc_a: dict[str, torch.Tensor], enc_b: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor | None]: ...


@dataclass
class PairScores:
    score: np.ndarray  # s(chosen > rejected) per row, float64
    variance: np.ndarray | None  # closed-form Var[s] for Bayesian heads, else None
    seconds: float  # wall time of encoding + comparing
    batches: int
    # The model's extra heads (RewardModel.extra_heads, e.g. the head as fine-tuned) on the same pairs:
    # name -> their own PairScores (seconds 0: scored in the same pass).
    extra: dict[str, PairScores] = field(default_factory=dict)
    # Scalar heads (model.scalar_reward): r(x, y) of every scored response, shape (N, 2): chosen, rejected.
    rewards: np.ndarray | None = None


def _cat(parts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    keys = parts[0].keys()
    for part in parts:
        if part.keys() != keys:
            raise ValueError(
                f"encode returned different keys across batches: {sorted(keys)} vs {sorted(part)}"
            )
    return {k: torch.cat([p[k] for p in parts], dim=0) for k in keys}


def _check_batch(enc: dict[str, torch.Tensor], expected_rows: int) -> None:
    if not isinstance(enc, dict) or not enc:
        raise ValueError(f"encode must return a non-empty dict of tensors, got {type(enc).__name__}")
    for key, value in enc.items():
        if not isinstance(value, torch.Tensor) or value.shape[0] != expected_rows:
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(f"encode output {key!r} has shape {shape}; expected {expected_rows} rows")


def encode_sequences(
    model: PairScorer, prompts: Sequence[str], responses: Sequence[str], batch_size: int
) -> tuple[dict[str, torch.Tensor], int]:
    """Encode (prompts[i], responses[i]) in length-sorted batches (longest first); rows back in input order.
    Returns the encodings and the number of batches. A model with `encode_dataset` (prefpipe's RewardModel)
    gets the whole dataset at once: it tokenises in one batched call and buckets batches by token length."""
    whole = getattr(model, "encode_dataset", None)
    if whole is not None:
        with torch.inference_mode():
            encoded, n_batches = whole(list(prompts), list(responses), batch_size, progress_label="scoring")
        _check_batch(encoded, len(prompts))
        return {k: v.detach().to("cpu") for k, v in encoded.items()}, n_batches
    lengths = np.array([len(p) + len(r) for p, r in zip(prompts, responses, strict=True)])
    order = np.argsort(-lengths, kind="stable")  # longest first
    parts = []
    n_batches = 0
    starts = range(0, len(order), batch_size)
    with torch.inference_mode():
        for start in progress(starts, len(starts), "scoring"):
            idx = order[start : start + batch_size]
            enc = model.encode([prompts[i] for i in idx], [responses[i] for i in idx], batch_size=len(idx))
            _check_batch(enc, len(idx))
            parts.append({k: v.detach().to("cpu") for k, v in enc.items()})
            n_batches += 1
        encoded = _cat(parts)
        inverse = torch.from_numpy(np.argsort(order, kind="stable"))
        return {k: v.index_select(0, inverse) for k, v in encoded.items()}, n_batches


def truncation_counter(model: Any) -> Counter[str] | None:
    """The model's count of truncated sequences by kind (prefpipe.reward.collate.PairEncoder), if it keeps one."""
    counts = getattr(getattr(model, "encoder", None), "truncated", None)
    return Counter(counts) if counts is not None else None


def truncated_pairs(
    model: Any, prompts: Sequence[str], chosen: Sequence[str], rejected: Sequence[str]
) -> list[bool]:
    """Per pair: whether at least one side is cut to the model's max_length (tokenised again by the model's
    own PairEncoder; its running count is left as it was)."""
    encoder = model.encoder
    before = Counter(encoder.truncated)
    try:
        return [
            bool(encoder.tokenize(p, c).cut or encoder.tokenize(p, r).cut)
            for p, c, r in zip(prompts, chosen, rejected, strict=True)
        ]
    finally:
        encoder.truncated.clear()
        encoder.truncated.update(before)


def score_pairs(
    model: PairScorer,
    prompts: Sequence[str],
    chosen: Sequence[str],
    rejected: Sequence[str],
    batch_size: int,
) -> PairScores:
    """s(chosen > rejected | prompt) and its variance (Bayesian heads) for every row, in row order."""
    n = len(prompts)
    if not (len(chosen) == len(rejected) == n):
        raise ValueError(f"score_pairs: {n} prompts, {len(chosen)} chosen, {len(rejected)} rejected")
    if n == 0:
        raise ValueError("score_pairs: no pairs to score")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    start_time = time.perf_counter()
    with torch.inference_mode():
        encoded, n_batches = encode_sequences(
            model, list(prompts) + list(prompts), list(chosen) + list(rejected), batch_size
        )
        enc_chosen = {k: v[:n] for k, v in encoded.items() if "/" not in k}
        enc_rejected = {k: v[n:] for k, v in encoded.items() if "/" not in k}
        score, variance = model.compare(enc_chosen, enc_rejected)
        rewards = scalar_rewards(model, {k: v for k, v in encoded.items() if "/" not in k})
        extra = {}
        for name in getattr(model, "extra_heads", {}):
            part = {k.split("/", 1)[1]: v for k, v in encoded.items() if k.startswith(name + "/")}
            pair = model.compare({k: v[:n] for k, v in part.items()}, {k: v[n:] for k, v in part.items()})
            extra[name] = _checked(model, *pair, n, 0.0, n_batches)
    seconds = time.perf_counter() - start_time
    checked = _checked(model, score, variance, n, seconds, n_batches)
    pair_rewards = None if rewards is None else np.column_stack([rewards[:n], rewards[n:]])
    return replace(checked, extra=extra, rewards=pair_rewards)


def scalar_rewards(model: Any, encoded: dict[str, torch.Tensor]) -> np.ndarray | None:
    """r(x, y) per encoded row for a head with a scalar reward (`model.scalar_reward`), else None."""
    if not getattr(model, "scalar_reward", False):
        return None
    with torch.inference_mode():
        return _as_vector(model.rewards(encoded), len(next(iter(encoded.values()))), "rewards")


def _checked(
    model: PairScorer, score: Any, variance: Any, n: int, seconds: float, batches: int
) -> PairScores:
    """PairScores of one head's compare() output, after checking its shape and values."""
    score_np = _as_vector(score, n, "score")
    var_np = None if variance is None else _as_vector(variance, n, "variance")
    if not np.all(np.isfinite(score_np)):
        bad = np.flatnonzero(~np.isfinite(score_np))
        raise ValueError(f"{len(bad)} non-finite scores (first rows {bad[:5].tolist()}): the model is broken")
    if var_np is not None and (not np.all(np.isfinite(var_np)) or np.any(var_np < 0)):
        raise ValueError("score variance has negative or non-finite values")
    if getattr(model, "bayesian", False) and var_np is None:
        raise ValueError("a Bayesian head must return a score variance from compare()")
    return PairScores(score=score_np, variance=var_np, seconds=seconds, batches=batches)


def _as_vector(value: Any, n: int, name: str) -> np.ndarray:
    array = (
        value.detach().to("cpu", torch.float64).numpy()
        if isinstance(value, torch.Tensor)
        else np.asarray(value)
    )
    array = np.asarray(array, dtype=np.float64).reshape(-1)
    if array.shape != (n,):
        raise ValueError(f"compare returned {name} with {array.size} values for {n} pairs")
    return array
