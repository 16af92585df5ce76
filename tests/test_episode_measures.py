"""The episode measures against hand computations: support recall, answer found in a result, context length and
truncation per turn (H04), and the environment-token share of a step."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from prefpipe.grpo.environments.base import Observation
from prefpipe.grpo.metric_names import (
    EPISODE_ANSWER_FOUND,
    EPISODE_CONTEXT_TURN,
    EPISODE_ENV_TOKEN_SHARE,
    EPISODE_SUPPORT_RECALL,
    EPISODE_TRUNCATED_TURN,
)
from prefpipe.grpo.rollout.episodes.episode import ANSWERED, ENVIRONMENT, POLICY, TOKEN_LIMIT, Episode
from prefpipe.grpo.rollout.episodes.generate import EpisodeBatch
from prefpipe.grpo.rollout.episodes.measures import (
    answer_found,
    context_by_turn,
    step_measures,
    support_recall,
    supporting_titles,
    truncated_turn,
)


def _episode(parts: list[tuple[str, int]], finish: str, results: tuple[str, ...] = ()) -> Episode:
    ep = Episode(finish=finish)
    for owner, n in parts:
        ep.add(owner, [7] * n)
    ep.observations = [Observation(t) for t in results]
    return ep


ROW = {
    "answer": "Ada Lovelace",
    "aliases": ["Countess of Lovelace"],
    "paragraphs": [
        {"title": "A", "text": "x", "is_supporting": True},
        {"title": "B", "text": "y", "is_supporting": False},
        {"title": "C", "text": "z", "is_supporting": True},
    ],
}


def test_support_recall_by_hand():
    assert supporting_titles(ROW) == {"A", "C"}
    assert support_recall({"A", "C"}, ["B", "A", "A"]) == 0.5  # one of two, duplicates count once
    assert support_recall({"A", "C"}, ["C", "A"]) == 1.0
    assert support_recall({"A", "C"}, []) == 0.0
    assert support_recall(set(), ["A"]) is None


def test_answer_found_normalises_and_needs_whole_words():
    hit = _episode([(POLICY, 2)], ANSWERED, ("[1] X: the mentor was ADA LOVELACE.",))
    alias = _episode([(POLICY, 2)], ANSWERED, ("countess of lovelace, later",))
    partial = _episode([(POLICY, 2)], ANSWERED, ("Adam Lovelaces",))
    assert answer_found(hit, ["Ada Lovelace"])
    assert answer_found(alias, ["Ada Lovelace", "Countess of Lovelace"])
    assert not answer_found(partial, ["Ada Lovelace"])
    assert not answer_found(hit, [])


def test_context_and_truncation_per_turn_by_hand():
    # prompt 10; policy 5, env 20, policy 4, env 30 (cut), budget hit in environment turn 1
    ep = _episode([(POLICY, 5), (ENVIRONMENT, 20), (POLICY, 4), (ENVIRONMENT, 30)], TOKEN_LIMIT)
    assert context_by_turn(ep, 10) == [10 + 25, 10 + 59]
    assert truncated_turn(ep) == 1
    done = _episode([(POLICY, 6)], ANSWERED)
    assert context_by_turn(done, 8) == [14] and truncated_turn(done) is None
    rows = [ROW, ROW]
    out = step_measures([ep, done], rows, [["A"], None], [10, 8], max_turns=3)
    assert out[EPISODE_CONTEXT_TURN.format(turn=0)] == pytest.approx((35 + 14) / 2)
    assert out[EPISODE_CONTEXT_TURN.format(turn=1)] == pytest.approx(69)
    assert out[EPISODE_CONTEXT_TURN.format(turn=2)] is None  # no episode reached turn 2
    assert out[EPISODE_TRUNCATED_TURN.format(turn=0)] == 0.0
    assert out[EPISODE_TRUNCATED_TURN.format(turn=1)] == 1.0
    assert out[EPISODE_SUPPORT_RECALL] == 0.5  # the second row's environment retrieves nothing: skipped
    assert out[EPISODE_ANSWER_FOUND] == 0.0


def test_environment_token_share_by_hand():
    eps = [
        _episode([(POLICY, 5), (ENVIRONMENT, 20), (POLICY, 4)], ANSWERED),
        _episode([(POLICY, 11)], ANSWERED),
    ]
    rollout = torch.zeros(1)  # the share reads the episodes only
    m = EpisodeBatch(rollout, eps, Counter(), [None, None]).metrics()
    assert m[EPISODE_ENV_TOKEN_SHARE] == pytest.approx(20 / (29 + 11))
