"""Benchmarks with their own sections and formats: per-entry section maps, the synthetic benchmark only with the
synthetic world, RewardBench 2 best-of-n scoring with the official Ties score, HH-style files, and the length
split every summary carries -- each checked against a hand computation."""

from __future__ import annotations

import json
import math

import pytest
from support.eval_args import evaluate
from support.scorers import LengthRuleScorer, PairwiseSignScorer, PlusCountScorer
from support.settings import eval_settings, pipeline

from prefpipe.common.config import ConfigError, DataError
from prefpipe.common.io import write_jsonl
from prefpipe.common.stats import wilson_interval
from prefpipe.data.pair_length import CHOSEN_LONGER, CHOSEN_SHORTER, EQUAL_LENGTH
from prefpipe.evaluation.evaluate import evaluate_model
from prefpipe.evaluation.length_split import (
    LENGTH_SPLIT_KEY,
    LONGER_PICK_RATE_KEY,
    LONGER_WINS_BASELINE_KEY,
    length_report,
)
from prefpipe.evaluation.sections import custom_section_table


def _run(tmp_path, benchmarks, scorer=None, **top):
    cfg = eval_settings({"benchmarks": {"synthetic": None, **benchmarks}, "mc_samples": 0}, seed=0, **top)
    return evaluate_model(scorer or LengthRuleScorer(), cfg, tmp_path / "data", tmp_path / "eval", "m", "cpu")


# ------------------------------------------------------------------------------ sections per benchmark
def test_each_benchmark_has_its_own_sections(tmp_path, shared_data):
    real = str(shared_data / "rewardbench_real_subsets.jsonl")
    top = _run(
        tmp_path,
        {
            "official": real,  # automatic: the file holds RewardBench subsets -> the official map
            "mine": {"source": real, "sections": {"hard": ["llmbar-natural", "llmbar-adver-manual"]}},
            "flat": {"source": real, "sections": {}},  # no sections: overall = pooled accuracy
        },
    )
    official, mine, flat = (top["benchmarks"][k] for k in ("official", "mine", "flat"))
    assert top["primary_benchmark"] == "official"
    assert set(official["sections"]) == {"chat_hard", "safety"} and official["missing_sections"] == []
    assert not any(s["partial"] for s in official["sections"].values())
    assert official["sections"]["chat_hard"]["subsets"][0] == "llmbar-natural"

    assert list(mine["sections"]) == ["hard"]
    natural, manual = (mine["subsets"][s] for s in ("llmbar-natural", "llmbar-adver-manual"))
    hand = (natural["accuracy"] * natural["n"] + manual["accuracy"] * manual["n"]) / (
        natural["n"] + manual["n"]
    )
    assert mine["sections"]["hard"]["score"] == pytest.approx(hand, abs=1e-12)  # row-count weights
    assert mine["overall"] == pytest.approx(hand, abs=1e-12)
    assert "xstest-should-refuse" in mine["unassigned_subsets"]

    assert flat["sections"] == {} and flat["unassigned_subsets"] == []
    assert (
        flat["overall"]
        == pytest.approx(flat["pooled_accuracy"])
        == pytest.approx(official["pooled_accuracy"])
    )
    assert mine["data"]["sections_map"] == "own" and flat["data"]["sections_map"] == "none"


def test_a_benchmark_map_listing_a_subset_twice_is_an_error():
    with pytest.raises(ConfigError, match=r"eval\.benchmarks\.b\.sections: subset 'x' is listed under both"):
        custom_section_table({"one": ["x"], "two": ["x"]}, "eval.benchmarks.b")


def test_the_synthetic_benchmark_exists_only_with_the_synthetic_world(shared_data):
    external = {"source": "jsonl", "external": {"path": str(shared_data / "hh_rlhf_helpful_train.jsonl")}}
    with pytest.raises(ConfigError, match=r"eval\.benchmarks: every benchmark is null or dropped.*'jsonl'"):
        pipeline({"data": external})
    settings = pipeline({"data": external, "eval": {"benchmarks": {"hh": "../shared/data/x.jsonl"}}}).eval
    assert list(settings.eval.benchmarks) == settings.benchmark_order == ["hh"]
    # with the synthetic world, the default benchmark is there and is the primary one
    assert pipeline().eval.benchmark_order == ["synthetic"]


def test_bad_benchmark_entries_name_the_key():
    with pytest.raises(ConfigError, match=r"eval\.benchmarks\.b\.format: 'rb3' is not one of"):
        eval_settings({"benchmarks": {"b": {"source": "x.jsonl", "format": "rb3"}}})
    with pytest.raises(ConfigError, match=r"eval\.benchmarks\.b: 'source' is a required property"):
        eval_settings({"benchmarks": {"b": {"sections": "official"}}})
    with pytest.raises(ConfigError, match=r"eval\.benchmarks\.b\.sections"):
        eval_settings({"benchmarks": {"b": {"source": "x.jsonl", "sections": "everything"}}})


# ------------------------------------------------------------------------------ HH-style files and length split
def test_hh_test_file_is_a_benchmark_and_longer_wins_reproduces_the_readme(tmp_path, shared_data):
    """The data README: "longer response wins" scores 0.5965 on hh_rlhf_helpful_test.jsonl. That is characters
    with the 9 equal-length pairs counted half; with ties wrong (RewardBench's rule) it is 0.592."""
    path = shared_data / "hh_rlhf_helpful_test.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    longer = sum(len(r["chosen"]) > len(r["rejected"]) for r in rows)
    equal = sum(len(r["chosen"]) == len(r["rejected"]) for r in rows)
    assert (len(rows), longer, equal) == (1000, 592, 9)

    hh = _run(tmp_path, {"hh_test": str(path)})["benchmarks"]["hh_test"]
    assert list(hh["subsets"]) == ["hh_test"] and hh["sections"] == {}  # one subset named after the benchmark
    baseline = hh[LONGER_WINS_BASELINE_KEY]
    assert baseline["accuracy_ties_half"] == pytest.approx(0.5965, abs=1e-12)
    assert baseline["accuracy"] == pytest.approx(0.592, abs=1e-12)
    assert baseline["ci95"] == pytest.approx(list(wilson_interval(592, 1000)))
    # The length rule is the baseline: its overall equals it, it always picks the longer response.
    assert hh["overall"] == pytest.approx(0.592, abs=1e-12)
    assert hh[LONGER_PICK_RATE_KEY] == 1.0 and hh["longer_pick_n"] == 991
    split = hh[LENGTH_SPLIT_KEY]
    assert (split[CHOSEN_LONGER]["n"], split[CHOSEN_LONGER]["accuracy"]) == (592, 1.0)
    assert (split[CHOSEN_SHORTER]["n"], split[CHOSEN_SHORTER]["accuracy"]) == (399, 0.0)
    assert (split[EQUAL_LENGTH]["n"], split[EQUAL_LENGTH]["accuracy"]) == (9, 0.0)


def test_length_split_and_longer_pick_rate_by_hand():
    # (chosen, rejected): the PlusCountScorer picks the side with more '+', whatever the length
    pairs = [
        ("aaaa+", "bb"),  # chosen longer, picked (correct), longer picked
        ("aaaaaa", "b+"),  # chosen longer, rejected picked (wrong), shorter picked
        ("a+", "bbbbb"),  # chosen shorter, picked (correct), shorter picked
        ("a", "bbb+"),  # chosen shorter, rejected picked (wrong), longer picked
        ("a", "b"),  # equal, tie (wrong)
        ("cc+", "ccc"),  # equal, picked (correct)
        ("aaaaaaa+", "b"),  # chosen longer, picked (correct), longer picked
    ]
    rows = [{"id": str(i), "prompt": "p", "chosen": c, "rejected": r, "subset": "s"} for i, (c, r) in
            enumerate(pairs)]  # fmt: skip
    _, summary = evaluate(PlusCountScorer(), rows, custom_section_table({}, "t"), mc_samples=0)
    split = summary[LENGTH_SPLIT_KEY]
    for bucket, (hits, n) in {CHOSEN_LONGER: (2, 3), CHOSEN_SHORTER: (1, 2), EQUAL_LENGTH: (1, 2)}.items():
        assert split[bucket] == {"n": n, "accuracy": hits / n, "ci95": list(wilson_interval(hits, n))}
    assert summary[LONGER_PICK_RATE_KEY] == pytest.approx(3 / 5)  # of the 5 unequal pairs
    assert summary[LONGER_WINS_BASELINE_KEY]["accuracy"] == pytest.approx(3 / 7)
    assert summary[LONGER_WINS_BASELINE_KEY]["accuracy_ties_half"] == pytest.approx(4 / 7)
    # per section by hand: the first four pairs in section a (2 longer wins, 1 tie), the rest in b
    by_section = length_report([c for c, _ in pairs], [r for _, r in pairs], [1.0] * 7, ["a"] * 4 + ["b"] * 3)
    baseline = by_section[LONGER_WINS_BASELINE_KEY]["by_section"]
    wins_a = sum(len(c) > len(r) for c, r in pairs[:4])
    ties_a = sum(len(c) == len(r) for c, r in pairs[:4])
    assert baseline["a"] == {"accuracy": wins_a / 4, "accuracy_ties_half": (wins_a + ties_a / 2) / 4, "n": 4}
    assert baseline["b"]["n"] == 3
    assert summary["overall"] == pytest.approx(4 / 7)


# ------------------------------------------------------------------------------ RewardBench 2
def _rb2_rows():
    """Lengths are the LengthRuleScorer's rewards. Factuality 1/2 right; Math 3/4 for a scalar head (m1's chosen
    ties with one rejected option at the top: credit 1/2, the official harness) and 1/2 for a pairwise head
    (strict); Ties: two prompts, each a ref row (one correct answer) and a tied row (several)."""

    def row(row_id, subset, chosen, rejected):
        return {
            "id": row_id,
            "prompt": f"q {row_id}",
            "chosen": chosen,
            "rejected": rejected,
            "subset": subset,
        }

    return [
        row("f1", "Factuality", ["aaaa"], ["a", "bb", "ccc"]),
        row("f2", "Factuality", ["a"], ["bb", "c", "ddd"]),
        row("m1", "Math", ["xxxxx"], ["yyyyy", "y", "z"]),
        row("m2", "Math", ["mmmmmm"], ["m", "mm", "mmm"]),
        row("ref:1", "Ties", ["a" * 6], ["a" * 2, "a" * 3]),
        row("tied:1", "Ties", ["b" * 8, "b" * 7], ["b" * 4, "b"]),
        row("ref:2", "Ties", ["c" * 2], ["c" * 3]),
        row("tied:2", "Ties", ["d" * 10, "d" * 3], ["d" * 2]),
    ]


def _hand_ties_score():
    """The official formula on the rows above (margins are length differences):
    prompt 1: ref margin 6-3=3 (accurate); tied diff 8-7=1, margin 7-4=3 (accurate)
    prompt 2: ref margin 2-3=-1 (wrong);   tied diff 10-3=7, margin 3-2=1 (accurate)"""
    ref_acc, tied_acc = 1 / 2, 2 / 2
    preferred = (float(3 > 1) + float(1 > 7)) / 2
    preferred_hard = (float(min(3, 3) > 1) + float(min(-1, 1) > 7)) / 2
    margin = (math.tanh(min(3, 3) / 1 - 1) + math.tanh(min(-1, 1) / 7 - 1)) / 2
    return 0.3 * tied_acc + 0.3 * ref_acc + 0.2 * preferred + 0.2 * preferred_hard + 0.01 * margin


def test_rewardbench2_file_scored_best_of_n_with_the_official_ties_score(tmp_path):
    path = tmp_path / "rb2.jsonl"
    write_jsonl(path, _rb2_rows())
    rb2 = _run(tmp_path, {"rb2": str(path)})["benchmarks"]["rb2"]  # format auto-detected
    assert rb2["format"] == "rewardbench2" and rb2["n_rows"] == 8
    ties = _hand_ties_score()
    assert ties == pytest.approx(0.65 + 0.005 * (math.tanh(2) + math.tanh(-8 / 7)))
    assert rb2["subsets"]["Factuality"]["accuracy"] == 0.5
    assert rb2["subsets"]["Math"]["accuracy"] == 0.75 and rb2["row_scoring"].startswith("tie credit")
    assert rb2["subsets"]["Ties"]["accuracy"] == pytest.approx(ties, abs=1e-12)
    assert rb2["ties"]["ref_accuracy"] == 0.5 and rb2["ties"]["tied_accuracy"] == 1.0
    assert rb2["ties"]["correctness_preferred"] == 0.5 and rb2["ties"]["correctness_preferred_hard"] == 0.5
    assert rb2["overall"] == pytest.approx((0.5 + 0.75 + ties) / 3, abs=1e-12)  # plain mean of the subsets
    assert rb2["sections_not_in_benchmark"] == ["Precise IF", "Safety", "Focus"]
    assert rb2["random_chance_best_of_4"] == 0.25
    # pairwise view: every chosen x rejected pair (3+3+3+3 + 2+4+1+2 = 21), for calibration and the length split
    assert rb2["n_pairs"] == 21 and "length_split" in rb2
    hand_pairwise = sum(
        len(c) > len(r) for row in _rb2_rows() for c in row["chosen"] for r in row["rejected"]
    )
    assert rb2["pairwise_accuracy"] == pytest.approx(hand_pairwise / 21)


def test_rewardbench2_pairwise_head_uses_compare_only(tmp_path):
    """A head without scalar rewards: a row is right when s(chosen > r) > 0 for every other option; the Ties
    score uses each option's mean preference (here a Borda count of length ranks)."""
    path = tmp_path / "rb2.jsonl"
    write_jsonl(path, _rb2_rows())
    rb2 = _run(tmp_path, {"rb2": {"source": str(path), "format": "rewardbench2"}}, PairwiseSignScorer())
    rb2 = rb2["benchmarks"]["rb2"]
    assert rb2["subsets"]["Factuality"]["accuracy"] == 0.5 and rb2["subsets"]["Math"]["accuracy"] == 0.5
    assert rb2["row_scoring"].startswith("strict")  # m1's tie s(chosen > 'yyyyy') = 0 is no win
    # Borda means m_i = (1/n) sum_j sign(len_i - len_j): ref:1 (6 | 2, 3): 2/3 vs 0, -2/3 -> margin 2/3;
    # tied:1 (8, 7 | 4, 1): 3/4, 1/4 vs -1/4, -3/4 -> diff 1/2, margin 1/2; ref:2: 2 options -> margin -1;
    # tied:2 (10, 3 | 2): 2/3, 0 vs -2/3 -> diff 2/3, margin 2/3.
    preferred = (float(1 / 2 > 1 / 2) + float(2 / 3 > 2 / 3)) / 2
    hard = (float(min(2 / 3, 1 / 2) > 1 / 2) + float(min(-1, 2 / 3) > 2 / 3)) / 2
    margin = (math.tanh(min(2 / 3, 1 / 2) / (1 / 2) - 1) + math.tanh(min(-1, 2 / 3) / (2 / 3) - 1)) / 2
    hand = 0.3 * 1.0 + 0.3 * 0.5 + 0.2 * preferred + 0.2 * hard + 0.01 * margin
    assert rb2["subsets"]["Ties"]["accuracy"] == pytest.approx(hand, abs=1e-12)


def test_rewardbench2_bad_ties_id_and_bad_rows(tmp_path):
    rows = _rb2_rows()
    rows[4]["id"] = "ref-1"
    path = tmp_path / "rb2.jsonl"
    write_jsonl(path, rows)
    with pytest.raises(DataError, match=r"Ties row id 'ref-1'"):
        _run(tmp_path, {"rb2": str(path)})
    rows = _rb2_rows() + [{"id": "x", "prompt": "p", "chosen": [], "rejected": ["r"], "subset": "Math"}]
    write_jsonl(path, rows)
    rb2 = _run(tmp_path, {"rb2": str(path)}, data={"bad_rows": "drop"})["benchmarks"]["rb2"]
    assert rb2["data"]["dropped"] == {"missing_chosen": 1} and rb2["n_rows"] == 8


# ------------------------------------------------------------------------------ truncation
def test_truncated_pairs_are_counted_per_benchmark(tmp_path):
    """A tiny reward model with max_length 24: pairs whose prompt + response exceed it are counted."""
    from support.models import build_reward, save_tiny_base

    model, _ = build_reward(save_tiny_base(tmp_path / "base"), "bt", data={"max_length": 24})
    model.eval()
    rows = [{"id": f"r{i}", "prompt": "tell me " * (1 + 10 * (i % 2)), "chosen": "yes", "rejected": "no",
             "subset": "s"} for i in range(6)]  # fmt: skip
    _, summary = evaluate(model, rows, custom_section_table({}, "t"), mc_samples=0)
    cut = [model.encoder.tokenize(r["prompt"], r["chosen"]).cut or model.encoder.tokenize(r["prompt"],
           r["rejected"]).cut for r in rows]  # fmt: skip
    truncation = summary["truncation"]
    assert truncation["max_length"] == 24
    assert truncation["pairs"] == sum(bool(c) for c in cut) == 3  # the three long prompts
    assert truncation["sequences"] == {"prompt": 6}
