"""The joint-sample strategies wired into the registry (prefpipe.active.select) read what the pool scoring saves,
and the Bayesian learner's seeded posterior draws (prefpipe.active.posterior_samples) have the posterior's
moments (closed-form mean and variance of the score) and one draw per distinct sequence."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
from support.settings import pipeline

from prefpipe.active.diversity import select_diverse
from prefpipe.active.information import batch_bald, epig
from prefpipe.active.posterior_samples import sample_probabilities, sequence_noise
from prefpipe.active.select import select
from prefpipe.evaluation.uncertainty import gaussian_preference
from prefpipe.reward.scores import gpm_score, gpm_score_variance

AL = {"enabled": True, "learner": "bgpm", "ensemble": None, "seeds": [0], "rounds": 2, "initial_labels": 4,
      "labels_per_round": 3, "posterior_samples": 6, "epig_targets": 5, "joint_configs": 4}  # fmt: skip


def _tables(n: int = 9, draws: int = 6) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(0)
    ids = [f"p{i:02d}" for i in range(n)]
    pool = pd.DataFrame({"id": ids, "split": "pool", "score": rng.normal(size=n), "variance": rng.uniform(0.1, 1, n),
                         "tau": 0.5})  # fmt: skip
    for j in range(draws):
        pool[f"p_sample_{j}"] = rng.uniform(0.05, 0.95, n)
    for j in range(3):
        pool[f"prompt_feature_{j}"] = rng.normal(size=n)
    labelled = pd.DataFrame({"id": ["a", "b", "c", "d"], "split": "labelled"})
    for j in range(3):
        labelled[f"prompt_feature_{j}"] = rng.normal(size=4)
    return pool, labelled


def _settings(strategy: str):
    return pipeline({"active_learning": {**AL, "strategies": ["random", strategy]}}).active_learning


def test_batchbald_and_epig_read_the_learners_draws():
    pool, labelled = _tables()
    ids = list(pool["id"])
    probs = pool[[f"p_sample_{j}" for j in range(6)]].to_numpy()
    got = select("batchbald", _settings("batchbald"), ids, {"bgpm": pool}, 3, 0, 1)
    seed = int(np.random.default_rng((0, 1)).integers(2**31))
    assert got == [ids[i] for i in batch_bald(probs, 3, 4, seed)]
    got = select("epig", _settings("epig"), ids, {"bgpm": pool}, 3, 0, 1)
    targets = np.random.default_rng(seed).choice(9, size=5, replace=False)
    values = epig(probs, probs[targets])
    assert got == [ids[i] for i in np.argsort(-values, kind="stable")[:3]]


def test_balpm_reads_the_labelled_prompts_features():
    pool, labelled = _tables()
    ids = list(pool["id"])
    got = select("balpm", _settings("balpm"), ids, {"bgpm": pool}, 3, 0, 1, {"bgpm": labelled})
    u = gaussian_preference(pool["score"], pool["variance"], 0.5)["mutual_information"]
    cols = [f"prompt_feature_{j}" for j in range(3)]
    expected = select_diverse(u, pool[cols].to_numpy(), labelled[cols].to_numpy(), 3, 1.0, 3, 1e-6)
    assert got == [ids[i] for i in expected]


def test_ensemble_batchbald_reads_the_members_probabilities():
    members = {"m0": "gpm", "m1": "gpm-seed1"}
    # members are derived from eval.ensembles in a pipeline; given by hand here
    settings = dataclasses.replace(_settings("batchbald"), members=list(members))
    rng = np.random.default_rng(1)
    ids = [f"p{i}" for i in range(6)]
    tables = {m: pd.DataFrame({"id": ids, "split": "pool", "score": rng.normal(size=6), "tau": t})
              for m, t in zip(members, (0.5, 2.0), strict=True)}  # fmt: skip
    probs = np.stack([1 / (1 + np.exp(-tables[m]["score"] / tables[m]["tau"])) for m in members], 1)
    seed = int(np.random.default_rng((0, 1)).integers(2**31))
    got = select("ensemble_batchbald", settings, ids, tables, 2, 0, 1)
    assert got == [ids[i] for i in batch_bald(probs, 2, 4, seed)]


def test_a_strategy_without_the_draws_names_what_is_missing():
    pool, _ = _tables(draws=0)
    with pytest.raises(Exception, match="p_sample_"):
        select("batchbald", _settings("batchbald"), list(pool["id"]), {"bgpm": pool}, 3, 0, 1)


def test_posterior_draws_have_the_closed_form_moments_and_one_draw_per_sequence():
    torch.manual_seed(0)
    n, dim, draws = 3, 4, 40000
    enc = [{"mean": torch.randn(n, dim), "var": torch.rand(n, dim) * 0.3} for _ in range(2)]
    prompts, chosen, rejected = ["x", "y", "x"], ["a", "b", "a"], ["c", "d", "e"]
    noise = (
        sequence_noise(prompts, chosen, (draws, dim), (0, 1)),
        sequence_noise(prompts, rejected, (draws, dim), (0, 1)),
    )
    assert np.array_equal(noise[0][0], noise[0][2]) and not np.array_equal(noise[1][0], noise[1][2])
    enc[0]["mean"][2], enc[0]["var"][2] = enc[0]["mean"][0], enc[0]["var"][0]
    tau = 1e6  # sigmoid(s / tau) ~ 1/2 + s / (4 tau): the draws' scores, read back
    p = sample_probabilities(enc[0], enc[1], noise, tau, normalize=False)
    s = (p - 0.5) * 4 * tau
    mean = gpm_score(enc[0]["mean"], enc[1]["mean"]).double().numpy()
    var = gpm_score_variance(enc[0]["mean"], enc[0]["var"], enc[1]["mean"], enc[1]["var"]).double().numpy()
    assert s.mean(1) == pytest.approx(mean, abs=4 * np.sqrt(var / draws).max() + 1e-3)
    assert s.var(1) == pytest.approx(var, rel=0.05)
