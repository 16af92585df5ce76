"""Active learning's stages on a tiny real run, in the default tier (issue 52; tests/test_active_workflow.py runs
the same chain through Snakemake in the slow tier): active_label -> active_train -> active_score over 2 rounds
of 2 strategies (random, bgpm) and one seed, then active_curve, each stage's `main` on real files with a tiny
backbone, as the al_* rules call them. The labelled sets and selections are recomputed here from the files the
run wrote: random's draw with numpy's generator, bgpm's top-k of the mutual information with a plain sort."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.models import save_tiny_base
from support.rows import write_reward_data
from support.settings import pipeline, stage_json, tiny_reward_settings
from support.stages import run_main

from prefpipe.active_curve import main as curve_main
from prefpipe.active_label import main as label_main
from prefpipe.active_score import main as score_main
from prefpipe.active_train import main as train_main
from prefpipe.common.io import read_json, read_jsonl
from prefpipe.evaluation.uncertainty import gaussian_preference

ACTIVE = {
    "enabled": True, "strategies": ["random", "bgpm"], "learner": "bgpm", "ensemble": None, "seeds": [0],
    "rounds": 2, "initial_labels": 8, "labels_per_round": 4, "kl_weight": "labelled", "batch_size": 8,
}  # fmt: skip
INITIAL, ADDED = 8, 4


def _random_draw(ids: list[str], k: int, seed: int, round_: int) -> list[str]:
    pool = sorted(ids)
    return [pool[i] for i in np.random.default_rng((seed, round_)).permutation(len(pool))[:k]]


def _largest(values: pd.Series, k: int) -> list[str]:
    """The k ids of largest value, ties to the smaller id."""
    return [i for _, i in sorted(zip(-values.to_numpy(), values.index, strict=True))[:k]]


def _round(root: Path, arm: str, round_: int) -> Path:
    return root / arm / "seed0" / f"round{round_}"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    """The chain of stages, as the al_* rules run it (round 0 shared as `initial`, round 1 per strategy)."""
    tmp = tmp_path_factory.mktemp("active")
    data, base, root = write_reward_data(tmp / "data"), save_tiny_base(tmp / "base"), tmp / "active_learning"
    al = stage_json(pipeline({"active_learning": ACTIVE}).active_learning)
    learner = tiny_reward_settings("bgpm", train={"steps": 2}, eval={"train_pairs": 0, "test_pairs": False})
    codes = []

    def train_and_score(folder: Path, pool: int) -> None:
        model = folder / "reward" / "bgpm"
        codes.append(run_main(train_main, stage_json(learner), data=folder / "data", base=base,
                              kl_reference=data, out=model)[0])  # fmt: skip
        codes.append(run_main(score_main, al, model=model / "model", data=data, labelled=folder / "data",
                              pool=pool, out=folder / "scores" / "bgpm")[0])  # fmt: skip

    first = _round(root, "initial", 0)
    codes.append(
        run_main(label_main, al, data=data, strategy="initial", al_seed=0, round=0, out=first / "data")[0]
    )
    train_and_score(first, pool=1)
    for strategy in ("random", "bgpm"):
        folder = _round(root, strategy, 1)
        codes.append(run_main(label_main, al, data=data, strategy=strategy, al_seed=0, round=1, previous=first,
                              out=folder / "data")[0])  # fmt: skip
        train_and_score(folder, pool=0)
    codes.append(run_main(curve_main, al, root=root, out=root)[0])
    assert codes == [0] * len(codes)
    return {"data": data, "root": root, "weight": learner.head.bayes.max_kl_weight}


def _scores(run: dict, arm: str, round_: int) -> pd.DataFrame:
    return pd.read_parquet(_round(run["root"], arm, round_) / "scores" / "bgpm" / "scores.parquet")


def test_round_zero_is_a_seeded_draw_written_as_a_data_folder(run):
    train = read_jsonl(run["data"] / "pairs_train.jsonl")
    folder = _round(run["root"], "initial", 0) / "data"
    selection = read_json(folder / "selection.json")
    assert (
        selection["labelled"] == selection["added"] == _random_draw([r["id"] for r in train], INITIAL, 0, 0)
    )
    assert read_jsonl(folder / "pairs_train.jsonl") == [r for r in train if r["id"] in selection["labelled"]]
    assert (folder / "pairs_test.jsonl").read_bytes() == (run["data"] / "pairs_test.jsonl").read_bytes()
    # the learner trained with the KL weight of its labelled set: 18 training pairs / 8 labelled
    config = read_json(_round(run["root"], "initial", 0) / "reward" / "bgpm" / "config.json")
    assert config["config"]["head"]["bayes"]["max_kl_weight"] == pytest.approx(run["weight"] * 18 / INITIAL)


def test_scores_cover_the_pool_and_the_test_pairs(run):
    train = [r["id"] for r in read_jsonl(run["data"] / "pairs_train.jsonl")]
    labelled = set(read_json(_round(run["root"], "initial", 0) / "data" / "selection.json")["labelled"])
    scores = _scores(run, "initial", 0)
    assert list(scores.loc[scores["split"] == "pool", "id"]) == [i for i in train if i not in labelled]
    test = [r["id"] for r in read_jsonl(run["data"] / "pairs_test.jsonl")]
    assert list(scores.loc[scores["split"] == "test", "id"]) == test
    scored = scores[scores["split"] != "labelled"]
    assert np.all(np.isfinite(scored["score"])) and np.all(scored["variance"] > 0)  # a Bayesian head
    assert scores["tau"].nunique() == 1
    # the Bayesian learner's pool rows carry its posterior draws; pool and labelled rows its prompt features
    pool = scores[scores["split"] == "pool"]
    draws = pool.filter(like="p_sample_").to_numpy()
    assert draws.shape[1] == 32 and np.all((draws >= 0) & (draws <= 1))
    assert set(scores.loc[scores["split"] == "labelled", "id"]) == labelled
    assert not scores[scores["split"] != "test"].filter(like="prompt_feature_").isna().any().any()
    for strategy in ("random", "bgpm"):  # the last round: no selection reads a pool
        assert set(_scores(run, strategy, 1)["split"]) == {"test"}


def test_round_one_adds_each_strategys_pick_from_the_pool(run):
    first = read_json(_round(run["root"], "initial", 0) / "data" / "selection.json")["labelled"]
    scores = _scores(run, "initial", 0)
    pool = scores[scores["split"] == "pool"].set_index("id")
    random = read_json(_round(run["root"], "random", 1) / "data" / "selection.json")
    assert random["added"] == _random_draw(list(pool.index), ADDED, 0, 1)
    mi = gaussian_preference(pool["score"], pool["variance"], float(pool["tau"].iloc[0]))[
        "mutual_information"
    ]
    bgpm = read_json(_round(run["root"], "bgpm", 1) / "data" / "selection.json")
    assert bgpm["added"] == _largest(pd.Series(mi, index=pool.index), ADDED)
    for selection in (random, bgpm):
        assert selection["labelled"] == first + selection["added"] and selection["labels"] == INITIAL + ADDED


def test_the_curve_is_each_rounds_test_accuracy(run):
    summary = json.loads((run["root"] / "summary.json").read_text())
    assert summary["labels"] == [INITIAL, INITIAL + ADDED]

    def accuracy(arm: str, round_: int) -> float:
        test = _scores(run, arm, round_)
        return float((test.loc[test["split"] == "test", "score"] > 0).mean())

    for strategy in ("random", "bgpm"):
        assert summary["accuracy"][strategy]["0"] == [accuracy("initial", 0), accuracy(strategy, 1)]
    assert summary["labels_needed"]["random"]["reached"] == 1
