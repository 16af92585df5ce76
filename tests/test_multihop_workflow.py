"""config/experiments/multihop.yaml through real Snakemake: the dry run plans data -> base -> GRPO -> policy
evaluation -> report and no reward model; at toy sizes (tests/configs/tiny_multihop.yaml) prep_data writes the
world's questions as the RL prompt files and its episodes among the demonstrations, the GRPO run rolls out
episodes, eval_policy reports base and trained exact match, F1, calls and support recall with paired
intervals, and the report's multi-turn section and scoreboard show those figures. The hypothesis grid overlay
(config/experiments/multihop_hypotheses.yaml) plans its seven multi-turn runs and the verdicts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from support.episode_tree import check_paired_table, scoreboard_row
from support.markdown_tables import tables
from support.workflow import repo_copy

from prefpipe.common.io import read_jsonl

REPO = Path(__file__).resolve().parents[1]
EXPERIMENT = REPO / "config" / "experiments" / "multihop.yaml"
TINY = REPO / "tests" / "configs" / "tiny_multihop.yaml"
GRID = REPO / "config" / "experiments" / "multihop_hypotheses.yaml"
RESULTS = "results/tiny-multihop"


def _snakemake(wf: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
    }
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", *args]
    return subprocess.run(cmd, cwd=wf, env=env, capture_output=True, text=True, timeout=600)


def _jobs(result: subprocess.CompletedProcess) -> dict[str, int]:
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    table = out.split("Job stats:", 1)[1].split("total", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", table, re.MULTILINE)}


def _failure_class(row: dict, side: str) -> str:
    """The class of one side's episode, from per_example's columns (the order the analysis documents)."""
    if row[f"{side}_correct"]:
        return "correct"
    if row[f"{side}_valid_calls"] == 0:
        return "no_search"
    if row[f"{side}_answer_found"]:
        return "answer_seen_wrong" if row[f"{side}_answer"] is not None else "answer_seen_missing"
    return "support_no_answer" if row[f"{side}_support_recall"] else "no_support"


def _check_failures(summary: dict, rows: list[dict], md: str) -> None:
    """The summary's failure table recounted from per_example, and the report's table showing its counts."""
    failures = summary["decodings"][summary["decoding"]]["episodes"]["failures"]
    shown = next(t for t in tables(md) if t.header == ["Run", "Decoding", "Class", "Base", "Trained"])
    for i, side in enumerate(("base", "trained")):
        counts = failures[side]["counts"]
        assert sum(counts.values()) == len(rows) and failures[side]["n"] == len(rows)
        for name, n in counts.items():
            assert n == sum(_failure_class(r, side) == name for r in rows), (side, name)
            cell = next(r[3 + i] for r in shown.rows if r[2] == name.replace("_", " "))
            assert cell.endswith(f"({n})"), (cell, n)


def test_the_experiment_plans_data_base_grpo_and_policy_evaluation_only(tmp_path):
    wf = repo_copy(tmp_path / "wf", link_src=True)
    jobs = _jobs(_snakemake(wf, "-n", "--configfile", str(EXPERIMENT)))
    assert jobs == {
        "prep_data": 1, "build_base": 1, "train_grpo": 1, "eval_policy": 1, "report": 1, "all": 1
    }  # fmt: skip


def test_the_hypothesis_grid_overlay_plans_seven_multi_turn_runs_and_their_verdicts(tmp_path):
    wf = repo_copy(tmp_path / "wf", link_src=True)
    jobs = _jobs(_snakemake(wf, "-n", "--configfile", str(EXPERIMENT), str(GRID)))
    assert jobs == {
        "prep_data": 1, "build_base": 1, "train_grpo": 7, "eval_policy": 7, "grpo_hypotheses": 1, "report": 1,
        "all": 1,
    }  # fmt: skip


def test_prep_to_eval_policy_on_the_tiny_world(tmp_path):
    wf = repo_copy(tmp_path / "wf", link_src=True)
    target = f"{RESULTS}/policy_eval/search/summary.json"
    report = f"{RESULTS}/report/report.md"
    result = _snakemake(wf, report, "--configfile", str(EXPERIMENT), str(TINY))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "search" in (wf / report).read_text()  # the report covers the run without any reward model
    data = wf / RESULTS / "data"
    train, held = read_jsonl(data / "rl_prompts_train.jsonl"), read_jsonl(data / "rl_prompts_heldout.jsonl")
    assert (len(train), len(held)) == (8, 6)
    assert all(r["kind"] == "exact_match" and len(r["paragraphs"]) == 4 for r in train + held)
    demos = read_jsonl(data / "demonstrations.jsonl")
    episodes = [d for d in demos if d.get("turns")]
    assert len(episodes) == 24 and len(demos) == 24 + 8  # the world's episodes beside the built-in tasks'
    summary = json.loads((wf / target).read_text())
    assert summary["n_prompts"] == 6
    for decoding in ("greedy", "sampled"):
        block = summary["decodings"][decoding]["episodes"]
        for side in ("base", "trained"):
            assert set(block[side]) == {"f1", "calls_per_episode", "support_recall", "answered"}
            assert 0 <= block[side]["f1"] <= 1 and 0 <= block[side]["support_recall"] <= 1
        assert block["f1_paired"]["n"] == 6 and len(block["f1_paired"]["ci"]) == 2
    assert summary["paired"]["n"] == 6  # exact match, trained - base, paired over the held-out questions
    md = (wf / report).read_text()
    assert check_paired_table(md, {"search": summary}) == 2 * 4  # the report's figures are the summary's
    assert scoreboard_row(md, "search")["Exact match, greedy [95%]"] != "–"
    rows = read_jsonl(wf / RESULTS / "policy_eval" / "search" / "per_example.jsonl")
    assert {"base_f1", "trained_calls", "trained_support_recall", "base_valid_calls"} <= set(rows[0])
    _check_failures(summary, rows, md)
    curve = read_jsonl(wf / RESULTS / "grpo" / "search" / "curve.jsonl")
    assert [p["step"] for p in curve] == [0, 1, 2] and "greedy_support_recall" in curve[0]
