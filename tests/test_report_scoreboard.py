"""The scoreboard at the top of the report (#53): reward heads × headline benchmark and GRPO runs × change,
answer length and hacking, with at most five verdicts; each figure equal to what the summaries hold (computed
here from the files, tests/support/scoreboard.py), the best per column marked, every cell linking to an anchor
the page has; the Markdown below it exactly the report without it; columns that do not apply left out; a
comparison of seeds as mean ± sd."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import numpy as np
import pytest
from support.results_tree import QUALITY, RUNS, manifest, write_results_tree, write_seed_trees
from support.scoreboard import head_cells, paired_change
from support.settings import report_settings

from prefpipe.evaluation.length_control import LENGTH_CONTROLLED_KEY
from prefpipe.evaluation.length_split import LENGTH_SPLIT_KEY
from prefpipe.report.document import Board, Claims
from prefpipe.report.html import render_html
from prefpipe.report.inputs import Manifest
from prefpipe.report.markdown import render_markdown
from prefpipe.report.stats import NA
from prefpipe.report.write import document

HEADS = ["bt", "gpm", "bgpm"]


def _doc(root, files: Manifest | None = None, **settings):
    cfg = report_settings({"figure_dpi": 30, **settings}, experiment="synthetic-default", seed=0)
    return document(cfg, root, files or manifest())


def _boards(doc) -> dict[str, Board]:
    return {b.anchor: b for b in doc.board.blocks if isinstance(b, Board)}


def _rows(board: Board) -> dict[str, dict[str, object]]:
    return {row[0].text: dict(zip(board.columns, row, strict=True)) for row in board.rows}


def _verdicts(doc) -> list[str]:
    return [c.text for b in doc.board.blocks if isinstance(b, Claims) for c in b.items]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("scoreboard") / "results"
    write_results_tree(root, reward_steps=4, grpo_steps=4)
    return root


def test_heads_board_figures_are_the_summaries_and_the_best_is_marked(tree):
    doc = _doc(tree)
    heads = _rows(_boards(doc)["scoreboard-heads"])
    assert list(heads) == HEADS
    for head in HEADS:
        expected = head_cells(tree, head)
        assert {k: c.text for k, c in heads[head].items() if k != "Head"} == expected, head
    # gpm is best everywhere; bgpm's Overall interval reaches gpm's, so not resolved (☆); ECE has no interval
    assert heads["gpm"]["Overall"].mark == "best_unresolved" and heads["gpm"]["ECE ↓"].mark == "best"
    assert heads["bt"]["Overall"].mark == "" and heads["bgpm"]["ECE ↓"].mark == ""
    html = render_html(doc)
    anchors = {c.anchor for b in _boards(doc).values() for row in b.rows for c in row}
    anchors |= {c.anchor for b in doc.board.blocks if isinstance(b, Claims) for c in b.items}
    for anchor in anchors:  # every cell and verdict links to something on the page
        assert f'id="{anchor}"' in html, anchor
    assert html.index('id="scoreboard"') < html.index('id="answers"') < html.index("<nav>")


def test_runs_board_and_verdicts(tree):
    doc = _doc(tree)
    runs = _rows(_boards(doc)["scoreboard-runs"])
    summary = json.loads((tree / "policy_eval" / "gpm-verifier" / "summary.json").read_text())
    row = runs["gpm-verifier"]
    for decoding in ("greedy", "sampled"):
        cell = row[f"{decoding.capitalize()} change [95%]"]
        assert cell.text == paired_change(summary, decoding) and cell.mark == "improved"
    sampled = summary["decodings"]["sampled"]
    assert row["Answer length (tokens)"].text == (
        f"{sampled['base']['mean_length']:.1f} → {sampled['trained']['mean_length']:.1f}"
    )
    assert row["Hacked"].text == "no (RM wins 64.0%)" and row["Hacked"].mark == ""
    verdicts = _verdicts(doc)
    assert len(verdicts) == 5
    assert verdicts[0].startswith("Best head on synthetic: gpm 84.5% [81.7, 87.3], not resolved from")
    assert verdicts[1].startswith("Cyclic set: GPM 97.0% [91.5, 99.0] clears the 66.7%")
    assert verdicts[2] == (
        "Fix that matters most (vs bgpm-broken): bgpm-broken+klweight, +24.0 pts [+18.9, +29.1] overall."
    )
    assert (
        verdicts[3]
        == f"GRPO helped most: gpm-verifier, held-out accuracy {paired_change(summary, 'sampled')} (sampled)."
    )


def test_a_run_the_reward_model_prefers_without_a_verifier_gain_is_flagged(tmp_path):
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=4, grpo_steps=4)
    path = root / "policy_eval" / "gpm-verifier" / "summary.json"
    summary = json.loads(path.read_text())
    for block in [summary, *summary["decodings"].values()]:
        block["trained"] = {**block["base"], "mean_length": 40.0}  # no verifier change, longer answers
    summary["reward_model"]["win_rate"] = 0.9
    path.write_text(json.dumps(summary))
    doc = _doc(root)
    row = _rows(_boards(doc)["scoreboard-runs"])["gpm-verifier"]
    assert row["Hacked"].mark == "flag" and row["Hacked"].shown == "⚠ hacked (RM wins 90.0%)"
    assert row["Sampled change [95%]"].mark == "unresolved"
    assert _verdicts(doc)[-1].startswith("Hacked: gpm-verifier (RM prefers it on 90.0% [")
    assert "No GRPO run improved held-out accuracy beyond its interval" in _verdicts(doc)[-2]
    for stage in ("grpo", "policy_eval"):  # a second run that hacked: both named on one line
        shutil.copytree(root / stage / "gpm-verifier", root / stage / "gpm-verifier-2")
    doc = _doc(root, Manifest.standard(list(QUALITY), [*RUNS, "gpm-verifier-2"], []))
    assert _verdicts(doc)[-1] == (
        "Hacked: gpm-verifier, gpm-verifier-2 (RM prefers their answers on 90.0% of prompts; verifier accuracy "
        "not improved)."
    )


def test_markdown_below_the_scoreboard_is_the_report_without_it(tree):
    doc = _doc(tree)
    with_board = render_markdown(doc)
    without = render_markdown(dataclasses.replace(doc, board=None))
    head = f"# {doc.title}\n\n{doc.subtitle}\n\n"
    assert without.startswith(head) and with_board.startswith(head + "## Scoreboard\n\n")
    board_md, rest = with_board[len(head) :].split("\n1. [Answers](#answers)\n", 1)
    assert "\n1. [Answers](#answers)\n" + rest == "\n" + without[len(head) :], (
        "text below the scoreboard changed"
    )
    assert "**[☆ 84.5 \\[81.7, 87.3\\]](#rewardbench-table)**" in board_md


def test_without_grpo_or_a_bayesian_head_those_columns_and_verdicts_are_left_out(tmp_path):
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=4, grpo_steps=4)
    for variant in ("bt", "gpm"):  # no calibration recorded: no ECE column (not a column of dashes)
        path = root / "eval" / variant / "summary.json"
        summary = json.loads(path.read_text())
        for block in [summary, *summary["benchmarks"].values()]:
            block.pop("calibration", None)
        path.write_text(json.dumps(summary))
    shutil.rmtree(root / "ablation", ignore_errors=True)
    doc = _doc(root, Manifest.standard(["bt", "gpm"], [], []))
    boards = _boards(doc)
    assert list(boards) == ["scoreboard-heads"]  # no GRPO board
    heads = boards["scoreboard-heads"]
    assert heads.columns == ["Head", "Overall", "Chat", "Chat Hard", "Safety", "Reasoning", "Cyclic"]
    assert all(c.text != NA for row in heads.rows for c in row)
    verdicts = _verdicts(doc)
    assert [v.split(":")[0] for v in verdicts] == ["Best head on synthetic", "Cyclic set"]


def test_a_seeds_comparison_shows_mean_and_sd_over_the_trees(tmp_path):
    trees, compare = write_seed_trees(tmp_path)
    doc = _doc(trees[0], compare=compare)
    heads = _rows(_boards(doc)["scoreboard-heads"])
    for head in HEADS:
        values = [json.loads((t / "eval" / head / "summary.json").read_text())["overall"] for t in trees]
        mean, sd = 100 * np.mean(values), 100 * np.std(values, ddof=1)
        assert re.sub("^[★☆] ", "", heads[head]["Overall"].shown) == f"{mean:.1f} ± {sd:.1f}", head
    # every figure over the same 3 trees: said once in the title, not in each cell
    assert "mean ± sample sd over 3 trees each" in _boards(doc)["scoreboard-heads"].title
    assert heads["gpm"]["Overall"].mark == "best"
    runs = _rows(_boards(doc)["scoreboard-runs"])
    deltas = []
    for t in trees:
        summary = json.loads((t / "policy_eval" / "gpm-verifier" / "summary.json").read_text())
        block = summary["decodings"]["sampled"]
        deltas.append(100 * (block["trained"]["accuracy"] - block["base"]["accuracy"]))
    cell = runs["gpm-verifier"]["Sampled change"]
    assert cell.text == f"{np.mean(deltas):+.1f} ± {np.std(deltas, ddof=1):.1f}" and cell.mark == "improved"
    assert _boards(doc)["scoreboard-runs"].title.endswith("mean ± sd over 3 trees")
    assert runs["gpm-verifier"]["Hacked"].text == "0/3 trees"
    verdict = _verdicts(doc)[0]  # the best head read over the trees: ahead of the runner-up in each of them
    overall = {
        head: [json.loads((t / "eval" / head / "summary.json").read_text())["overall"] for t in trees]
        for head in ("gpm", "bgpm")
    }
    ahead = sum(g > b for g, b in zip(overall["gpm"], overall["bgpm"], strict=True))
    assert (
        verdict.startswith("Best head on synthetic over 3 trees: gpm ")
        and f"in {ahead} of 3 trees" in verdict
    )


def test_the_length_controlled_accuracy_is_a_column_where_recorded(tmp_path):
    """Each head's length-controlled accuracy as its eval summary records it, beside the other figures; the
    highest marked."""
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=4, grpo_steps=4)
    recorded = {"bt": (0.61, 0.55, 0.67), "gpm": (0.80, 0.76, 0.84), "bgpm": (0.78, 0.74, 0.82)}
    for head, (acc, lo, hi) in recorded.items():
        path = root / "eval" / head / "summary.json"
        summary = json.loads(path.read_text())
        for block in (summary, summary["benchmarks"]["synthetic"]):
            block[LENGTH_SPLIT_KEY] = {}
            block[LENGTH_CONTROLLED_KEY] = {"accuracy": acc, "ci95": [lo, hi]}
        path.write_text(json.dumps(summary))
    heads = _rows(_boards(_doc(root))["scoreboard-heads"])
    for head, (acc, lo, hi) in recorded.items():
        assert heads[head]["Length-controlled"].text == f"{100 * acc:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"
        assert heads[head]["Length-controlled"].anchor == "length-bias"
    assert heads["gpm"]["Length-controlled"].mark == "best_unresolved"  # bgpm's interval reaches 76


def test_a_board_keeps_each_cells_n_when_the_trees_behind_its_figures_differ():
    """shared_n strips "(n=k)" only when every figure on the board has the same k (a tree missing one figure
    keeps every cell's own n), and leaves cells without a figure alone."""
    from prefpipe.report.document import Cell
    from prefpipe.report.scoreboard.across import shared_n

    same = [[Cell("gpm", "a"), Cell("78.5 ± 1.2 (n=3)", "a", "best")], [Cell("bt", "a"), Cell("–", "a")]]
    rows, n = shared_n(same)
    assert n == 3 and [[c.text for c in r] for r in rows] == [["gpm", "78.5 ± 1.2"], ["bt", "–"]]
    assert rows[0][1].mark == "best"
    mixed = [
        [Cell("gpm", "a"), Cell("78.5 ± 1.2 (n=3)", "a")],
        [Cell("bt", "a"), Cell("70.1 ± 0.4 (n=2)", "a")],
    ]
    rows, n = shared_n(mixed)
    assert n is None and rows is mixed
