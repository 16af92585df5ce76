"""Faults in the data and the models a stage reads: chosen == rejected (dropped and counted, or an error naming
file and row), a line that is not UTF-8 (file and line named), test pairs that repeat training prompts (counted
in the data summary), an over-long pair (counted per subset in the eval summary), a tokenizer without a pad
token under `pad_token_fix: error` (the model named). A failing prep_data leaves the results tree unchanged."""

from __future__ import annotations

import json

import pytest
from support.eval_args import evaluate
from support.faults import changed, tree_hashes
from support.models import build_reward, save_tiny_base
from support.rows import load_pairs
from support.settings import data_settings, stage_json

from prefpipe.common.config import ConfigError, DataError
from prefpipe.evaluation.sections import custom_section_table
from prefpipe.prep_data import main as prep_data

HELDOUT = {"benchmarks": {"held": "heldout"}}  # a file source has no synthetic benchmark
ROWS = [
    {"prompt": f"q{i}", "chosen": f"good {i}", "rejected": f"bad {i}", "subset": "s1" if i % 2 else "s2"}
    for i in range(8)
]


def _write(path, rows, extra: bytes = b""):
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in rows) + extra)
    return path


def test_chosen_equals_rejected_is_dropped_and_counted_or_an_error_naming_file_and_row(tmp_path):
    rows = [*ROWS[:3], {"prompt": "q", "chosen": "same", "rejected": "same", "subset": "s1"}, *ROWS[3:]]
    path = _write(tmp_path / "pairs.jsonl", rows)
    train, test, report = load_pairs({"source": "jsonl", "path": str(path)}, "drop", seed=0)
    assert report["dropped"]["chosen_equals_rejected"] == 1 and len(train) + len(test) == len(ROWS)
    with pytest.raises(DataError, match=rf"^data\.external\.path: {path}: row 4: chosen_equals_rejected: "):
        load_pairs({"source": "jsonl", "path": str(path)}, "error", seed=0)


def test_line_that_is_not_utf8_names_file_and_line(tmp_path):
    path = _write(
        tmp_path / "pairs.jsonl", ROWS[:2], b'{"prompt": "caf\xe9", "chosen": "a", "rejected": "b"}\n'
    )
    with pytest.raises(DataError, match=rf"^data\.external\.path: {path}: line 3: not UTF-8 text"):
        load_pairs({"source": "jsonl", "path": str(path)}, "drop", seed=0)


def test_prep_data_with_a_non_utf8_file_fails_in_one_line_and_changes_nothing(tmp_path, caplog):
    """The stage run as the workflow runs it: exit 2, one error line naming file and line, and no file of the
    results tree (an earlier data folder included) is written, removed or changed."""
    results = tmp_path / "results"
    (results / "data").mkdir(parents=True)
    (results / "data" / "pairs_train.jsonl").write_text('{"old": 1}\n', encoding="utf-8")
    (results / "eval" / "bt").mkdir(parents=True)
    (results / "eval" / "bt" / "summary.json").write_text("{}", encoding="utf-8")
    path = _write(tmp_path / "pairs.jsonl", ROWS[:2], b"\xff\xfe\n")
    settings = data_settings({"source": "jsonl", "external": {"path": str(path)}}, eval=HELDOUT)
    before = tree_hashes(results)
    caplog.clear()
    with caplog.at_level("ERROR"):
        code = prep_data(["--config", stage_json(settings), "--out", str(results / "data")])
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert code == 2 and len(errors) == 1 and f"{path}: line 3: not UTF-8" in errors[0]
    assert changed(before, tree_hashes(results)) <= {
        "data/config.json",
        "data/versions.json",
        "data/metrics.jsonl",
    }
    assert (results / "data" / "pairs_train.jsonl").read_text(encoding="utf-8") == '{"old": 1}\n'


def test_test_pairs_sharing_training_prompts_are_counted_in_the_data_summary(tmp_path):
    train_file = _write(tmp_path / "train.jsonl", ROWS)
    leaked = [
        {**ROWS[0], "chosen": "other", "id": "x"},
        {**ROWS[1], "prompt": "  Q1 "},
        {**ROWS[2], "prompt": "new"},
    ]
    test_file = _write(tmp_path / "test.jsonl", leaked)
    overlay = {"source": "jsonl", "external": {"path": str(train_file), "test_split": str(test_file)}}
    out = tmp_path / "data"
    small = {"synthetic": {"rl_prompts_train": 8, "rl_prompts_heldout": 8, "demonstrations": 8}}
    # one test pair of three repeats a training pair ("  Q1 " after folding): allowed up to a share of 0.5
    settings = data_settings({**overlay, **small, "max_overlap_share": 0.5}, eval=HELDOUT)
    assert prep_data(["--config", stage_json(settings), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    # q0 repeats exactly, "  Q1 " after case and whitespace folding; ids are content hashes: q0's differs
    # (its chosen changed), "x" is new, so no id is shared
    assert summary["train_test_overlap"]["pairs"] == {"repeated_pairs": 1, "prompts": 2, "ids": 0}
    assert summary["external"]["train_test_overlap"] == {"repeated_pairs": 1, "prompts": 2, "ids": 0}
    assert summary["train_test_overlap"]["rl_prompts_dropped"] == 0


def test_over_long_pairs_are_counted_per_subset_in_the_eval_summary(tmp_path):
    model, _ = build_reward(save_tiny_base(tmp_path / "base"), "bt", data={"max_length": 24})
    model.eval()
    long = "tell me " * 11
    rows = [
        {"id": "a0", "prompt": long, "chosen": "yes", "rejected": "no", "subset": "long-ones"},
        {"id": "a1", "prompt": long, "chosen": "yes", "rejected": "no", "subset": "long-ones"},
        {"id": "b0", "prompt": "hi", "chosen": "yes", "rejected": "no" + " no" * 30, "subset": "mixed"},
        {"id": "b1", "prompt": "hi", "chosen": "yes", "rejected": "no", "subset": "mixed"},
        {"id": "c0", "prompt": "hi", "chosen": "yes", "rejected": "no", "subset": "short"},
    ]
    _, summary = evaluate(model, rows, custom_section_table({}, "t"), mc_samples=0)
    truncation = summary["truncation"]
    assert truncation["by_subset"] == {"long-ones": 2, "mixed": 1, "short": 0}
    assert truncation["pairs"] == 3 and truncation["pairs_share"] == pytest.approx(3 / 5)


def test_missing_pad_token_with_pad_token_fix_error_names_the_model(tmp_path):
    base = save_tiny_base(tmp_path / "nopad", pad=False)
    with pytest.raises(
        ConfigError, match=rf"^{base}: tokenizer has no pad token \(backbone\.pad_token_fix='error'"
    ):
        build_reward(base, "gpm", backbone={"pad_token_fix": "error"})
