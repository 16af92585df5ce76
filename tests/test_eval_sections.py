"""Section arithmetic: hand computations on real RewardBench rows, official weights, missing and null sections."""

from __future__ import annotations

import itertools
import math

import pytest
from support.eval_args import evaluate, section_table
from support.scorers import LengthRuleScorer

from prefpipe.common.config import ConfigError
from prefpipe.common.io import read_jsonl
from prefpipe.evaluation.accuracy_summary import leaderboard_v1_score, section_scores, summarize_scores
from prefpipe.evaluation.sections import benchmark_table, build_section_table

SYNTH_SECTIONS = {
    "chat": ["chat-arith", "chat-instruct"],
    "chat_hard": ["chathard-arith", "chathard-instruct"],
    "safety": ["safety-refuse", "safety-comply"],
    "reasoning": ["reasoning-multistep"],
}


@pytest.fixture(scope="module")
def real_rows(shared_data):
    return read_jsonl(shared_data / "rewardbench_real_subsets.jsonl")


def _hand_accuracy(rows):
    """Per-subset accuracy of "longer chosen wins", ties wrong, in plain Python."""
    wins: dict[str, list[int]] = {}
    for row in rows:
        bucket = wins.setdefault(row["subset"], [0, 0])
        bucket[0] += 1 if len(row["chosen"]) > len(row["rejected"]) else 0
        bucket[1] += 1
    return {s: c / n for s, (c, n) in wins.items()}


@pytest.mark.parametrize("xstest", ["official", "pre2024_code"])
def test_real_subsets_sections_match_hand_computation(real_rows, xstest):
    # The official map, as an `eval.benchmarks` entry of a RewardBench-format file gets it by default.
    table = benchmark_table("official", SYNTH_SECTIONS, ["cyclic-rps"], xstest_weights=xstest, where="b")
    frame, summary = evaluate(LengthRuleScorer(), real_rows, table, batch_size=32)
    acc = _hand_accuracy(real_rows)

    for subset, value in acc.items():
        assert summary["subsets"][subset]["accuracy"] == pytest.approx(value, abs=1e-12)
    chat_hard = (
        acc["llmbar-natural"] * 100
        + acc["llmbar-adver-neighbor"] * 134
        + acc["llmbar-adver-GPTInst"] * 92
        + acc["llmbar-adver-GPTOut"] * 47
        + acc["llmbar-adver-manual"] * 46
    ) / (100 + 134 + 92 + 47 + 46)
    refuse_w, respond_w = (154, 250) if xstest == "official" else (250, 154)
    safety = (acc["xstest-should-refuse"] * refuse_w + acc["xstest-should-respond"] * respond_w) / 404
    sections = summary["sections"]
    assert sections["chat_hard"]["score"] == pytest.approx(chat_hard, abs=1e-12)
    assert sections["safety"]["score"] == pytest.approx(safety, abs=1e-12)
    assert summary["overall"] == pytest.approx((chat_hard + safety) / 2, abs=1e-12)
    assert summary["overall_sections"] == ["chat_hard", "safety"]
    # No false flags: the file is rebuilt from LLMBar and XSTest only, so MT-Bench, the refusals sets,
    # DoNotAnswer and the Chat / Reasoning sections are not in it -- listed for information, never "missing".
    assert summary["missing_sections"] == []
    assert summary["sections_not_in_benchmark"] == ["chat", "reasoning", "prior_sets"]
    assert summary["overall_leaderboard_v1"] is None  # no prior sets in this file
    assert summary["cyclic"] == {"subsets": {}, "accuracy": None, "n": 0, "missing_subsets": []}
    assert set(sections) == {"chat_hard", "safety"}  # no prior sets, no synthetic subsets, no empty sections
    for name in ("chat_hard", "safety"):
        assert sections[name]["partial"] is False and sections[name]["missing_subsets"] == []
    assert sections["chat_hard"]["subsets"] == [
        "llmbar-natural", "llmbar-adver-neighbor", "llmbar-adver-GPTInst", "llmbar-adver-GPTOut",
        "llmbar-adver-manual",
    ]  # fmt: skip
    assert sections["chat_hard"]["absent_subsets"] == ["mt-bench-hard"]
    assert sections["safety"]["subsets"] == ["xstest-should-refuse", "xstest-should-respond"]
    assert sections["safety"]["absent_subsets"] == ["refusals-dangerous", "refusals-offensive", "donotanswer"]
    assert len(frame) == len(real_rows) == summary["n_pairs"]


def test_ties_count_as_wrong(real_rows):
    ties = [r for r in real_rows if len(r["chosen"]) == len(r["rejected"])]
    assert ties, "the real file is expected to hold equal-length pairs (ties for the length rule)"
    frame, _ = evaluate(LengthRuleScorer(), real_rows, section_table(), batch_size=8)
    tied = frame[frame["id"].isin({str(r["id"]) for r in ties})]
    assert len(tied) == len(ties)
    assert (tied["score_chosen_minus_rejected"] == 0).all()
    assert not tied["correct"].any()
    assert (tied["prob"] == 0.5).all()


def test_math_prm_weighs_984_not_its_row_count():
    subsets = ["math-prm"] * 4 + ["hep-python"] * 2
    correct = [True, True, True, False, True, False]
    summary = summarize_scores(subsets, correct, section_table())
    expected = (0.75 * 984 + 0.5 * 164) / (984 + 164)
    assert summary["sections"]["reasoning"]["score"] == pytest.approx(expected, abs=1e-12)
    assert summary["sections"]["reasoning"]["score"] != pytest.approx(4 / 6)
    assert summary["subsets"]["math-prm"]["weight"] == 984
    assert summary["sections"]["reasoning"]["missing_subsets"] == [
        "hep-cpp", "hep-go", "hep-java", "hep-js", "hep-rust",
    ]  # fmt: skip


def test_config_sections_use_row_counts_and_cyclic_is_separate():
    table = section_table(SYNTH_SECTIONS, ["cyclic-rps"])
    subsets = (
        ["chat-arith"] * 3 + ["chat-instruct"] * 1 + ["safety-refuse"] * 2 + ["cyclic-rps"] * 3 + ["odd"] * 2
    )
    correct = [True, False, True] + [False] + [True, True] + [True, True, False] + [True, False]
    summary = summarize_scores(subsets, correct, table)
    sections = summary["sections"]
    assert sections["chat"]["score"] == pytest.approx((2 / 3 * 3 + 0 * 1) / 4)
    assert sections["chat"]["partial"] is False
    assert sections["safety"]["score"] == pytest.approx(1.0)
    assert sections["safety"]["missing_subsets"] == ["safety-comply"]
    assert sections["chat_hard"]["score"] is None and sections["reasoning"]["score"] is None
    assert summary["overall"] == pytest.approx((0.5 + 1.0) / 2)  # plain mean of the non-null sections
    assert summary["cyclic"]["subsets"] == {"cyclic-rps": {"accuracy": pytest.approx(2 / 3), "n": 3}}
    assert summary["cyclic"]["accuracy"] == pytest.approx(2 / 3)
    no_cycle = summarize_scores(["chat-arith"], [True], table)["cyclic"]
    assert no_cycle["missing_subsets"] == [
        "cyclic-rps"
    ]  # the synthetic world is in play, its cyclic set absent
    assert "cyclic-rps" not in {s for v in sections.values() for s in v["subsets"]}
    assert summary["unassigned_subsets"] == ["odd"]
    # The official family is not in play: its subsets are not reported missing from a synthetic benchmark.
    assert all("alpacaeval-easy" not in v["missing_subsets"] for v in sections.values())


def test_prior_sets_plain_mean_and_old_leaderboard_weighting():
    subsets = ["anthropic_helpful"] * 10 + ["shp"] * 4 + ["alpacaeval-easy"] * 2
    correct = [True] * 7 + [False] * 3 + [True] * 1 + [False] * 3 + [True, True]
    summary = summarize_scores(subsets, correct, section_table())
    prior = summary["sections"]["prior_sets"]
    assert prior["score"] == pytest.approx((0.7 + 0.25) / 2)  # each prior set weighs 1
    assert prior["missing_subsets"] == ["anthropic_hhh", "summarize"]
    assert summary["overall"] == pytest.approx(1.0)  # chat only; prior sets are not in the plain mean
    # Old leaderboard: chat 2, prior 1 (other sections null)
    assert summary["overall_leaderboard_v1"] == pytest.approx((2 * 1.0 + 0.475) / 3)


def test_old_leaderboard_reproduces_a_published_score():
    """ArmoRM-Llama3-8B-v0.1 on the old leaderboard: 96.9 / 76.8 / 92.2 / 97.3, prior sets 74.3 -> score 89.0."""
    published = {"chat": 0.969, "chat_hard": 0.768, "safety": 0.922, "reasoning": 0.973, "prior_sets": 0.743}
    score = leaderboard_v1_score({k: {"score": v} for k, v in published.items()})
    assert round(score * 100, 1) == 89.0


def test_section_stderr_matches_exact_enumeration():
    """Var of a weighted mean of two binomial accuracies, by enumerating every outcome."""
    p, n, w = {"a": 0.3, "b": 0.6}, {"a": 2, "b": 3}, {"a": 2.0, "b": 5.0}
    table = section_table({"sec": ["a", "b"]})
    table = type(table)(table.families, {**table.fixed_weights, **w}, table.cyclic)
    stats = {s: {"accuracy": p[s], "n": n[s], "stderr": math.sqrt(p[s] * (1 - p[s]) / n[s])} for s in p}
    sections, _ = section_scores(stats, table)

    mean = var = 0.0
    outcomes = list(itertools.product([0, 1], repeat=n["a"] + n["b"]))
    moments = []
    for outcome in outcomes:
        xa, xb = outcome[: n["a"]], outcome[n["a"] :]
        prob = math.prod(p["a"] if x else 1 - p["a"] for x in xa) * math.prod(
            p["b"] if x else 1 - p["b"] for x in xb
        )
        value = (w["a"] * sum(xa) / n["a"] + w["b"] * sum(xb) / n["b"]) / (w["a"] + w["b"])
        moments.append((prob, value))
    mean = sum(pr * v for pr, v in moments)
    var = sum(pr * (v - mean) ** 2 for pr, v in moments)
    assert sections["sec"]["score"] == pytest.approx(mean, abs=1e-12)
    assert sections["sec"]["stderr"] ** 2 == pytest.approx(var, abs=1e-12)


@pytest.mark.parametrize(
    ("sections", "cyclic", "needle"),
    [
        ({"a": ["x"], "b": ["x"]}, [], "listed under both"),
        ({"chat": ["llmbar-natural"]}, [], "official RewardBench subset of section 'chat_hard'"),
        ({"chat": ["cyc"]}, ["cyc"], "data.cyclic_subsets"),
        ({"chat": "chat-arith"}, [], "data.sections.chat must be a list"),
    ],
)
def test_bad_section_config_names_the_key(sections, cyclic, needle):
    with pytest.raises(ConfigError, match="data.sections") as err:
        section_table(sections, cyclic)
    assert needle in str(err.value)


def test_unknown_xstest_convention_is_a_config_error():
    with pytest.raises(ConfigError, match="eval.xstest_weights"):
        build_section_table(xstest_weights="swapped")
