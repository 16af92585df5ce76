"""An episode's turn bookkeeping, shared by every engine that rolls out episodes (the plain engine's batched
decode, decode.py; the vLLM engine's, engines/vllm_episodes.py): a policy token goes into the episode and may
end the turn (a call, an answer, EOS or a limit), and a waiting call is run by the environment and its result
tokens go in, cut to the episode's budget. The engines differ only in how they produce the next policy token and
feed the tokens back; what a token does to the episode is decided here, so both engines end turns and episodes
at the same tokens.

Limits: `max_turns` policy turns, `max_turn_tokens` tokens in one policy turn, `max_episode_tokens` tokens after
the prompt (policy and environment together). A result that does not fit in the episode's budget is cut to fit
(counted in `Episode.context_cut`, H04) and ends the episode.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from prefpipe.grpo.environments.base import EnvironmentRunner
from prefpipe.grpo.rollout.episodes.episode import (
    ANSWERED,
    ENVIRONMENT,
    NO_CALL,
    POLICY,
    TOKEN_LIMIT,
    TURN_LIMIT,
    Episode,
)
from prefpipe.grpo.rollout.episodes.format import ANSWER, CALL, ToolFormat

DONE = "done"


@dataclass(frozen=True)
class EpisodeLimits:
    max_turns: int
    max_turn_tokens: int
    max_episode_tokens: int


@dataclass(frozen=True)
class Sampling:
    uniforms: torch.Tensor | None  # (N, max_episode_tokens) in [0, 1); None = greedy
    temperature: float
    top_k: int
    top_p: float


@dataclass
class EpisodeRow:
    """One row's running episode: its environment, the current policy turn, and whose move it is."""

    episode: Episode
    runner: EnvironmentRunner
    turn: list[int] = field(default_factory=list)  # the current policy turn's tokens
    state: str = POLICY  # policy | environment (a call waits) | done
    policy_tokens: int = 0


@dataclass(frozen=True)
class TurnRules:
    """What reads a turn: the tool format, the tokenizer that decodes it, the EOS ids and the limits."""

    fmt: ToolFormat
    tokenizer: object
    eos: frozenset[int]
    limits: EpisodeLimits


def start_rows(runners: list[EnvironmentRunner], rows: list, group: int) -> list[EpisodeRow]:
    """A fresh episode per runner, each runner reset with the task row of its prompt (`rows[i // group]`)."""
    out = []
    for i, runner in enumerate(runners):
        runner.reset(rows[i // group])
        out.append(EpisodeRow(Episode(), runner))
    return out


def turn_room(row: EpisodeRow, limits: EpisodeLimits) -> int:
    """Most policy tokens the row's current turn may still add (its turn and episode budgets)."""
    return min(limits.max_turn_tokens - len(row.turn), limits.max_episode_tokens - len(row.episode.ids))


def take_policy_token(row: EpisodeRow, token: int, rules: TurnRules) -> None:
    """Append a sampled token to the row's episode and turn; then does the turn end, and how?"""
    row.episode.add(POLICY, [token])
    row.turn.append(token)
    row.policy_tokens += 1
    _end_turn(row, rules, token in rules.eos)


def _end_turn(row: EpisodeRow, rules: TurnRules, at_eos: bool) -> None:
    """After a policy token: does the turn end, and how (a call waits for the environment)?"""
    end = rules.fmt.turn_end(rules.tokenizer.decode(row.turn, skip_special_tokens=True), at_eos)
    ep, limits = row.episode, rules.limits
    out_of_room = len(row.turn) >= limits.max_turn_tokens or len(ep.ids) >= limits.max_episode_tokens
    if end is None and not out_of_room:
        return
    row.turn = []
    if end is None:
        row.state, ep.finish = DONE, TOKEN_LIMIT
    elif end.kind == ANSWER:
        row.state, ep.finish, ep.answer = DONE, ANSWERED, end.answer
    elif end.kind != CALL:
        row.state, ep.finish = DONE, NO_CALL
    elif ep.turns >= limits.max_turns:
        row.state, ep.finish = DONE, TURN_LIMIT
    elif len(ep.ids) >= limits.max_episode_tokens:
        row.state, ep.finish = DONE, TOKEN_LIMIT
    else:
        row.state = ENVIRONMENT
        ep.calls.append(end.call)


def answer_call(row: EpisodeRow, rules: TurnRules) -> list[int]:
    """Run the row's waiting call and append its rendered observation, cut to the episode's budget (then the
    episode ends); the result's token ids ([] for a row that was not waiting)."""
    if row.state != ENVIRONMENT:
        return []
    ep, limits = row.episode, rules.limits
    obs = row.runner.run(ep.calls[-1])
    ep.observations.append(obs)
    ids = rules.tokenizer.encode(rules.fmt.render(obs), add_special_tokens=False)
    room = limits.max_episode_tokens - len(ep.ids)
    if len(ids) >= room:
        ep.context_cut += len(ids) - room
        ids, row.state, ep.finish = ids[:room], DONE, TOKEN_LIMIT
    else:
        row.state = POLICY
    ep.add(ENVIRONMENT, ids)
    return ids
