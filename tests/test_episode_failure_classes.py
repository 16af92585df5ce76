"""The failure classes of held-out episodes (grpo/analyses/episode_failures.py) on hand-built episodes: real
calls through the search environment over a hand-written two-hop row, each episode's class written by hand,
then the counts, shares and limits of the table counted by hand."""

from __future__ import annotations

import pytest

from prefpipe.data.verifier import score
from prefpipe.grpo.analyses.episode_failures import (
    CLASSES,
    EpisodeOutcome,
    classify,
    failure_table,
)
from prefpipe.grpo.environments.base import EnvironmentRunner, ToolCall
from prefpipe.grpo.environments.search import Search
from prefpipe.grpo.policy_eval.episodes import EpisodeCompletions, outcomes, valid_calls
from prefpipe.grpo.rollout.episodes.episode import Episode
from prefpipe.grpo.rollout.episodes.measures import answer_found, support_recall, supporting_titles

ROW = {
    "answer": "Stanley",
    "aliases": ["Stanley, North Dakota"],
    "paragraphs": [
        {
            "title": "Van Hook Township",
            "text": "Van Hook Township is in Mountrail County.",
            "is_supporting": True,
        },
        {"title": "Mountrail County", "text": "Its seat is Stanley.", "is_supporting": True},
        {
            "title": "Port Blair",
            "text": "Port Blair is a capital in the Andaman Islands.",
            "is_supporting": False,
        },
        {"title": "Stanley Cup", "text": "A hockey trophy named after Lord Stanley.", "is_supporting": False},
    ],
}
S = ToolCall("search", "")
# (calls as the policy wrote them, final answer, the class written by hand)
EPISODES = [
    (
        [ToolCall("search", "Van Hook Township"), ToolCall("search", "Mountrail County seat")],
        "Stanley",
        "correct",
    ),
    ([], "stanley, north dakota", "correct"),  # right without searching: correct first
    ([], "Bismarck", "no_search"),
    ([ToolCall("", "", malformed="the turn opened <search> and never closed it")], "Bismarck", "no_search"),
    ([ToolCall("lookup", "Van Hook")], None, "no_search"),  # an unknown tool is no valid call
    ([ToolCall("search", "Andaman capital")], "Port Blair", "no_support"),
    ([ToolCall("search", "Van Hook Township")], "Mountrail County", "support_no_answer"),  # one hop of two
    (
        [ToolCall("search", "Van Hook Township"), ToolCall("search", "Mountrail seat")],
        "Minot",
        "answer_seen_wrong",
    ),
    ([ToolCall("search", "Mountrail County seat")], None, "answer_seen_missing"),
    ([ToolCall("search", "hockey trophy Stanley")], "Lord", "answer_seen_wrong"),  # answer in a distractor
]


def _run(calls: list[ToolCall], answer: str | None) -> tuple[Episode, list[str]]:
    search = Search("row", top_k=1, k1=1.5, b=0.75)
    runner = EnvironmentRunner(search, 400)
    runner.reset(ROW)
    ep = Episode(answer=answer, finish="answer" if answer is not None else "turn_limit")
    for call in calls:
        ep.calls.append(call)
        ep.observations.append(runner.run(call))
    return ep, list(search.retrieved)


def _completions() -> tuple[EpisodeCompletions, list[bool]]:
    comp, correct = EpisodeCompletions(), []
    for calls, answer, _ in EPISODES:
        ep, retrieved = _run(calls, answer)
        comp.answers.append(ep.answer)
        comp.calls.append(len(ep.calls))
        comp.recall.append(support_recall(supporting_titles(ROW), retrieved))
        comp.valid_calls.append(valid_calls(ep))
        comp.found.append(answer_found(ep, [ROW["answer"], *ROW["aliases"]]))
        correct.append(score("exact_match", ROW["answer"], answer or "", ROW["aliases"]) == 1.0)
    return comp, correct


def test_each_hand_built_episode_gets_its_hand_written_class():
    comp, correct = _completions()
    assert comp.valid_calls == [2, 0, 0, 0, 0, 1, 1, 2, 1, 1]
    assert comp.recall == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 1.0, 0.5, 0.0]
    assert [classify(o) for o in outcomes(comp, correct)] == [want for _, _, want in EPISODES]


def test_the_table_counts_shares_and_limits_by_hand():
    comp, correct = _completions()
    table = failure_table(outcomes(comp, correct))
    assert table["n"] == 10 and set(table["counts"]) == set(CLASSES)
    assert table["counts"] == {
        "correct": 2,
        "no_search": 3,
        "no_support": 1,
        "support_no_answer": 1,
        "answer_seen_missing": 1,
        "answer_seen_wrong": 2,
    }
    assert table["shares"]["no_search"] == pytest.approx(0.3)
    # search: 3 + 1 + 1 of 10; reading: 2 of 10; answering: 1 of 10 (with correct, all 10)
    assert table["limits"] == pytest.approx({"search": 0.5, "reading": 0.2, "answering": 0.1})
    assert sum(table["limits"].values()) + table["shares"]["correct"] == pytest.approx(1.0)


def test_a_row_without_supporting_paragraphs_counts_as_no_support_retrieved():
    outcome = EpisodeOutcome(
        correct=False, valid_calls=1, support_recall=None, answer_found=False, answered=True
    )
    assert classify(outcome) == "no_support"
    assert failure_table([])["shares"]["correct"] is None
