"""Faults, second round: leakage judged by content (issue 35). A test file that repeats the training pairs (also
after case, whitespace and punctuation changes) and held-out RL prompts that repeat training prompts are refused
above data.max_overlap_share (default 0) with the count, before any file is written; below it the overlap is
counted in the data summary and shown on the report's first screen. A benchmark from outside the data stage is
judged against the training prompts the same way, in the evaluation, before anything is scored."""

from __future__ import annotations

import json

import pytest
from support.results_tree import manifest, write_results_tree
from support.scorers import LengthRuleScorer
from support.settings import data_settings, eval_settings, report_settings, stage_json

from prefpipe.common.config import DataError
from prefpipe.data.normalize import content_key, train_test_overlap
from prefpipe.evaluation.evaluate import evaluate_model
from prefpipe.prep_data import main as prep_data
from prefpipe.report.write import build

HELDOUT = {"benchmarks": {"held": "heldout"}}
SMALL = {"synthetic": {"rl_prompts_train": 8, "rl_prompts_heldout": 8, "demonstrations": 8}}
ROWS = [
    {"prompt": f"What is {i} + 2?", "chosen": f"It is {i + 2}.", "rejected": "No idea."} for i in range(8)
]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _prep(tmp_path, caplog, data: dict) -> tuple[int, list[str]]:
    settings = data_settings({**SMALL, **data}, eval=HELDOUT)
    caplog.clear()
    with caplog.at_level("ERROR"):
        code = prep_data(["--config", stage_json(settings), "--out", str(tmp_path / "data")])
    return code, [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]


def test_content_key_folds_case_space_and_punctuation_but_not_operators_or_numbers():
    assert content_key("  What is 3 + 4?\n") == content_key("what IS 3 + 4") == "what is 3 + 4"
    assert content_key("4 - 2") != content_key("4 2") and content_key("3.5") != content_key("35")
    assert content_key("Don't \u201csay\u201d it\u2026") == "don t say it"


@pytest.mark.parametrize("edit", [lambda t: t, lambda t: f"  {t.upper()} ".replace("?", " ?!")])
def test_a_test_file_that_copies_the_training_file_is_refused_with_the_count(tmp_path, caplog, edit):
    train = _write(tmp_path / "train.jsonl", ROWS)
    copy = _write(tmp_path / "test.jsonl", [{k: edit(v) for k, v in row.items()} for row in ROWS])
    external = {"path": str(train), "test_split": str(copy)}
    code, errors = _prep(tmp_path, caplog, {"source": "jsonl", "external": external})
    assert code == 2 and len(errors) == 1
    assert errors[0].startswith(
        f"prep_data: data.external ({copy}): 8 of 8 test pairs (100.0%) repeat training"
    )
    assert "data.max_overlap_share (0.0)" in errors[0]
    assert not (tmp_path / "data" / "pairs_train.jsonl").exists()


def test_overlap_below_the_threshold_is_counted(tmp_path, caplog):
    train = _write(tmp_path / "train.jsonl", ROWS)
    test = _write(
        tmp_path / "test.jsonl", [ROWS[0], *[{**r, "prompt": r["prompt"] + " now"} for r in ROWS[1:]]]
    )
    external = {"path": str(train), "test_split": str(test)}
    code, errors = _prep(
        tmp_path, caplog, {"source": "jsonl", "external": external, "max_overlap_share": 0.2}
    )
    assert (code, errors) == (0, [])
    summary = json.loads((tmp_path / "data" / "summary.json").read_text(encoding="utf-8"))
    assert summary["train_test_overlap"]["pairs"] == {"repeated_pairs": 1, "prompts": 1, "ids": 1}


def test_held_out_rl_prompts_repeating_training_prompts_are_refused(tmp_path, caplog):
    """rl_prompts drops held-out prompts equal to a training prompt up to case and spacing; one that differs only
    in punctuation is still the same question, and is refused by content."""
    train = _write(
        tmp_path / "p_train.jsonl", [{"question": f"What is {i} + 1?", "answer": "x"} for i in range(4)]
    )
    held = [{"question": "what is 0 + 1", "answer": "x"}, {"question": "What is 9 + 9?", "answer": "x"}]
    heldout = _write(tmp_path / "p_held.jsonl", held)
    prompts = {"source": "jsonl", "path": str(train), "test_path": str(heldout), "prompt_field": "question"}
    code, errors = _prep(tmp_path, caplog, {"prompts": prompts})
    assert code == 2 and errors == [
        f"prep_data: data.prompts ({heldout}): 1 of 2 held-out RL prompts (50.0%) repeat training data after "
        "case, whitespace and punctuation folding, above data.max_overlap_share (0.0): a held-out score would be "
        "a training score; use disjoint data or raise data.max_overlap_share"
    ]


def test_the_report_shows_any_overlap_on_its_first_screen(tmp_path):
    results = tmp_path / "results"
    write_results_tree(results, reward_steps=3, grpo_steps=3)
    summary_path = results / "data" / "summary.json"
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    summary["train_test_overlap"] = {
        "pairs": train_test_overlap(
            *[[{**r, "id": str(i)} for i, r in enumerate(rows)] for rows in (ROWS, ROWS[:2])]
        ),
        "rl_prompts_dropped": 0,
        "rl_prompts": 0,
    }
    summary_path.write_text(json.dumps(summary), encoding="utf-8")
    config = report_settings({"figure_dpi": 40}, experiment="synthetic-default", seed=0)
    build(config, results, results / "report", manifest())
    head = (results / "report" / "report.md").read_text(encoding="utf-8").splitlines()[:3]
    note = "train/test overlap: 2 test pairs repeat a training pair, 2 test pairs share a training prompt"
    assert any(note in line for line in head)
    assert note in (results / "report" / "report.html").read_text(encoding="utf-8")


def test_a_benchmark_that_repeats_training_prompts_is_refused_before_scoring(tmp_path):
    """Training prompts vs a benchmark from outside the data stage: counted, and refused above the threshold
    before anything is scored or written."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    _write(data_dir / "pairs_train.jsonl", [{**r, "id": f"t{i}", "subset": "s"} for i, r in enumerate(ROWS)])
    bench_rows = [
        {**r, "id": f"b{i}", "subset": "s", "prompt": r["prompt"].upper()} for i, r in enumerate(ROWS[:4])
    ]
    bench = _write(
        tmp_path / "bench.jsonl", [*bench_rows, {**bench_rows[0], "id": "new", "prompt": "Fresh?"}]
    )
    benchmarks = {"synthetic": None, "mine": str(bench)}
    out = tmp_path / "eval"
    with pytest.raises(
        DataError, match=rf"^eval\.benchmarks\.mine \({bench}\): 4 of 5 benchmark prompts \(80\.0%\)"
    ):
        evaluate_model(
            LengthRuleScorer(), eval_settings({"benchmarks": benchmarks}), data_dir, out, "rule", "cpu"
        )
    assert not out.exists()
    cfg = eval_settings({"benchmarks": benchmarks, "mc_samples": 0}, data={"max_overlap_share": 0.8})
    summary = evaluate_model(LengthRuleScorer(), cfg, data_dir, out, "rule", "cpu")
    assert summary["benchmarks"]["mine"]["data"]["train_prompt_overlap"] == 4
