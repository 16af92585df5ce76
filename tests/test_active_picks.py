"""The selected pairs' analysis (prefpipe.active.picks) on a hand-built active-learning tree: every count by hand,
the kinds' entropy by its formula, the mean and sd over seeds, the difference to random; and the al_curve stage
writing it into summary.json from the command line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from support.settings import pipeline

from prefpipe import active_curve
from prefpipe.active.labelled import write_round
from prefpipe.active.layout import round_dir
from prefpipe.active.picks import kind_entropy, pair_facts, picks_table, round_picks
from prefpipe.active.pool_scores import SCORES
from prefpipe.common.config import DataError
from prefpipe.common.io import read_json, write_jsonl
from prefpipe.settings.build import to_mapping

# id: (prompt, kind, flipped)
PAIRS = {
    "a1": ("P1", "A", False),
    "a2": ("P1", "A", True),
    "a3": ("P2", "A", False),
    "b1": ("P3", "B", False),
    "b2": ("P3", "B", False),
    "b3": ("P4", "B", True),
    "c1": ("P5", "C", False),
    "c2": ("P1", "C", False),
}
INITIAL = ["a3", "c1"]
# (strategy, seed) -> the ids rounds 1 and 2 add
ADDED = {
    ("random", 0): [["a1", "a2", "b1", "c2"], ["b2", "b3"]],
    ("random", 1): [["a1", "a2", "b1", "c2"], ["b2", "b3"]],
    ("bgpm", 0): [["a1", "b3", "c2", "b1"], ["a2", "b2"]],
    ("bgpm", 1): [["a1", "a2", "b1", "c2"], ["b2", "b3"]],
}
H_211 = (0.5 * math.log(2) + 0.5 * math.log(4)) / math.log(3)  # shares 1/2, 1/4, 1/4 over 3 pool kinds


def _rows() -> list[dict]:
    return [
        {"id": i, "prompt": p, "chosen": "x", "rejected": "y", "subset": k, "label_flipped": f}
        for i, (p, k, f) in PAIRS.items()
    ]


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    """The experiment's data folder and an active-learning root whose selection.json files the real writer wrote."""
    data, root = tmp_path / "data", tmp_path / "active_learning"
    data.mkdir()
    write_jsonl(data / "pairs_train.jsonl", _rows())
    write_jsonl(data / "pairs_test.jsonl", [{"id": "t1", "prompt": "Q", "chosen": "x", "rejected": "y"}])
    for (strategy, seed), rounds in ADDED.items():
        labelled = list(INITIAL)
        write_round(
            Path(round_dir(str(root), strategy, seed, 0)) / "data", data, _rows(), labelled, labelled, {}
        )
        for r, added in enumerate(rounds, start=1):
            labelled = labelled + added
            folder = Path(round_dir(str(root), strategy, seed, r)) / "data"
            write_round(folder, data, _rows(), labelled, added, {"round": r})
    return data, root


def test_kind_entropy_by_its_formula():
    assert kind_entropy({"A": 2, "B": 1, "C": 1}, 3) == pytest.approx(H_211)
    assert kind_entropy({"A": 3, "B": 3}, 2) == pytest.approx(1.0)  # uniform over the pool's kinds
    assert kind_entropy({"A": 3, "B": 3}, 4) == pytest.approx(0.5)  # two of four kinds: log 2 / log 4
    assert kind_entropy({"A": 5}, 3) == 0.0
    assert kind_entropy({"A": 5}, 1) is None  # a pool of one kind: nothing to spread over


def test_round_picks_counts_by_hand():
    facts = pair_facts(Path("data"), _rows())
    one = round_picks(facts, [*INITIAL, "a1", "a2", "b1", "c2"], ["a1", "a2", "b1", "c2"], "r1")
    # prompts P1 P1 P3 P1: 2 distinct, the three P1 picks share; none of P1, P3 was labelled (P2, P5 were)
    assert {k: one[k] for k in ("picks", "distinct_prompts", "shared_prompt", "prompt_labelled")} == {
        "picks": 4, "distinct_prompts": 2, "shared_prompt": 3, "prompt_labelled": 0,
    }  # fmt: skip
    assert one["flipped"] == 1 and one["kinds"] == 3 and one["kind_counts"] == {"A": 2, "B": 1, "C": 1}
    assert one["kind_entropy"] == pytest.approx(H_211)
    # bgpm's round 2 on seed 0: a2 (P1, labelled via a1) and b2 (P3, labelled via b1); pool kinds A and B
    two = round_picks(facts, [*INITIAL, "a1", "b3", "c2", "b1", "a2", "b2"], ["a2", "b2"], "r2")
    assert (two["distinct_prompts"], two["shared_prompt"], two["prompt_labelled"], two["flipped"]) == (
        2,
        0,
        2,
        1,
    )
    assert two["kind_entropy"] == pytest.approx(1.0)
    with pytest.raises(DataError, match="r3: 1 ids not in the training pairs, e.g. zz"):
        round_picks(facts, ["zz"], ["zz"], "r3")


def test_picks_table_means_over_seeds_and_the_difference_to_random(tmp_path):
    data, root = _tree(tmp_path)
    facts = pair_facts(data, _rows())
    table = picks_table(root, facts, ["random", "bgpm"], [0, 1], 3)
    assert table["reference"] == "random" and table["rounds"] == 2
    random, bgpm = table["strategies"]["random"], table["strategies"]["bgpm"]
    # random, both seeds: shared 3 then 0 -> round mean 1.5; prompt_labelled 0 then 1 (P3 via b1)
    assert (
        random["round_mean"]["shared_prompt"]["mean"] == 1.5
        and random["round_mean"]["shared_prompt"]["sd"] == 0
    )
    assert random["total"]["prompt_labelled"]["values"] == [1.0, 1.0]
    # random's round 2 picks only B, from a pool of B alone: no entropy, so no round mean of it
    assert (
        random["per_seed"][0][1]["kind_entropy"] is None
        and random["round_mean"]["kind_entropy"]["mean"] is None
    )
    # bgpm seed 0: shared 2 then 0 -> 1.0; seed 1 as random: 1.5 -> mean 1.25, sd 0.5 / sqrt 2
    assert bgpm["round_mean"]["shared_prompt"]["mean"] == pytest.approx(1.25)
    assert bgpm["round_mean"]["shared_prompt"]["sd"] == pytest.approx(0.5 / math.sqrt(2))
    assert bgpm["against_random"]["shared_prompt"]["values"] == pytest.approx([-0.5, 0.0])
    # prompt_labelled: bgpm seed 0 (0 + 2) / 2 = 1 against random's 0.5
    assert bgpm["against_random"]["prompt_labelled"]["values"] == pytest.approx([0.5, 0.0])
    # kinds summed over rounds, every training kind listed (C picked once per seed by both)
    assert bgpm["kind_total"]["B"]["values"] == [3.0, 3.0] and bgpm["kind_total"]["C"]["values"] == [1.0, 1.0]
    assert bgpm["per_round"][0]["distinct_prompts"]["values"] == [3.0, 2.0]
    assert "against_random" not in random
    with pytest.raises(
        DataError, match=r"random/seed0/round3/data/selection.json: missing \(round 3 of random"
    ):
        picks_table(root, facts, ["random"], [0], 4)  # a round not selected yet


def test_rows_without_a_flip_marker_give_no_flipped_count():
    rows = [{k: v for k, v in row.items() if k != "label_flipped"} for row in _rows()]
    one = round_picks(pair_facts(Path("data"), rows), [*INITIAL, "a2"], ["a2"], "r1")
    assert one["flipped"] is None and one["picks"] == 1


def test_a_training_row_without_its_kind_is_named(tmp_path):
    rows = _rows()
    del rows[3]["subset"]
    with pytest.raises(DataError, match=r"pairs_train.jsonl: pair 'b1' has no `subset`"):
        pair_facts(tmp_path, rows)


def test_the_curve_stage_writes_the_picks_from_the_command_line(tmp_path):
    data, root = _tree(tmp_path)
    al = {"enabled": True, "strategies": ["random", "bgpm"], "rounds": 3, "seeds": [0, 1], "ensemble": None,
          "initial_labels": 2, "labels_per_round": 4}  # fmt: skip
    settings = pipeline({"active_learning": al}).active_learning
    for strategy, seed in ADDED:
        for r in range(3):
            folder = Path(round_dir(str(root), strategy, seed, r)) / "scores" / settings.learner
            folder.mkdir(parents=True, exist_ok=True)
            frame = {"id": ["t1", "a1"], "split": ["test", "pool"], "score": [1.0, -1.0], "variance": 0.1}
            pd.DataFrame({**frame, "tau": 1.0}).to_parquet(folder / SCORES)
    out = tmp_path / "out"
    argv = ["--config", json.dumps(to_mapping(settings)), "--root", str(root), "--data", str(data)]
    assert active_curve.main([*argv, "--out", str(out)]) == 0
    picks = read_json(out / "summary.json")["picks"]
    assert picks["strategies"]["bgpm"]["round_mean"]["shared_prompt"]["mean"] == pytest.approx(1.25)
    assert active_curve.main([*argv[:-2], "--out", str(tmp_path / "none")]) == 0  # without --data
    assert read_json(tmp_path / "none" / "summary.json")["picks"] is None
    # on a finished run: the run record's settings (config.json's `config`) saved as a file
    saved = tmp_path / "settings.json"
    saved.write_text(json.dumps(read_json(out / "config.json")["config"]))
    again = tmp_path / "again"
    assert active_curve.main(["--config", str(saved), *argv[2:], "--out", str(again)]) == 0
    assert read_json(again / "summary.json")["picks"] == picks
