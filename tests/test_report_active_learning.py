"""The report's active-learning section and answer on the fixture tree with an active-learning summary written
by the curve module from hand-made accuracies: the numbers shown are the recorded ones, and a tree without the
summary gets neither section nor answer."""

from __future__ import annotations

import json

from support.results_tree import report_markdown, write_results_tree
from support.settings import pipeline

from prefpipe.active.curve import fraction_table, needed_table
from prefpipe.active.picks import Pair, round_picks, summarize_picks

ACCURACY = {
    "random": {0: [0.60, 0.70, 0.80], 1: [0.60, 0.66, 0.72]},
    "bgpm": {0: [0.60, 0.80, 0.85], 1: [0.60, 0.72, 0.74]},
}


def _picks():
    """One round per seed: random adds x1 and y1 (two prompts, two kinds), bgpm adds x1 and x2 (one prompt,
    one kind, x2's label flipped)."""
    facts = {"x1": Pair("P1", "A", False), "x2": Pair("P1", "A", True), "y1": Pair("P2", "B", False)}
    added = {"random": ["x1", "y1"], "bgpm": ["x1", "x2"]}
    selected = {s: {seed: [round_picks(facts, a, a, s)] for seed in (0, 1)} for s, a in added.items()}
    return summarize_picks(selected, ["A", "B"])


def _summary():
    settings = pipeline(
        {"active_learning": {"enabled": True, "strategies": ["random", "bgpm"], "rounds": 3, "seeds": [0, 1],
                             "initial_labels": 100, "labels_per_round": 100}}
    ).active_learning  # fmt: skip
    curve = {
        s: [{"mean": sum(c[r] for c in v.values()) / 2, "sd": None} for r in range(3)]
        for s, v in ACCURACY.items()
    }
    return {
        "learner": "bgpm", "strategies": ["random", "bgpm"], "seeds": [0, 1], "labels": [100, 200, 300],
        "accuracy": ACCURACY, "curve": curve, "reference": "random",
        "labels_needed": needed_table(settings, ACCURACY),
        "full_data": {"whole_pool": True, "unlabelled_left": {0: 0, 1: 0}} | fraction_table(settings, ACCURACY),
        "picks": _picks(),
    }  # fmt: skip


def test_active_learning_section_and_answer_show_the_recorded_numbers(tmp_path):
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=3, grpo_steps=3)
    plain = report_markdown(root, tmp_path / "plain")
    assert "## Active learning" not in plain and "Active learning:" not in plain

    (root / "active_learning").mkdir()
    (root / "active_learning" / "summary.json").write_text(json.dumps(_summary()))
    md = report_markdown(root, tmp_path / "out")
    answers, section = md.split("## Active learning", 1)
    assert (
        "Active learning: to reach the test accuracy random selection has after 300 labels (mean ± sd over "
        "seeds), the Bayesian GPM's mutual information needs 200 ± 0 labels (33.3 ± 0.0% fewer)."
    ) in answers
    assert "| 200 | 0.6800 | 0.7600 |" in section  # the curve's means per round
    assert "| bgpm | 200 ± 0 | 33.3 ± 0.0 | 200, 200 | 2/2 |" in section
    assert "| random | 300 ± 0 | 0.0 ± 0.0 | 300, 300 | 2/2 |" in section
    assert (tmp_path / "out" / "figures" / "active_learning.png").is_file()
    # 0.95 of the full-data accuracy: seed 0 target 0.76, random 200 + 0.06 / 0.1 * 100 = 260, bgpm
    # 100 + 0.16 / 0.2 * 100 = 180; seed 1 target 0.684, random 200 + 0.024 / 0.06 * 100 = 240, bgpm
    # 100 + 0.084 / 0.12 * 100 = 170; fewer: 1 - 180/260 = 30.8%, 1 - 170/240 = 29.2%
    assert "Labels to reach 0.95 of the full-data accuracy" in section
    assert "| bgpm | 175 ± 7 | 30.0 ± 1.1 | 180, 170 | 2/2 |" in section
    # the selected pairs, random's row first: bgpm's two picks share one prompt (2 - 0 more than random), one kind
    # (entropy 0; B never picked), one flipped label; random's spread over both kinds (entropy 1)
    random_row = (
        "| *random* | *2.0 ± 0.0* | *2.0 ± 0.0* | *0.0 ± 0.0* | *0.0 ± 0.0* | *0.0 ± 0.0* | *2.0 ± 0.0* |"
    )
    bgpm_row = (
        "| bgpm | 2.0 ± 0.0 | 1.0 ± 0.0 | 2.0 ± 0.0 | 0.0 ± 0.0 | 1.0 ± 0.0 | 1.0 ± 0.0 | 0.000 ± 0.000 |"
    )
    assert f"{random_row} *1.000 ± 0.000* | *A 1 / B 1* | *–* |" in section
    assert f"{bgpm_row} A 2 / B 0 | 2.0 ± 0.0 |" in section
    assert section.index(random_row) < section.index(bgpm_row)
