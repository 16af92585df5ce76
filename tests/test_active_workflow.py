"""Active learning through real Snakemake (workflow/rules/active.smk): the jobs a dry run plans over the round
wildcard, and a toy-sized real run over 2 rounds whose labelled sets, selections and curve are checked against
the acquisition functions applied to the files the run wrote."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from support.workflow import REPO, repo_copy, run_snakemake

from prefpipe.active.select import random_pick, top_k
from prefpipe.evaluation.uncertainty import gaussian_preference

TINY = str(REPO / ".test" / "config" / "tiny.yaml")
UNCERTAINTY = str(REPO / "config" / "experiments" / "uncertainty.yaml")
ROOT = "results/ci-tiny/active_learning"
ACTIVE = {
    "reward": {"only": ["gpm", "gpm-s1", "bgpm"], "variants": {"gpm-s1": {"seed": 1}}},
    "eval": {"ensembles": {"ens": ["gpm", "gpm-s1"]}},
    "active_learning": {
        "enabled": True, "strategies": ["random", "bgpm", "ensemble"], "learner": "bgpm", "ensemble": "ens",
        "seeds": [0, 1], "rounds": 2, "initial_labels": 20, "labels_per_round": 10, "batch_size": 16,
    },
}  # fmt: skip


def _planned(result) -> dict[str, int]:
    assert result.returncode == 0, result.output
    table = (
        result.output.split("Job stats:", 1)[1].split("total", 1)[0] if "Job stats:" in result.output else ""
    )
    counts = {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", table, re.MULTILINE)}
    return {k: v for k, v in counts.items() if k.startswith("al_")}


def _workflow(tmp_path: Path) -> Path:
    wf = repo_copy(tmp_path / "wf", link_src=True)
    (wf / "active.yaml").write_text(yaml.safe_dump(ACTIVE))
    return wf


def test_dry_runs_plan_one_job_per_round_strategy_and_seed(tmp_path):
    wf = _workflow(tmp_path)
    # 2 seeds; round 0 shared: the learner and both members; round 1: the learner per strategy (the last round)
    planned = _planned(run_snakemake(wf, "-n", "--configfile", TINY, "active.yaml"))
    assert planned == {"al_initial": 2, "al_select": 6, "al_train": 12, "al_score": 12, "al_curve": 1}
    # the experiment: 3 seeds x (round 0: 4 models; rounds 1-2: 1 + 1 + 4; round 3: 3) = 57 trainings
    planned = _planned(run_snakemake(wf, "-n", "--configfile", UNCERTAINTY))
    assert planned == {"al_initial": 3, "al_select": 27, "al_train": 57, "al_score": 57, "al_curve": 1}
    assert _planned(run_snakemake(wf, "-n")) == {}  # off in the default run


def _scores(wf: Path, arm: str, seed: int, variant: str) -> pd.DataFrame:
    frame = pd.read_parquet(
        wf / ROOT / arm / f"seed{seed}" / "round0" / "scores" / variant / "scores.parquet"
    )
    return frame[frame["split"] == "pool"].reset_index(drop=True)


def _selection(wf: Path, arm: str, seed: int, round_: int) -> dict:
    return json.loads(
        (wf / ROOT / arm / f"seed{seed}" / f"round{round_}" / "data" / "selection.json").read_text()
    )


@pytest.mark.slow  # 36 real jobs: 5 min on one idle core
def test_a_tiny_run_over_two_rounds(tmp_path):
    wf = _workflow(tmp_path)
    run = ("--cores", "1", f"{ROOT}/summary.json", "--configfile", TINY, "active.yaml")
    done = run_snakemake(wf, *run, timeout=1800)  # 36 jobs of seconds each, slower on a busy machine
    assert done.returncode == 0, done.output
    train_ids = [json.loads(line)["id"] for line in (wf / "results/ci-tiny/data/pairs_train.jsonl").open()]
    for seed in (0, 1):
        first = _selection(wf, "initial", seed, 0)
        assert first["labelled"] == random_pick(train_ids, 20, seed, 0)
        pool = [i for i in train_ids if i not in set(first["labelled"])]
        assert _selection(wf, "random", seed, 1)["added"] == random_pick(pool, 10, seed, 1)
        bgpm = _scores(wf, "initial", seed, "bgpm").set_index("id").loc[pool]
        mi = gaussian_preference(bgpm["score"], bgpm["variance"], float(bgpm["tau"].iloc[0]))[
            "mutual_information"
        ]
        assert _selection(wf, "bgpm", seed, 1)["added"] == top_k(mi, pool, 10)
        members = [
            _scores(wf, "initial", seed, v).set_index("id").loc[pool, "score"] for v in ("gpm", "gpm-s1")
        ]
        sd = np.std(np.stack(members), axis=0, ddof=1)
        ensemble = _selection(wf, "ensemble", seed, 1)
        assert ensemble["added"] == top_k(sd, pool, 10)
        assert ensemble["labelled"] == first["labelled"] + ensemble["added"]
        rows = (wf / ROOT / "ensemble" / f"seed{seed}" / "round1" / "data" / "pairs_train.jsonl").read_text()
        assert len(rows.splitlines()) == 30
        last = pd.read_parquet(
            wf / ROOT / "random" / f"seed{seed}" / "round1" / "scores" / "bgpm" / "scores.parquet"
        )
        assert set(last["split"]) == {"test"}  # no selection reads the last round's pool
    summary = json.loads((wf / ROOT / "summary.json").read_text())
    assert summary["labels"] == [20, 30]
    for seed in ("0", "1"):  # round 0 is one model per seed, shared by every strategy
        assert len({summary["accuracy"][s][seed][0] for s in summary["strategies"]}) == 1
    assert set(summary["labels_needed"]) == {"random", "bgpm", "ensemble"}
    assert {s: r["total"]["picks"]["mean"] for s, r in summary["picks"]["strategies"].items()} == {
        "random": 10.0, "bgpm": 10.0, "ensemble": 10.0,
    }  # fmt: skip
    assert (
        _planned(run_snakemake(wf, "-n", f"{ROOT}/summary.json", "--configfile", TINY, "active.yaml")) == {}
    )
    # A third round reruns no finished training: per seed the ensemble's members on round 1 (now read by a
    # selection), the bgpm learner's round-1 scores again (now with its pool) and round 2's three learners,
    # their scores and selections, then the curve.
    (wf / "more.yaml").write_text(yaml.safe_dump({"active_learning": {"rounds": 3}}))
    more = run_snakemake(wf, "-n", f"{ROOT}/summary.json", "--configfile", TINY, "active.yaml", "more.yaml")
    assert _planned(more) == {"al_select": 6, "al_train": 10, "al_score": 12, "al_curve": 1}
