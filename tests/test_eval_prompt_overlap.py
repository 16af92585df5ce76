"""Prompt overlap between the training pairs and each benchmark, exact and normalised, both ways: counted by the
eval stage from real files with known overlaps (a RewardBench-format file and a RewardBench 2 file), written
to each benchmark's summary and shown in the report."""

from __future__ import annotations

import json

from support.results_tree import manifest, write_results_tree
from support.scorers import LengthRuleScorer
from support.settings import eval_settings, report_settings

from prefpipe.common.io import write_jsonl
from prefpipe.data.normalize import benchmark_prompt_overlap
from prefpipe.evaluation.evaluate import evaluate_model
from prefpipe.evaluation.summary_keys import PROMPT_OVERLAP
from prefpipe.report.write import build

TRAIN = [
    "What is 2 + 2?",  # in 'pairs' exactly
    "What is 2 + 2?",  # the same prompt again: a second training pair that counts
    "Name a colour.",  # in 'pairs' only after folding case and punctuation ("name a colour")
    "Tell me a joke",  # in 'rb2' after folding whitespace ("Tell  me a   joke!")
    "What is 3 - 1?",  # nowhere ("What is 3 1?" differs: '-' is kept by the normaliser)
    "Unrelated",
]
PAIRS = ["What is 2 + 2?", "NAME A COLOUR!", "What is 3 1?", "Fresh question"]
RB2 = ["Tell  me a   joke!", "What is 2 + 2?", "Another"]
HAND = {
    "pairs": {
        "train_pairs": 6,
        "benchmark_rows": 4,
        "train_pairs_exact": 2,  # the two "What is 2 + 2?" pairs
        "train_pairs_normalised": 3,  # + "Name a colour."
        "benchmark_rows_exact": 1,
        "benchmark_rows_normalised": 2,
    },
    "rb2": {
        "train_pairs": 6,
        "benchmark_rows": 3,
        "train_pairs_exact": 2,
        "train_pairs_normalised": 3,  # + "Tell me a joke"
        "benchmark_rows_exact": 1,
        "benchmark_rows_normalised": 2,
    },
}


def _files(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(
        data / "pairs_train.jsonl",
        [
            {"id": f"t{i}", "prompt": p, "chosen": "yes", "rejected": "no", "subset": "s"}
            for i, p in enumerate(TRAIN)
        ],
    )
    pairs = [
        {"id": f"p{i}", "prompt": p, "chosen": "ok!", "rejected": "no", "subset": "s"}
        for i, p in enumerate(PAIRS)
    ]
    rb2 = [
        {"id": f"r{i}", "prompt": p, "chosen": ["best"], "rejected": ["a", "bb", "c"], "subset": "Focus"}
        for i, p in enumerate(RB2)
    ]
    write_jsonl(tmp_path / "pairs.jsonl", pairs)
    write_jsonl(tmp_path / "rb2.jsonl", rb2)
    return data, pairs, rb2


def test_overlap_counts_by_hand(tmp_path):
    _, pairs, rb2 = _files(tmp_path)
    train = [{"prompt": p} for p in TRAIN]
    assert benchmark_prompt_overlap(train, pairs) == HAND["pairs"]
    assert benchmark_prompt_overlap(train, rb2) == HAND["rb2"]


def test_eval_summary_records_the_overlap_per_benchmark(tmp_path):
    data, _, _ = _files(tmp_path)
    benchmarks = {
        "synthetic": None,
        "pairs": str(tmp_path / "pairs.jsonl"),
        "rb2": str(tmp_path / "rb2.jsonl"),
    }
    cfg = eval_settings({"benchmarks": benchmarks, "mc_samples": 0}, data={"max_overlap_share": 0.9})
    top = evaluate_model(LengthRuleScorer(), cfg, data, tmp_path / "eval", "rule", "cpu")
    for name in ("pairs", "rb2"):
        assert top["benchmarks"][name]["data"][PROMPT_OVERLAP] == HAND[name]
        on_disk = json.loads((tmp_path / "eval" / name / "summary.json").read_text())
        assert on_disk["data"][PROMPT_OVERLAP] == HAND[name]


def test_report_shows_the_overlap_table(tmp_path):
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=3, grpo_steps=3)
    cfg = report_settings({"figure_dpi": 40}, experiment="synthetic-default", seed=0)
    build(cfg, root, tmp_path / "a", manifest())
    assert "## Prompt overlap" not in (tmp_path / "a" / "report.md").read_text()
    for path in (root / "eval").glob("*/summary.json"):
        summary = json.loads(path.read_text())
        summary["benchmarks"]["synthetic"].setdefault("data", {})[PROMPT_OVERLAP] = HAND["pairs"]
        path.write_text(json.dumps(summary))
    build(cfg, root, tmp_path / "b", manifest())
    md = (tmp_path / "b" / "report.md").read_text()
    assert "## Prompt overlap with the training pairs" in md
    assert "| synthetic | 4 | 1 (25.0%) | 2 (50.0%) | 6 | 2 (33.3%) | 3 (50.0%) |" in md
    assert "repeats a training prompt (normalised text): synthetic 2 (50.0%)" in md
    assert (
        "Prompts shared by the training pairs and each benchmark"
        in (tmp_path / "b" / "report.html").read_text()
    )
