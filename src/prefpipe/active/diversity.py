"""BAL-PM's selection (Melo et al., NeurIPS 2024): epistemic uncertainty plus the entropy gain of the acquired
prompts' feature distribution, so a batch does not spend its labels on one prompt's pairs.

Entropy of a feature set A (N points in d dimensions), Kozachenko-Leonenko with the k-th neighbour:
    H(A) = psi(N) - psi(k) + log V_d + (d / N) sum_{j in A} log r_k(j),
r_k(j) the distance from j to its k-th nearest other point of A, floored at `floor` (identical features, e.g. two
pairs of one prompt, would otherwise give log 0). Greedy: each pick maximises u_i + weight * (H(A + i) - H(A))
over the free pool pairs, A = the labelled pairs plus the batch so far. Adding i changes r_k(j) only where i is
nearer than it: then r_k(j) becomes max(r_{k-1}(j), |i - j|), which the gain sums without recomputing A.
"""

from __future__ import annotations

import numpy as np
import torch


def _digamma(n: float) -> float:
    return float(torch.special.digamma(torch.tensor(float(n), dtype=torch.float64)))


def _distances(a: np.ndarray, b: np.ndarray, floor: float) -> np.ndarray:
    d2 = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    return np.maximum(np.sqrt(np.maximum(d2, 0.0)), floor)


def knn_entropy(features: np.ndarray, k: int, floor: float) -> float:
    """H(A) up to the constant log V_d - psi(k) (module docstring); brute force over all pairs of points."""
    x = np.asarray(features, dtype=np.float64)
    if len(x) <= k:
        raise ValueError(f"knn_entropy: {len(x)} points, the {k}-th neighbour needs more")
    d = _distances(x, x, floor)
    np.fill_diagonal(d, np.inf)
    r = np.sort(d, axis=1)[:, k - 1]
    return _digamma(len(x)) + x.shape[1] / len(x) * float(np.log(r).sum())


def select_diverse(
    uncertainty: np.ndarray,
    pool: np.ndarray,
    labelled: np.ndarray,
    count: int,
    weight: float,
    k: int,
    floor: float,
) -> list[int]:
    """Indices of the `count` pool rows picked greedily by u + weight * entropy gain (module docstring)."""
    u, pool, acquired = (
        np.asarray(uncertainty, np.float64),
        np.asarray(pool, np.float64),
        np.asarray(labelled, np.float64),
    )
    if len(u) != len(pool) or not 0 < count <= len(pool) or len(acquired) < k:
        raise ValueError(
            f"select_diverse: {len(u)} values, {len(pool)} pool rows, {count} picks, {len(acquired)} labelled"
        )
    dim = pool.shape[1]
    within = _distances(acquired, acquired, floor)
    np.fill_diagonal(within, np.inf)
    nearest = np.sort(within, axis=1)[:, :k]  # each acquired point's k nearest distances
    to_pool = _distances(pool, acquired, floor)  # (pool, acquired)
    free, picked = np.ones(len(pool), dtype=bool), []
    for _ in range(count):
        gain = _gain(nearest, to_pool, dim, k)
        best = int(np.argmax(np.where(free, u + weight * gain, -np.inf)))
        picked.append(best)
        free[best] = False
        new = to_pool[best].copy()  # its distances to the acquired points
        nearest = np.sort(np.concatenate([nearest, new[:, None]], axis=1), axis=1)[:, :k]
        nearest = np.concatenate([nearest, np.sort(new)[None, :k]])
        to_pool = np.concatenate([to_pool, _distances(pool, pool[best : best + 1], floor)], axis=1)
    return picked


def _gain(nearest: np.ndarray, to_pool: np.ndarray, dim: int, k: int) -> np.ndarray:
    """H(A + i) - H(A) for every pool row i (the floor-free log V_d and psi(k) cancel)."""
    n = len(nearest)
    r_k = nearest[:, k - 1]
    r_below = nearest[:, k - 2] if k > 1 else np.zeros(n)
    log_rk = np.log(r_k)
    own = np.log(np.partition(to_pool, k - 1, axis=1)[:, k - 1])
    closer = to_pool < r_k[None, :]
    change = np.where(closer, np.log(np.maximum(r_below[None, :], to_pool)) - log_rk[None, :], 0.0).sum(
        axis=1
    )
    total = log_rk.sum()
    return _digamma(n + 1) - _digamma(n) + dim / (n + 1) * (own + total + change) - dim / n * total
