"""The plain engine's episodes: P prompts x G rows decoded in lockstep, policy turns and environment turns
alternating, each row's KV cache kept across its turns.

One cache holds every row. A policy step feeds one token per row; an environment step feeds each row's result
tokens as one chunk, left-aligned and padded to the longest. Rows that are not writing at a step (waiting for
the environment, finished, or shorter than the chunk) feed a pad with attention 0, so the cache gets holes that
no later token attends to; position ids count attended tokens only. The next token of a row is drawn from the
logits at its last real position. So a row's tokens depend only on its own sequence, never on the others' turns
(tests/test_episodes.py checks the tokens against a full re-encode of each row at every step).

Sampling follows grpo/rollout/sampling.py: row i's k-th POLICY token uses `uniforms[i, k]`; None = greedy.
Limits: `max_turns` policy turns, `max_turn_tokens` tokens in one policy turn, `max_episode_tokens` tokens after
the prompt (policy and environment together). A result that does not fit in the episode's budget is cut to fit
(counted in `Episode.context_cut`, H04) and ends the episode.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from prefpipe.common.torch_runtime.transformers_api import cache_kwargs, output_cache
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
from prefpipe.grpo.rollout.sampling import pick_tokens, prefill


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
class _Row:
    episode: Episode
    runner: EnvironmentRunner
    turn: list[int]  # the current policy turn's tokens
    state: str = POLICY  # policy | environment (a call waits) | done
    policy_tokens: int = 0


@dataclass
class _Cache:
    cache: object
    logits: torch.Tensor  # (N, V) next-token logits of each row
    attn: torch.Tensor  # (N, S) attention over everything fed so far (holes = 0)
    next_pos: torch.Tensor  # (N,)

    def feed(self, model: torch.nn.Module, ids: torch.Tensor, bits: torch.Tensor) -> None:
        """Feed (N, W) tokens whose real ones (bits 1) are left-aligned; a row with none keeps its logits."""
        attn = torch.cat([self.attn, bits], dim=1)
        position = self.next_pos[:, None] + (bits.cumsum(1) - 1).clamp(min=0)
        out = model(
            input_ids=ids, attention_mask=attn, position_ids=position, **cache_kwargs(model, self.cache)
        )
        n = bits.sum(1)
        last = out.logits[torch.arange(ids.shape[0], device=ids.device), (n - 1).clamp(min=0)]
        self.logits = torch.where((n > 0)[:, None], last, self.logits)
        self.attn, self.next_pos, self.cache = attn, self.next_pos + n, output_cache(out)


def _end_turn(row: _Row, fmt: ToolFormat, tokenizer, at_eos: bool, limits: EpisodeLimits) -> None:
    """After a policy token: does the turn end, and how (a call waits for the environment)?"""
    end = fmt.turn_end(tokenizer.decode(row.turn, skip_special_tokens=True), at_eos)
    ep = row.episode
    out_of_room = len(row.turn) >= limits.max_turn_tokens or len(ep.ids) >= limits.max_episode_tokens
    if end is None and not out_of_room:
        return
    row.turn = []
    if end is None:
        row.state, ep.finish = "done", TOKEN_LIMIT
    elif end.kind == ANSWER:
        row.state, ep.finish, ep.answer = "done", ANSWERED, end.answer
    elif end.kind != CALL:
        row.state, ep.finish = "done", NO_CALL
    elif ep.turns >= limits.max_turns:
        row.state, ep.finish = "done", TURN_LIMIT
    elif len(ep.ids) >= limits.max_episode_tokens:
        row.state, ep.finish = "done", TOKEN_LIMIT
    else:
        row.state = ENVIRONMENT
        ep.calls.append(end.call)


def _policy_turns(model, state: _Cache, rows: list[_Row], ctx: tuple, sampling: Sampling) -> None:
    """Step every row that is writing until none is: each ends at a call, an answer, EOS or a limit."""
    fmt, tokenizer, eos, pad, limits = ctx
    device = state.logits.device
    while any(r.state == POLICY for r in rows):
        active = [r.state == POLICY for r in rows]
        u = None
        if sampling.uniforms is not None:
            cols = torch.tensor([min(r.policy_tokens, sampling.uniforms.shape[1] - 1) for r in rows])
            u = sampling.uniforms[torch.arange(len(rows)), cols].to(device)
        picked = pick_tokens(state.logits, u, sampling.temperature, sampling.top_k, sampling.top_p).tolist()
        for row, on, token in zip(rows, active, picked, strict=True):
            if on:
                row.episode.add(POLICY, [token])
                row.turn.append(token)
                row.policy_tokens += 1
                _end_turn(row, fmt, tokenizer, token in eos, limits)
        if any(r.state != "done" for r, on in zip(rows, active, strict=True) if on):
            bits = torch.tensor(active, dtype=torch.long, device=device)[:, None]
            ids = torch.tensor(
                [t if on else pad for t, on in zip(picked, active, strict=True)], device=device
            )
            state.feed(model, ids[:, None], bits)


def _environment_turns(model, state: _Cache, rows: list[_Row], ctx: tuple) -> None:
    """Run every waiting call, append its rendered observation (cut to the episode's budget), feed them."""
    fmt, tokenizer, _eos, pad, limits = ctx
    results: list[list[int]] = []
    for row in rows:
        ids: list[int] = []
        if row.state == ENVIRONMENT:
            ep = row.episode
            obs = row.runner.run(ep.calls[-1])
            ep.observations.append(obs)
            ids = tokenizer.encode(fmt.render(obs), add_special_tokens=False)
            room = limits.max_episode_tokens - len(ep.ids)
            if len(ids) >= room:
                ep.context_cut += len(ids) - room
                ids, row.state, ep.finish = ids[:room], "done", TOKEN_LIMIT
            else:
                row.state = POLICY
            ep.add(ENVIRONMENT, ids)
        results.append(ids)
    if any(r.state == POLICY for r in rows):
        width = max(len(ids) for ids in results)
        device = state.logits.device
        chunk = torch.full((len(rows), width), pad, dtype=torch.long, device=device)
        bits = torch.zeros_like(chunk)
        for i, ids in enumerate(results):
            chunk[i, : len(ids)] = torch.tensor(ids, dtype=torch.long, device=device)
            bits[i, : len(ids)] = 1
        state.feed(model, chunk, bits)


@torch.no_grad()
def decode_episodes(
    model: torch.nn.Module,
    tokenizer,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    runners: list[EnvironmentRunner],
    rows: list[dict],
    fmt: ToolFormat,
    limits: EpisodeLimits,
    sampling: Sampling,
    eos_ids: list[int],
    pad_id: int,
) -> list[Episode]:
    """Episodes for P left-padded prompts, G rows each (prompt-major; G = len(runners) / P). `runners[i]`
    answers row i's calls and is reset with `rows[i // G]`, the task row of its prompt."""
    group = len(runners) // prompt_ids.shape[0]
    state = _Cache(*prefill(model, prompt_ids, prompt_mask, group))
    live = []
    for i, runner in enumerate(runners):
        runner.reset(rows[i // group])
        live.append(_Row(Episode(), runner, []))
    ctx = (fmt, tokenizer, set(eos_ids), pad_id, limits)
    while any(r.state != "done" for r in live):
        _policy_turns(model, state, live, ctx, sampling)
        _environment_turns(model, state, live, ctx)
    return [r.episode for r in live]
