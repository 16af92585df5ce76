"""The labels-saved figure of active learning (prefpipe.active.curve) against hand-computed examples."""

from __future__ import annotations

import pandas as pd
import pytest
from support.settings import pipeline

from prefpipe.active.curve import fraction_table, labels_to_reach, needed_table, summarize
from prefpipe.active.pool_scores import SCORES


def test_labels_to_reach_interpolates_between_the_rounds_around_the_target():
    labels = [100, 200, 300, 400]
    # 0.77 lies between 0.74 (200 labels) and 0.80 (300): 200 + (0.77 - 0.74) / (0.80 - 0.74) * 100 = 250
    assert labels_to_reach(labels, [0.70, 0.74, 0.80, 0.82], 0.77) == pytest.approx(250.0)
    assert labels_to_reach(labels, [0.70, 0.74, 0.80, 0.82], 0.80) == 300.0  # reached exactly at a round
    assert labels_to_reach(labels, [0.78, 0.74, 0.80, 0.82], 0.77) == 100.0  # round 0 already there
    # the first crossing counts, not a later one after a dip
    assert labels_to_reach(labels, [0.70, 0.80, 0.75, 0.82], 0.76) == pytest.approx(100 + 0.6 * 100)
    assert labels_to_reach(labels, [0.70, 0.74, 0.75, 0.76], 0.77) is None
    with pytest.raises(ValueError):
        labels_to_reach(labels, [0.7], 0.7)


def test_needed_table_by_hand():
    settings = pipeline(
        {"active_learning": {"enabled": True, "strategies": ["random", "bgpm"], "rounds": 3,
                             "initial_labels": 100, "labels_per_round": 100, "seeds": [0, 1]}}
    ).active_learning  # fmt: skip
    accuracy = {
        "random": {0: [0.60, 0.70, 0.80], 1: [0.60, 0.66, 0.72]},
        "bgpm": {0: [0.60, 0.80, 0.85], 1: [0.60, 0.72, 0.74]},
    }
    table = needed_table(settings, accuracy)
    # random reaches its own final accuracy at its last round: 300 labels, nothing saved
    assert table["random"]["labels"] == {"mean": 300.0, "sd": 0.0}
    # bgpm: seed 0 reaches 0.80 at 200 labels; seed 1 reaches 0.72 at 200: mean 200, sd 0, saved 1/3
    assert table["bgpm"]["per_seed"] == {0: 200.0, 1: 200.0}
    assert table["bgpm"]["saved_share"]["mean"] == pytest.approx(1 / 3)
    accuracy["bgpm"][1] = [0.60, 0.62, 0.71]  # never reaches 0.72: no mean, the count says so
    row = needed_table(settings, accuracy)["bgpm"]
    assert row["per_seed"][1] is None and row["reached"] == 1 and "labels" not in row


def test_summarize_reads_each_rounds_learner_scores_from_the_layout(tmp_path):
    settings = pipeline(
        {"active_learning": {"enabled": True, "strategies": ["random", "bgpm"], "rounds": 2, "seeds": [3],
                             "ensemble": None, "initial_labels": 10, "labels_per_round": 5}}
    ).active_learning  # fmt: skip
    # test scores with a tie (0 counts wrong, as in the eval) and pool rows the curve must ignore
    scores = {
        ("initial", 0): [1.0, -1.0, 0.0, 2.0],
        ("random", 1): [1.0, 1.0, -1.0, 2.0],
        ("bgpm", 1): [1.0] * 4,
    }
    for (arm, round_), test in scores.items():
        folder = tmp_path / arm / "seed3" / f"round{round_}" / "scores" / "bgpm"
        folder.mkdir(parents=True)
        rows = {"id": list("abcdxy"), "split": ["test"] * 4 + ["pool"] * 2, "score": [*test, -5.0, -5.0]}
        pd.DataFrame({**rows, "variance": 0.1, "tau": 1.0}).to_parquet(folder / SCORES)
    summary = summarize(settings, tmp_path)
    assert summary["labels"] == [10, 15]
    assert summary["accuracy"] == {"random": {3: [0.5, 0.75]}, "bgpm": {3: [0.5, 1.0]}}
    assert summary["labels_needed"]["bgpm"]["per_seed"] == {3: pytest.approx(10 + 0.25 / 0.5 * 5)}


def test_fraction_table_by_hand_interpolation_and_a_seed_that_never_reaches():
    settings = pipeline(
        {"active_learning": {"enabled": True, "strategies": ["random", "bgpm"], "rounds": 4,
                             "initial_labels": 100, "labels_per_round": 100, "seeds": [0, 1],
                             "target_fraction": 0.9}}
    ).active_learning  # fmt: skip
    accuracy = {
        "random": {0: [0.50, 0.60, 0.70, 0.80], 1: [0.50, 0.70, 0.72, 0.90]},
        "bgpm": {0: [0.50, 0.76, 0.78, 0.80], 1: [0.50, 0.60, 0.70, 0.90]},
    }
    # seed 0: target 0.9 * 0.80 = 0.72; random: 300 + (0.72 - 0.70) / (0.80 - 0.70) * 100 = 320;
    #   bgpm: 100 + (0.72 - 0.50) / (0.76 - 0.50) * 100 = 184.615...
    # seed 1: target 0.81; random: 300 + (0.81 - 0.72) / 0.18 * 100 = 350; bgpm: 300 + (0.81 - 0.70) / 0.2 * 100 = 355
    out = fraction_table(settings, accuracy)
    assert out["target"] == {0: pytest.approx(0.72), 1: pytest.approx(0.81)}
    random, bgpm = out["strategies"]["random"], out["strategies"]["bgpm"]
    assert random["per_seed"] == {0: pytest.approx(320.0), 1: pytest.approx(350.0)}
    assert bgpm["per_seed"] == {0: pytest.approx(100 + 22 / 26 * 100), 1: pytest.approx(355.0)}
    fewer = [1 - (100 + 22 / 26 * 100) / 320, 1 - 355 / 350]
    assert bgpm["fewer_than_reference"]["mean"] == pytest.approx(sum(fewer) / 2)
    assert bgpm["fewer_than_reference"]["sd"] == pytest.approx(abs(fewer[0] - fewer[1]) / 2**0.5)
    assert random["fewer_than_reference"] == {"mean": 0.0, "sd": 0.0}
    # a curve whose last round stays below random's target (0.81): never reached, no mean
    accuracy["bgpm"][1] = [0.50, 0.60, 0.70, 0.80]
    out = fraction_table(settings, accuracy)["strategies"]["bgpm"]
    assert out["per_seed"][1] is None and out["reached"] == 1
    assert "labels" not in out and "fewer_than_reference" not in out
