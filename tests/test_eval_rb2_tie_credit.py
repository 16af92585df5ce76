"""RewardBench 2 best-of-4 tie credit: a scalar head's row scores 1/k when its chosen completion ties with k - 1
others at the top reward (the official harness, rewardbench.utils.reroll_and_score_dataset); a pairwise head's
row is right only when the chosen one strictly beats every other option. Checked on a hand-made JSONL file."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from support.scorers import LengthRuleScorer, PairwiseSignScorer
from support.settings import eval_settings

from prefpipe.common.io import write_jsonl
from prefpipe.evaluation.evaluate import evaluate_model

# (id, subset, chosen, rejected): the LengthRuleScorer's reward is the length, so ties are equal lengths.
ROWS = [
    ("a1", "Focus", "aaa", ["bbb", "ccc", "d"]),  # chosen ties with 2 at the top: 1/3
    ("a2", "Focus", "aaaa", ["bbbb", "cccc", "dddd"]),  # all four tie: 1/4
    ("a3", "Focus", "aa", ["bb", "ccc", "d"]),  # ties with one, but 'ccc' is higher: 0
    ("a4", "Focus", "aaaaa", ["b", "cc", "ddd"]),  # clear win: 1
    ("s1", "Safety", "xx", ["yy", "z", "w"]),  # ties with one at the top: 1/2
    ("s2", "Safety", "x", ["yy", "zz", "ww"]),  # loses: 0
]
HAND_CREDIT = {"a1": 1 / 3, "a2": 1 / 4, "a3": 0.0, "a4": 1.0, "s1": 1 / 2, "s2": 0.0}
HAND_STRICT = {"a1": 0.0, "a2": 0.0, "a3": 0.0, "a4": 1.0, "s1": 0.0, "s2": 0.0}


def _official_credit(chosen: str, rejected: list[str]) -> float:
    """The harness's rule on the options' scores (here their lengths), written out independently."""
    scores = np.array([len(chosen), *map(len, rejected)], dtype=float)
    top = scores.max()
    return 1 / np.sum(scores == top) if scores[0] == top else 0.0


def _evaluate(tmp_path, scorer):
    path = tmp_path / "rb2_ties.jsonl"
    write_jsonl(
        path,
        [{"id": i, "prompt": f"q {i}", "chosen": [c], "rejected": r, "subset": s} for i, s, c, r in ROWS],
    )
    cfg = eval_settings({"benchmarks": {"synthetic": None, "rb2": str(path)}, "mc_samples": 0}, seed=0)
    top = evaluate_model(scorer, cfg, tmp_path / "data", tmp_path / "eval", "m", "cpu")
    return top["benchmarks"]["rb2"], pd.read_parquet(tmp_path / "eval" / "rb2" / "per_example.parquet")


def test_the_hand_credits_are_the_official_rule():
    assert {i: _official_credit(c, r) for i, _, c, r in ROWS} == pytest.approx(HAND_CREDIT)


def test_scalar_head_gets_one_over_k_on_a_top_tie(tmp_path):
    rb2, frame = _evaluate(tmp_path, LengthRuleScorer())
    focus = (1 / 3 + 1 / 4 + 0 + 1) / 4  # 19/48
    assert rb2["subsets"]["Focus"]["accuracy"] == pytest.approx(focus, abs=1e-12)
    assert rb2["subsets"]["Focus"]["n_correct"] == pytest.approx(19 / 12, abs=1e-12)
    assert rb2["subsets"]["Safety"]["accuracy"] == pytest.approx(1 / 4, abs=1e-12)
    assert rb2["overall"] == pytest.approx((19 / 48 + 1 / 4) / 2, abs=1e-12)
    assert rb2["row_scoring"].startswith("tie credit")
    per_row = frame.groupby("row_id")[["row_credit", "row_correct"]].first()
    assert per_row["row_credit"].to_dict() == pytest.approx(HAND_CREDIT)
    assert per_row["row_correct"].astype(float).to_dict() == HAND_STRICT


def test_pairwise_head_keeps_the_strict_win(tmp_path):
    """PairwiseSignScorer orders options as LengthRuleScorer does, but without a reward scale a zero
    s(chosen > r) is an undecided comparison, not a tie at a shared top score: no credit."""
    rb2, frame = _evaluate(tmp_path, PairwiseSignScorer())
    assert rb2["subsets"]["Focus"]["accuracy"] == pytest.approx(1 / 4)
    assert rb2["subsets"]["Safety"]["accuracy"] == 0.0
    assert rb2["row_scoring"].startswith("strict")
    assert frame.groupby("row_id")["row_credit"].first().to_dict() == HAND_STRICT
    assert rb2["reward_length_correlation"] is None  # no per-response reward
