"""BALD, BatchBALD, EPIG (prefpipe.active.information) and BAL-PM's entropy gain (prefpipe.active.diversity)
against brute force: every joint label outcome enumerated, sums over samples written as loops, the
Kozachenko-Leonenko entropy recomputed from scratch for every candidate."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from prefpipe.active.diversity import knn_entropy, select_diverse
from prefpipe.active.information import bald, batch_bald, epig


def _h(probs: list[float]) -> float:
    return -sum(p * math.log(p) for p in probs if p > 0)


def _joint_information(p: np.ndarray, batch: list[int]) -> float:
    """I(y_B; draw) by enumerating the 2^|B| joint labels: H(y_B) - mean_s H(y_B | s)."""
    n = p.shape[1]
    joint = []
    for labels in itertools.product((1, 0), repeat=len(batch)):
        per_sample = [
            math.prod(p[i, s] if y else 1 - p[i, s] for i, y in zip(batch, labels, strict=True))
            for s in range(n)
        ]
        joint.append(sum(per_sample) / n)
    conditional = sum(_h([p[i, s], 1 - p[i, s]]) for i in batch for s in range(n)) / n
    return _h(joint) - conditional


@pytest.fixture
def probs() -> np.ndarray:
    return np.random.default_rng(7).uniform(0.02, 0.98, size=(6, 5))


def test_bald_is_the_one_pair_joint_information(probs):
    assert bald(probs) == pytest.approx([_joint_information(probs, [i]) for i in range(6)])


def test_batch_bald_picks_the_brute_force_argmax_at_every_step(probs):
    picked = batch_bald(probs, 4, configs=1024, seed=0)  # exact: 2^4 <= 1024
    for step in range(4):
        best = max(
            (i for i in range(6) if i not in picked[:step]),
            key=lambda i: _joint_information(probs, [*picked[:step], i]),
        )
        assert picked[step] == best
    assert len(set(picked)) == 4


def test_batch_bald_avoids_a_copy_that_top_k_bald_would_take():
    # pairs 0 and 1 are one nearly noiseless pair twice: the copy's label says almost nothing new; pair 2 splits
    # the samples the other way, so its label adds what top-k BALD (0 and 1, the largest two) leaves out
    p = np.array([[0.99, 0.01, 0.99, 0.01], [0.99, 0.01, 0.99, 0.01], [0.95, 0.95, 0.05, 0.05], [0.5] * 4])
    assert list(np.argsort(-bald(p), kind="stable")[:2]) == [0, 1]
    assert batch_bald(p, 2, configs=1024, seed=0) == [0, 2]
    assert _joint_information(p, [0, 2]) > 1.5 * _joint_information(p, [0, 1])


def test_batch_bald_sampled_configurations_match_the_exact_entropy():
    rng = np.random.default_rng(3)
    p = rng.uniform(0.05, 0.95, size=(12, 6))
    exact = batch_bald(p, 6, configs=4096, seed=0)
    sampled = batch_bald(p, 6, configs=8, seed=0)  # sampled from the fourth pick on
    assert sampled[:4] == exact[:4]
    # the sampled batch's information is within a few percent of the exact greedy batch's
    assert _joint_information(p, sampled) == pytest.approx(_joint_information(p, exact), rel=0.05)


def test_epig_by_loops_over_samples(probs):
    targets = np.random.default_rng(8).uniform(0.02, 0.98, size=(3, 5))
    expected = []
    for i in range(6):
        info = []
        for t in range(3):
            total = 0.0
            for y, yt in itertools.product((1, 0), repeat=2):
                py = [probs[i, s] if y else 1 - probs[i, s] for s in range(5)]
                pt = [targets[t, s] if yt else 1 - targets[t, s] for s in range(5)]
                joint = sum(a * b for a, b in zip(py, pt, strict=True)) / 5
                total += joint * math.log(joint / (sum(py) / 5 * sum(pt) / 5))
            info.append(total)
        expected.append(sum(info) / 3)
    assert epig(probs, targets) == pytest.approx(expected)
    # a pair's label tells nothing about a target whose probability no sample changes
    assert epig(probs, np.full((1, 5), 0.3)) == pytest.approx(np.zeros(6), abs=1e-12)


@pytest.mark.parametrize("k", [1, 2])
def test_diverse_selection_is_the_brute_force_greedy(k):
    rng = np.random.default_rng(k)
    labelled, pool = rng.normal(size=(5, 2)), rng.normal(size=(7, 2))
    pool[3] = labelled[0]  # one pool prompt already labelled: its feature is a copy
    u = rng.uniform(0, 0.7, size=7)
    floor = 1e-3
    picked = select_diverse(u, pool, labelled, 3, weight=1.0, k=k, floor=floor)
    acquired = labelled
    for step in range(3):
        base = knn_entropy(acquired, k, floor)
        gains = {i: knn_entropy(np.vstack([acquired, pool[i]]), k, floor) - base for i in range(7)
                 if i not in picked[:step]}  # fmt: skip
        assert picked[step] == max(gains, key=lambda i: u[i] + gains[i])
        acquired = np.vstack([acquired, pool[picked[step]]])
    assert 3 not in picked


def test_knn_entropy_of_a_gaussian_sample_is_near_its_entropy():
    x = np.random.default_rng(0).normal(size=(4000, 2))
    # up to log V_d - psi(k): V_2 = pi, psi(1) = -euler_gamma; the true entropy is log(2 pi e)
    estimate = knn_entropy(x, 1, 1e-12) + math.log(math.pi) + 0.5772156649
    assert estimate == pytest.approx(math.log(2 * math.pi * math.e), abs=0.05)
