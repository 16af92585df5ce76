"""The report's multi-turn section and scoreboard board on a results tree with one multi-turn run beside the
single-turn ones: the before/after table and the board show eval_policy's figures (read back from report.md
and compared number by number), the diagnostics table's first and last steps are the metrics' means and the
wrong mask's row fires at the step it starts; a tree without episodes has no such section or board; a comparison
of trees gives the multi-turn run its own board as mean ± sd over the trees."""

from __future__ import annotations

import numpy as np
import pytest
from support.episode_tree import (
    MEASURES,
    NUMBER,
    at_path,
    check_paired_table,
    episode_metrics,
    scoreboard_row,
    write_episode_run,
)
from support.markdown_tables import tables, texts
from support.results_tree import QUALITY, RUNS, report_markdown, write_results_tree
from support.settings import report_settings

from prefpipe.report.inputs import Manifest
from prefpipe.report.write import build

RUN, STEPS, WRONG_FROM = "search", 10, 6
TITLE = "GRPO with tools: multi-turn episodes"


def _build(tmp_path, with_episodes: bool) -> str:
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=3, grpo_steps=5)
    runs = list(RUNS)
    if with_episodes:
        write_episode_run(root, RUN, STEPS, WRONG_FROM)
        runs.append(RUN)
    return report_markdown(root, tmp_path / "report", Manifest.standard(list(QUALITY), runs, []))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> str:
    return _build(tmp_path_factory.mktemp("episodes"), with_episodes=True)


def _close(shown: list[float], want: list[float], tol: float) -> bool:
    return len(shown) == len(want) and all(abs(a - b) <= tol + 1e-9 for a, b in zip(shown, want, strict=True))


def test_the_section_and_board_show_the_summaries_figures(built, tmp_path):
    md = built
    assert f"## {TITLE}" in md
    summary = write_episode_run(tmp_path / "again", RUN, STEPS, WRONG_FROM)  # the same figures, written again
    assert check_paired_table(md, {RUN: summary}) == 2 * 4  # two decodings x four measures
    (paired,) = [t for t in tables(md) if t.header[:3] == ["Run", "Decoding", "Measure"]]
    words = {(r[1], r[2]): r[6] for r in paired.rows}
    assert words[("greedy", "tool calls per episode")] == "more"  # calls: where, not better or worse
    assert words[("greedy", "exact match")] == "improved"  # +0.375 [+0.275, +0.425]
    (claim,) = [t for t in texts(md) if t.startswith(f"Multi-turn run {RUN}, held-out episodes (greedy): ")]
    f1 = summary["decodings"]["greedy"]["episodes"]["f1_paired"]
    assert "token F1" in claim and "exact match" not in claim  # the policy section's claim has exact match
    assert f"({100 * f1['delta']:+.1f} pts [{100 * f1['ci'][0]:+.1f}, {100 * f1['ci'][1]:+.1f}])" in claim
    row = scoreboard_row(md, RUN)
    for decoding in ("greedy", "sampled"):
        paired = summary["decodings"][decoding]["paired"]
        shown = [float(x) / 100 for x in NUMBER.findall(row[f"Exact match, {decoding} [95%]"])]
        assert _close(shown, [paired["delta"], *paired["ci"]], 0.0005)
    calls = summary["decodings"]["greedy"]["episodes"]["calls_paired"]  # primary: greedy
    shown = [float(x) for x in NUMBER.findall(row["Tool calls per episode, primary [95%]"])]
    assert _close(shown, [calls["delta"], *calls["ci"]], 0.0005)  # +0.375 [+0.275, +0.425]: three decimals
    # the single-turn board keeps its own runs only; its answer-length and hacking columns stay there
    single = [t for t in tables(md) if t.header[:2] == ["Run", "Greedy change [95%]"]]
    assert single and RUN not in {r[0] for r in single[0].rows}
    assert "Hacked" not in row and "Answer length (tokens)" not in row


def test_the_diagnostics_table_is_the_metrics_first_and_last_steps(built):
    md = built
    (table,) = [t for t in tables(md) if t.header[:2] == ["Measure", "First 5 steps"]]  # 10 steps logged
    rows = {r[0]: r for r in table.rows}
    metrics = episode_metrics(STEPS, WRONG_FROM)

    def mean(key: str, part: list[dict]) -> float:
        return sum(r[key] for r in part) / len(part)

    for label, key in (
        ("tool calls per episode", "episode/calls_mean"),
        ("answered", "episode/answered_rate"),
    ):
        first, last = float(rows[label][1]), float(rows[label][2])
        assert abs(first - mean(key, metrics[:5])) < 1e-3 and abs(last - mean(key, metrics[-5:])) < 1e-3
    assert rows["loss tokens no policy segment holds (H02)"][3] == str(WRONG_FROM)
    assert rows["ended at the token budget (H04)"][3] == "2"  # above truncated_ratio_max (0.25) from step 2
    assert rows["policy turns per episode"][3] == "–"  # no limit: nothing fires
    assert "ended by the budget at turn 1" in rows  # turn rows up to the run's max_turns
    assert "context after turn 2 (tokens)" not in rows


def test_a_tree_without_episodes_has_no_multi_turn_section_or_board(tmp_path):
    md = _build(tmp_path, with_episodes=False)
    assert TITLE not in md
    assert not [t for t in tables(md) if t.header[:2] == ["Run", "Exact match, greedy [95%]"]]


def test_a_comparison_gives_multi_turn_runs_their_own_board_as_mean_and_sd_over_the_trees(tmp_path):
    """Three seeds' trees, each with the multi-turn run (its trained figures scaled per seed): the comparison's
    multi-turn board shows, per column, the mean ± sample sd over the trees of the summaries' trained - base
    (read back from report.md); the single-turn board keeps its own runs only and the multi-turn board has no
    answer-length or hacking column."""
    trees, summaries = [], []
    for seed, scale in ((0, 1.0), (1, 0.9), (2, 0.7)):
        root = tmp_path / f"seed-{seed}"
        write_results_tree(root, seed=seed, reward_steps=3, grpo_steps=4, experiment="seeds")
        summaries.append(write_episode_run(root, RUN, STEPS, WRONG_FROM, scale=scale, tree=("seeds", seed)))
        trees.append(root)
    compare = {f"seed-{i}": str(t) for i, t in enumerate(trees[1:], start=1)}
    cfg = report_settings({"figure_dpi": 50, "compare": compare}, experiment="seeds", seed=0)
    build(cfg, trees[0], tmp_path / "report", Manifest.standard(list(QUALITY), [*RUNS, RUN], []))
    md = (tmp_path / "report" / "report.md").read_text()
    (board,) = [t for t in tables(md) if t.header[:2] == ["Run", "Exact match, greedy"]]
    assert [r[0] for r in board.rows] == [RUN]
    row = dict(zip(board.header, board.rows[0], strict=True))
    columns = {f"Exact match, {d}": (d, "exact match") for d in ("greedy", "sampled")}
    columns |= {f"{m[0].upper()}{m[1:]}, primary": ("greedy", m) for m in MEASURES if m != "exact match"}
    assert list(row) == ["Run", *columns]  # no answer-length or hacking column
    for column, (decoding, measure) in columns.items():
        share = MEASURES[measure][2]
        deltas = [at_path(s["decodings"][decoding], MEASURES[measure][1])["delta"] for s in summaries]
        scale = 100 if share else 1
        mean, sd = scale * np.mean(deltas), scale * np.std(deltas, ddof=1)
        shown = [float(x) for x in NUMBER.findall(row[column])]
        assert _close(shown, [mean, sd], 0.05 if share else 0.0005), (column, row[column], mean, sd)
    # every figure over the same 3 trees: said once in the board's title, not in each cell
    assert "Multi-turn runs: held-out questions, trained − base, mean ± sd over 3 trees" in md
    assert len({round(d, 6) for d in deltas}) == 3  # the trees differ: the sd is not 0 by construction
    # marked only where every tree's interval lies above 0 (greedy: each tree's [delta - 0.1, delta + 0.05] with
    # delta >= 0.15); sampled at scale 0.7 straddles 0; tool calls are never marked
    marks = {c: row[c].split(" ")[0] for c in ("Exact match, greedy", "Exact match, sampled")}
    assert marks == {"Exact match, greedy": "▲", "Exact match, sampled": "≈"}
    assert row["Tool calls per episode, primary"][0] in "+-"
    single = [t for t in tables(md) if t.header[:2] == ["Run", "Greedy change"]]
    assert (
        single
        and RUN not in {r[0] for r in single[0].rows}
        and "gpm-verifier" in {r[0] for r in single[0].rows}
    )


def test_the_grpo_verdict_reads_the_single_turn_runs_beside_a_multi_turn_one(built):
    """The multi-turn run improves most (its held-out set is the multi-hop world's), yet "GRPO helped most"
    names a single-turn run: its change is on another task, shown on the multi-turn board."""
    verdict = next(line for line in built.splitlines() if line.startswith("- GRPO helped most: "))
    named = verdict.removeprefix("- GRPO helped most: ").split(",")[0]
    assert named in RUNS and named != RUN
    shown = float(verdict.split("held-out accuracy ")[1].split(" pts")[0])
    search = scoreboard_row(built, RUN)["Exact match, greedy [95%]"]
    assert float(search.split("+")[1].split(" pts")[0]) > shown  # without the rule, search would be named
