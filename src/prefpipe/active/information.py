"""Acquisition functions over posterior samples of P(a > b): BALD, greedy BatchBALD and EPIG (numpy only).

Input: P of shape (pairs, samples), P[i, s] = p_s(y_i = 1), the probability that pair i's chosen side wins under
posterior sample s (a joint draw: sample s of every pair comes from one posterior draw; prefpipe.active.
posterior_samples says what a draw is for the Bayesian learner; an ensemble's members are its draws).
- BALD(i) = H(mean_s P[i, s]) - mean_s H(P[i, s]), the mutual information of one label and the draw.
- BatchBALD (Kirsch et al. 2019): the batch B maximising I(y_B; draw) = H(y_B) - sum_{i in B} mean_s H(P[i, s]),
  built greedily. H(y_B) sums over the 2^|B| joint labels, p(y_B) = mean_s prod_i p_s(y_i): exactly while
  2^|B| <= `configs`, then over `configs` joint labels sampled from p(y_B) (seeded), each extended by one label
  drawn from p(y_new | y_B) when a pair joins, as the paper's sampling estimator.
- EPIG (Bickford Smith et al. 2023): EPIG(i) = mean_t I(y_i; y_t), the information a label carries about the
  labels of the target pairs t, I(y_i; y_t) = sum_{y, y'} p(y, y') log p(y, y') / (p(y) p(y')),
  p(y, y') = mean_s p_s(y) p_s(y').
"""

from __future__ import annotations

import numpy as np

_TINY = 1e-300


def _entropy(p: np.ndarray) -> np.ndarray:
    q = np.clip(p, 0.0, 1.0)
    return -(q * np.log(np.maximum(q, _TINY)) + (1 - q) * np.log(np.maximum(1 - q, _TINY)))


def _check(probs: np.ndarray, name: str) -> np.ndarray:
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2 or not p.size or not np.all(np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise ValueError(f"{name}: expected probabilities in [0, 1] of shape (pairs, samples), got {p.shape}")
    return p


def bald(probs: np.ndarray) -> np.ndarray:
    """H(mean_s p_s) - mean_s H(p_s) per pair."""
    p = _check(probs, "bald")
    return _entropy(p.mean(axis=1)) - _entropy(p).mean(axis=1)


def epig(probs: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Mean over the target pairs of I(y_i; y_t) per candidate pair (module docstring)."""
    p, t = _check(probs, "epig"), _check(targets, "epig targets")
    if p.shape[1] != t.shape[1]:
        raise ValueError(f"epig: {p.shape[1]} samples for the pool, {t.shape[1]} for the targets")
    n = p.shape[1]
    total = np.zeros((p.shape[0], t.shape[0]))
    for a in (p, 1 - p):
        for b in (t, 1 - t):
            joint = a @ b.T / n
            marginal = np.outer(a.mean(axis=1), b.mean(axis=1))
            total += joint * (np.log(np.maximum(joint, _TINY)) - np.log(np.maximum(marginal, _TINY)))
    return total.mean(axis=1)


def batch_bald(probs: np.ndarray, k: int, configs: int, seed: int) -> list[int]:
    """Indices of the greedy BatchBALD batch of size k (module docstring), in the order they were picked."""
    p = _check(probs, "batch_bald")
    if not 0 < k <= len(p):
        raise ValueError(f"batch_bald: a batch of {k} from {len(p)} pairs")
    rng = np.random.default_rng(seed)
    conditional = _entropy(p).mean(axis=1)
    # joint label configurations of the batch so far: q[m, s] = prod_i p_s(y_i^m) / exp(log_scale[m])
    q, log_scale, weight = np.ones((1, p.shape[1])), np.zeros(1), np.ones(1)
    exact, picked, free = True, [], np.ones(len(p), dtype=bool)
    for _ in range(k):
        joint_h = _joint_entropy(q, log_scale, weight, p)
        gain = np.where(free, joint_h - conditional, -np.inf)
        best = int(np.argmax(gain))  # ties: the smaller index
        picked.append(best)
        free[best] = False
        q, log_scale = _extend(q, log_scale, p[best], exact, rng)
        if exact and len(q) > configs:
            rows = rng.choice(len(q), size=configs, p=_config_prob(q, log_scale))
            q, log_scale, exact = q[rows], log_scale[rows], False
        weight = _config_prob(q, log_scale) if exact else np.full(len(q), 1.0 / len(q))
    return picked


def _config_prob(q: np.ndarray, log_scale: np.ndarray) -> np.ndarray:
    """p(y^m) of every enumerated configuration, normalised (they sum to 1 up to rounding)."""
    w = q.mean(axis=1) * np.exp(log_scale - log_scale.max())
    return w / w.sum()


def _joint_entropy(q: np.ndarray, log_scale: np.ndarray, weight: np.ndarray, p: np.ndarray) -> np.ndarray:
    """H(y_B, y_i) for every candidate i: sum_m weight_m sum_y p(y | y^m) (-log p(y^m, y))."""
    n = q.shape[1]
    base = q.mean(axis=1)[:, None]
    total = np.zeros(len(p))
    for side in (p, 1 - p):
        joint = q @ side.T / n  # p(y^m, y) / exp(log_scale[m])
        log_joint = np.log(np.maximum(joint, _TINY)) + log_scale[:, None]
        total -= weight @ (joint / np.maximum(base, _TINY) * log_joint)
    return total


def _extend(
    q: np.ndarray, log_scale: np.ndarray, p_new: np.ndarray, exact: bool, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The configurations with the new pair's label: both labels (exact) or one drawn from p(y | y^m)."""
    if exact:
        q = np.concatenate([q * p_new, q * (1 - p_new)])
        log_scale = np.concatenate([log_scale, log_scale])
    else:
        win = (q @ p_new) / np.maximum(q.sum(axis=1), _TINY)
        q = np.where((rng.random(len(q)) < win)[:, None], q * p_new, q * (1 - p_new))
    peak = np.maximum(q.max(axis=1), _TINY)
    return q / peak[:, None], log_scale + np.log(peak)
