"""eval_policy's multi-turn mode (grpo.<run>.episodes.enabled): each held-out question is answered by a whole
episode of the policy through the run's own environment, tool format and limits, as training rolls them out.

The graded text is the episode's final answer ("" when it gave none), what the run's rewards score; the text
kept per example is the whole episode after the prompt. Besides exact match (the row's verifier), an episode
gives token F1 of its answer (SQuAD's, with the row's aliases), its tool calls and the share of the row's
supporting paragraphs it retrieved (support recall; None for rows without supporting paragraphs).
Greedy decoding is deterministic; sampled decoding draws each batch's uniforms from the run's seed and the batch
number, so the result does not depend on the order of the batches before it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from prefpipe.common.chat import conversation
from prefpipe.common.progress import progress
from prefpipe.common.stats import paired_difference
from prefpipe.grpo.analyses.episode_failures import EpisodeOutcome, failure_table
from prefpipe.grpo.environments.base import ENVIRONMENT_ERROR, MALFORMED_CALL, UNKNOWN_TOOL, EnvironmentRunner
from prefpipe.grpo.environments.registry import build_environment
from prefpipe.grpo.policy_eval.measures import Completions
from prefpipe.grpo.rollout.episodes.decode import EpisodeLimits, Sampling
from prefpipe.grpo.rollout.episodes.episode import Episode
from prefpipe.grpo.rollout.episodes.generate import generate_episodes
from prefpipe.grpo.rollout.episodes.measures import answer_found, support_recall, supporting_titles
from prefpipe.grpo.rollout.episodes.tool_formats import build_tool_format
from prefpipe.settings.grpo import GrpoSettings


@dataclass
class EpisodeCompletions(Completions):
    """Completions (texts: whole episodes) with what an episode adds: its answer, calls and support recall."""

    answers: list[str | None] = field(default_factory=list)  # None: the episode gave no answer
    calls: list[int] = field(default_factory=list)
    recall: list[float | None] = field(default_factory=list)
    valid_calls: list[int] = field(
        default_factory=list
    )  # calls the environment ran (not malformed or failed)
    found: list[bool] = field(default_factory=list)  # a result held the answer or an alias

    def graded(self) -> list[str]:
        return [a or "" for a in self.answers]


FAILED_CALLS = (MALFORMED_CALL, UNKNOWN_TOOL, ENVIRONMENT_ERROR)


def valid_calls(episode: Episode) -> int:
    """Calls the environment ran: not malformed, a known tool, and the tool did not raise."""
    return sum(obs.kind not in FAILED_CALLS for obs in episode.observations)


def _runner_factory(settings: GrpoSettings):
    ep = settings.episodes
    spec = ep.environment_spec()
    return lambda: EnvironmentRunner(build_environment(spec), ep.max_result_chars)


def _sampling(settings: GrpoSettings, decoding: str, n: int, batch: int) -> Sampling:
    """Greedy, or eval.temperature / eval.top_p with uniforms seeded by the run's seed and the batch number."""
    ev = settings.eval
    if decoding != "sampled":
        return Sampling(None, 1.0, 0, 1.0)
    gen = torch.Generator().manual_seed(settings.seed * 100_003 + batch)
    uniforms = torch.rand(n, settings.episodes.max_episode_tokens, generator=gen)
    return Sampling(uniforms, ev.temperature, 0, ev.top_p)


@torch.no_grad()
def complete_episodes(
    model, tokenizer, rows: list[Mapping[str, Any]], settings: GrpoSettings, decoding: str, label: str
) -> EpisodeCompletions:
    """One episode per row (greedy or sampled), in batches of eval.batch_size rows."""
    ep, ev = settings.episodes, settings.eval
    tools = build_environment(ep.environment_spec()).tools
    fmt = build_tool_format(ep.tool_format, tokenizer, tools, f"grpo.{settings.run}.episodes.tool_format")
    limits = EpisodeLimits(ep.max_turns, ep.max_turn_tokens, ep.max_episode_tokens)
    make_runner, out = _runner_factory(settings), EpisodeCompletions()
    starts = range(0, len(rows), ev.batch_size)
    for b, start in enumerate(progress(starts, len(starts), label)):
        chunk = list(rows[start : start + ev.batch_size])
        prompts = [conversation(dict(r)) for r in chunk]
        sampling = _sampling(settings, decoding, len(chunk), b)
        batch = generate_episodes(
            model, tokenizer, chunk, prompts, 1, make_runner, fmt, limits, sampling, ev.max_prompt_length
        )
        for row, episode, got in zip(chunk, batch.episodes, batch.retrieved, strict=True):
            out.texts.append(tokenizer.decode(episode.ids, skip_special_tokens=True))
            out.lengths.append(len(episode.ids))
            out.truncated.append(episode.truncated)
            out.answers.append(episode.answer)
            out.calls.append(len(episode.calls))
            out.recall.append(support_recall(supporting_titles(row), got or []))
            out.valid_calls.append(valid_calls(episode))
            answers = [row["answer"], *row.get("aliases", [])] if row.get("answer") is not None else []
            out.found.append(answer_found(episode, answers))
    return out


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def episode_block(comp: EpisodeCompletions, f1: list[float]) -> dict[str, Any]:
    """A policy's episode figures under one decoding: token F1, calls per episode, support recall, answered."""
    n = max(len(comp.answers), 1)
    return {
        "f1": sum(f1) / n,
        "calls_per_episode": sum(comp.calls) / n,
        "support_recall": _mean(comp.recall),
        "answered": sum(a is not None for a in comp.answers) / n,
    }


def token_f1(rows: list[dict], comp: Completions) -> list[float]:
    """SQuAD token F1 of each graded answer against its row's answer and aliases (the best of them)."""
    from prefpipe.data.verifier import score

    return [score("token_f1", r["answer"], a, r["aliases"]) for r, a in zip(rows, comp.graded(), strict=True)]


def outcomes(comp: EpisodeCompletions, correct: list[bool]) -> list[EpisodeOutcome]:
    """What the failure classes read of each episode (grpo/analyses/episode_failures.py)."""
    return [
        EpisodeOutcome(ok, calls, recall, found, answer is not None)
        for ok, calls, recall, found, answer in zip(
            correct, comp.valid_calls, comp.recall, comp.found, comp.answers, strict=True
        )
    ]


def episode_comparison(
    settings: GrpoSettings,
    comps: dict[str, EpisodeCompletions],
    rows: list[dict],
    correct: dict[str, list[bool]],
) -> dict:
    """Base and trained episode figures under one decoding, and trained - base paired over the questions (the
    bootstrap interval of eval_policy's accuracy): token F1, tool calls per episode and, over the questions
    with supporting paragraphs, support recall; and each side's failure classes (what limits it)."""
    ev = settings.eval

    def paired(trained: list[float], base: list[float]) -> dict[str, Any] | None:
        if not trained:
            return None
        return paired_difference(trained, base, ev.bootstrap_samples, ev.confidence, settings.seed)

    f1 = {name: token_f1(rows, c) for name, c in comps.items()}
    base, trained = comps["base"], comps["trained"]
    both = [
        (t, b) for t, b in zip(trained.recall, base.recall, strict=True) if t is not None and b is not None
    ]
    return {
        **{name: episode_block(c, f1[name]) for name, c in comps.items()},
        "f1_paired": paired(f1["trained"], f1["base"]),
        "calls_paired": paired([float(c) for c in trained.calls], [float(c) for c in base.calls]),
        "support_recall_paired": paired([t for t, _ in both], [b for _, b in both]),
        "failures": {name: failure_table(outcomes(c, correct[name])) for name, c in comps.items()},
    }


def episode_columns(rows: list[dict], comps: dict[str, Completions]) -> list[dict[str, Any]]:
    """Per question, each side's answer, token F1, tool calls (all and valid), support recall and whether a
    result held the answer (empty rows: not episodes)."""
    if not all(isinstance(c, EpisodeCompletions) for c in comps.values()):
        return [{} for _ in rows]
    f1 = {name: token_f1(rows, c) for name, c in comps.items()}
    return [
        {
            key: value
            for name, c in comps.items()
            for key, value in (
                (f"{name}_answer", c.answers[i]),
                (f"{name}_f1", f1[name][i]),
                (f"{name}_calls", c.calls[i]),
                (f"{name}_support_recall", c.recall[i]),
                (f"{name}_valid_calls", c.valid_calls[i]),
                (f"{name}_answer_found", c.found[i]),
            )
        }
        for i in range(len(rows))
    ]
