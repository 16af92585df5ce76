"""What an episode did, measured per episode and averaged per step: whether the retrieved paragraphs held the
question's supporting ones (support recall), whether a result contained the answer (so a wrong final answer
is a reading or answering failure, not a search one), and the context length and truncation at each turn (H04).

Definitions (tests/test_episode_measures.py checks each against a hand computation):
  support recall    |supporting titles retrieved| / |supporting titles| (an episode with no supporting titles
                    has none; the step's mean skips it)
  answer found      the SQuAD-normalised answer (or an alias) occurs as a whole-word run in the normalised text
                    of some observation of the episode
  context at turn k the prompt's tokens plus every episode token through policy turn k and its result (the
                    tokens the policy's next turn reads), over the episodes that reached turn k
  truncated at k    the episode ended at the token budget during policy turn k or its result
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prefpipe.data.answers import normalize_answer
from prefpipe.grpo.metric_names import (
    EPISODE_ANSWER_FOUND,
    EPISODE_CONTEXT_TURN,
    EPISODE_SUPPORT_RECALL,
    EPISODE_TRUNCATED_TURN,
)
from prefpipe.grpo.rollout.episodes.episode import Episode


def supporting_titles(row: Mapping[str, Any]) -> set[str]:
    """The row's supporting paragraph titles: `paragraphs[].is_supporting` (the multi-hop files' field)."""
    return {str(p.get("title") or "") for p in row.get("paragraphs", []) if p.get("is_supporting")}


def support_recall(supporting: set[str], retrieved: Sequence[str]) -> float | None:
    """Share of the supporting titles among the retrieved ones; None when there are no supporting titles."""
    if not supporting:
        return None
    return len(supporting & set(retrieved)) / len(supporting)


def answer_found(episode: Episode, answers: Sequence[str]) -> bool:
    """Whether any observation holds one of the answers (normalised, as whole words)."""
    wanted = [normalize_answer(a) for a in answers if normalize_answer(a)]
    for obs in episode.observations:
        text = f" {normalize_answer(obs.text)} "
        if any(f" {a} " in text for a in wanted):
            return True
    return False


def context_by_turn(episode: Episode, prompt_tokens: int) -> list[int]:
    """Context length after each policy turn and its result (index k = turn k)."""
    out: dict[int, int] = {}
    for seg in episode.segments:
        out[seg.turn] = prompt_tokens + seg.end
    return [out[k] for k in sorted(out)]


def truncated_turn(episode: Episode) -> int | None:
    """The turn at which the token budget ended the episode, or None."""
    if not episode.truncated or not episode.segments:
        return None
    return episode.segments[-1].turn


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def step_measures(
    episodes: Sequence[Episode],
    rows: Sequence[Mapping[str, Any]],
    retrieved: Sequence[Sequence[str] | None],
    prompt_tokens: Sequence[int],
    max_turns: int,
) -> dict[str, float | None]:
    """The step's means: support recall (None without supporting titles or a retrieving environment), answer
    found, and per turn k < max_turns the mean context length and the truncation rate of episodes that reached it."""
    recalls, found = [], []
    for ep, row, got in zip(episodes, rows, retrieved, strict=True):
        recall = None if got is None else support_recall(supporting_titles(row), got)
        if recall is not None:
            recalls.append(recall)
        answers = [row["answer"], *row.get("aliases", [])] if row.get("answer") is not None else []
        found.append(float(answer_found(ep, answers)))
    out: dict[str, float | None] = {
        EPISODE_SUPPORT_RECALL: _mean(recalls),
        EPISODE_ANSWER_FOUND: _mean(found),
    }
    contexts = [context_by_turn(ep, n) for ep, n in zip(episodes, prompt_tokens, strict=True)]
    cut = [truncated_turn(ep) for ep in episodes]
    for k in range(max_turns):
        reached = [i for i, c in enumerate(contexts) if len(c) > k]
        out[EPISODE_CONTEXT_TURN.format(turn=k)] = _mean([float(contexts[i][k]) for i in reached])
        out[EPISODE_TRUNCATED_TURN.format(turn=k)] = _mean([float(cut[i] == k) for i in reached])
    return out
