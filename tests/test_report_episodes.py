"""The report's multi-turn section and scoreboard board on a results tree with one multi-turn run beside the
single-turn ones: the before/after table and the board show eval_policy's figures (read back from report.md
and compared number by number), the diagnostics table's first and last steps are the metrics' means and the
wrong mask's row fires at the step it starts; a tree without episodes has no such section or board."""

from __future__ import annotations

import pytest
from support.episode_tree import (
    NUMBER,
    check_paired_table,
    episode_metrics,
    scoreboard_row,
    write_episode_run,
)
from support.markdown_tables import tables, texts
from support.results_tree import QUALITY, RUNS, report_markdown, write_results_tree

from prefpipe.report.inputs import Manifest

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
