"""The pair scorer with deterministic test scorers: row order, length-sorted batches, batch-size invariance."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from support.eval_args import EVAL, evaluate, section_table
from support.scorers import LengthRuleScorer

from prefpipe.common.io import read_jsonl
from prefpipe.evaluation.calibration import ENTROPY_CRITERION, PREDICTIVE_METHOD
from prefpipe.evaluation.pair_scoring import score_pairs


class GaussianLengthScorer:
    """Test scorer with a Bayesian-style head: mean = length / 100, variance from the word count."""

    head_type = "bgpm"
    tau = 0.5
    bayesian = True

    def encode(self, prompts, responses, batch_size=16):
        mean = torch.tensor([len(r) / 100 for r in responses], dtype=torch.float64)
        var = torch.tensor([0.05 * (len(r.split()) % 5) for r in responses], dtype=torch.float64)
        return {"mean": mean, "var": var}

    def compare(self, enc_a, enc_b):
        return enc_a["mean"] - enc_b["mean"], enc_a["var"] + enc_b["var"]


@pytest.fixture(scope="module")
def real_rows(shared_data):
    return read_jsonl(shared_data / "rewardbench_real_subsets.jsonl")


def _columns(rows):
    return [r["prompt"] for r in rows], [r["chosen"] for r in rows], [r["rejected"] for r in rows]


@pytest.mark.parametrize("batch_size", [1, 3, 16])
def test_scores_come_back_in_row_order(real_rows, batch_size):
    rows = real_rows[:50]
    scored = score_pairs(LengthRuleScorer(), *_columns(rows), batch_size=batch_size)
    expected = [len(r["chosen"]) - len(r["rejected"]) for r in rows]
    assert scored.score.tolist() == expected
    assert scored.variance is None
    assert scored.batches == math.ceil(2 * len(rows) / batch_size)


def test_batches_are_sorted_by_length_longest_first(real_rows):
    scorer = LengthRuleScorer()
    score_pairs(scorer, *_columns(real_rows[:80]), batch_size=8)
    flat = [length for batch in scorer.batches for length in batch]
    assert flat == sorted(flat, reverse=True)
    assert all(len(b) == 8 for b in scorer.batches)


def test_batch_size_does_not_change_scores(real_rows):
    one = score_pairs(GaussianLengthScorer(), *_columns(real_rows[:40]), batch_size=1)
    many = score_pairs(GaussianLengthScorer(), *_columns(real_rows[:40]), batch_size=16)
    assert np.array_equal(one.score, many.score) and np.array_equal(one.variance, many.variance)


def _expected_sigmoid(m: float, v: float, tau: float) -> float:
    """E[sigmoid(s / tau)], s ~ N(m, v), by the trapezoid rule on a fine grid of +-12 sd (an independent check)."""
    sd = math.sqrt(v)
    x = np.linspace(m - 12 * sd, m + 12 * sd, 200_001)
    f = np.exp(-0.5 * ((x - m) / sd) ** 2) / (sd * math.sqrt(2 * math.pi)) / (1 + np.exp(-x / tau))
    return float(((f[1:] + f[:-1]) / 2).sum() * (x[1] - x[0]))


def test_bayesian_probabilities_are_the_integrated_predictive(real_rows):
    rows = real_rows[:60]
    frame, summary = evaluate(GaussianLengthScorer(), rows, section_table(), mc_samples=4000)
    for row, prob, var in zip(rows, frame["prob"], frame["variance"], strict=True):
        m = (len(row["chosen"]) - len(row["rejected"])) / 100
        v = 0.05 * (len(row["chosen"].split()) % 5) + 0.05 * (len(row["rejected"].split()) % 5)
        assert var == pytest.approx(v)
        want = _expected_sigmoid(m, v, 0.5) if v > 0 else 1 / (1 + math.exp(-m / 0.5))
        assert prob == pytest.approx(want, abs=1e-7)
    h = -(frame["prob"] * np.log(frame["prob"]) + (1 - frame["prob"]) * np.log(1 - frame["prob"]))
    np.testing.assert_allclose(frame["predictive_entropy"], h, atol=1e-12)
    assert (frame["mutual_information"] >= 0).all() and (
        frame.loc[frame["variance"] == 0, "mutual_information"] < 1e-9
    ).all()
    assert summary["prob_method"] == PREDICTIVE_METHOD
    assert summary["prob_mc_check"]["samples"] == 4000
    check = summary["prob_mc_check"]
    assert check["max_abs_diff"] < 5 * check["max_mc_stderr"]
    assert summary["calibration"]["selective_criterion"] == ENTROPY_CRITERION
    assert {"selective_by_point_margin", "selective_by_flip", "selective_by_variance"} <= set(
        summary["calibration"]
    )
    assert summary["calibration_mean_only"]["n"] == len(rows)
    assert summary["head_type"] == "bgpm" and summary["tau"] == 0.5


def test_point_head_rows_have_no_variance(real_rows):
    frame, summary = evaluate(LengthRuleScorer(), real_rows[:20], section_table())
    assert frame["variance"].isna().all()
    assert "prob_mc_check" not in summary and "calibration_mean_only" not in summary
    assert summary["pairs_per_second"] > 0


class _BrokenScorer(LengthRuleScorer):
    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    def encode(self, prompts, responses, batch_size=16):
        enc = super().encode(prompts, responses, batch_size)
        return {"reward": enc["reward"][:-1]} if self.mode == "rows" else enc

    def compare(self, enc_a, enc_b):
        score, _ = super().compare(enc_a, enc_b)
        if self.mode == "nan":
            score[1] = float("nan")
        return score, None


@pytest.mark.parametrize(
    ("mode", "bayesian", "message"),
    [
        ("rows", False, "expected 2 rows"),
        ("nan", False, "non-finite scores"),
        ("ok", True, "must return a score variance"),
    ],
)
def test_bad_model_output_is_a_clear_error(mode, bayesian, message):
    scorer = _BrokenScorer(mode)
    scorer.bayesian = bayesian
    with pytest.raises(ValueError, match=message):
        score_pairs(scorer, ["p"] * 3, ["aa", "b", "ccc"], ["a", "bb", "c"], batch_size=2)


def test_empty_or_mismatched_input_is_rejected():
    with pytest.raises(ValueError, match="no pairs"):
        score_pairs(LengthRuleScorer(), [], [], [], batch_size=EVAL.batch_size)
    with pytest.raises(ValueError, match="2 prompts, 1 chosen"):
        score_pairs(LengthRuleScorer(), ["a", "b"], ["x"], ["y", "z"], batch_size=EVAL.batch_size)
