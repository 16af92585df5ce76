"""Faults the report meets: a `report.compare` folder that does not exist (one line naming the key, nothing
written, the results tree untouched), a compared tree that lacks a variant's evaluation (the report is built,
the cell says it was not recorded, no TypeError), and truncated evaluation pairs (shown per variant and subset)."""

from __future__ import annotations

import json

from support.faults import changed, tree_hashes
from support.results_tree import manifest, write_results_tree
from support.settings import report_settings, stage_json
from support.stages import run_main

from prefpipe.report.__main__ import main
from prefpipe.report.write import build


def _config(**extra):
    return report_settings({"figure_dpi": 40, **extra}, experiment="synthetic-default", seed=0)


def _report(config, results, out, caplog):
    return run_main(
        main, stage_json(config), caplog, results=str(results), inputs=manifest().to_json(), out=str(out)
    )


def test_missing_compare_directory_is_one_line_and_changes_nothing(tmp_path, caplog):
    results = tmp_path / "results"
    write_results_tree(results, reward_steps=3, grpo_steps=3)
    before = tree_hashes(tmp_path)
    code, errors = _report(
        _config(compare={"seed7": str(tmp_path / "gone")}), results, results / "report", caplog
    )
    assert code == 2 and errors == [f"report: report.compare.seed7: {tmp_path / 'gone'} is not a directory"]
    assert changed(before, tree_hashes(tmp_path)) == set()


def test_compared_tree_missing_an_evaluation_is_reported_not_a_crash(tmp_path, caplog):
    results, other = tmp_path / "results", tmp_path / "seed1"
    write_results_tree(results, reward_steps=3, grpo_steps=3)
    write_results_tree(other, seed=1, reward_steps=3, grpo_steps=3, skip=("eval/gpm", "policy_eval"))
    before = tree_hashes(tmp_path)
    code, errors = _report(_config(compare={"seed1": str(other)}), results, results / "report", caplog)
    assert code == 0 and errors == []
    assert {p.split("/", 1)[0] for p in changed(before, tree_hashes(tmp_path))} == {"results"}
    assert all(p.startswith("results/report/") for p in changed(before, tree_hashes(tmp_path)))
    assert "Across seeds and experiments" in (results / "report" / "report.md").read_text(encoding="utf-8")


def test_truncated_pairs_are_shown_per_variant_and_subset(tmp_path):
    results = tmp_path / "results"
    write_results_tree(results, reward_steps=3, grpo_steps=3)
    summary_path = results / "eval" / "gpm" / "summary.json"
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    truncation = {"max_length": 24, "pairs": 3, "pairs_share": 0.25, "sequences": {"prompt": 3},
                  "by_subset": {"chat-arith": 2, "safety-refuse": 1, "cyclic-rps": 0}}  # fmt: skip
    for block in summary.get("benchmarks", {}).values():
        block["truncation"] = truncation
    summary["truncation"] = truncation
    summary_path.write_text(json.dumps(summary), encoding="utf-8")
    build(_config(), results, results / "report", manifest())
    md = (results / "report" / "report.md").read_text(encoding="utf-8")
    assert "Pairs truncated by the reward model's max_length" in md
    row = next(line for line in md.splitlines() if line.startswith("| gpm |") and "chat-arith 2" in line)
    assert "3 (25.0%)" in row and "safety-refuse 1" in row and "cyclic-rps" not in row
    assert any(line.startswith("| bt |") and "not recorded" in line for line in md.splitlines())
