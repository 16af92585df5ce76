"""The plain engine's episodes: P prompts x G rows decoded in lockstep, policy turns and environment turns
alternating, each row's KV cache kept across its turns.

One cache holds every row. A policy step feeds one token per row; an environment step feeds each row's result
tokens as one chunk, left-aligned and padded to the longest. Rows that are not writing at a step (waiting for
the environment, finished, or shorter than the chunk) feed a pad with attention 0, so the cache gets holes that
no later token attends to; position ids count attended tokens only. The next token of a row is drawn from the
logits at its last real position. So a row's tokens depend only on its own sequence, never on the others' turns
(tests/test_episodes.py checks the tokens against a full re-encode of each row at every step).

Sampling follows grpo/rollout/sampling.py: row i's k-th POLICY token uses `uniforms[i, k]`; None = greedy.
What a token does to its episode (a turn ends, a call is answered, the limits) is turns.py's, shared with the
vLLM engine's episodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from prefpipe.common.torch_runtime.transformers_api import cache_kwargs, output_cache
from prefpipe.grpo.environments.base import EnvironmentRunner
from prefpipe.grpo.rollout.episodes.episode import POLICY, Episode
from prefpipe.grpo.rollout.episodes.format import ToolFormat
from prefpipe.grpo.rollout.episodes.turns import (
    DONE,
    EpisodeLimits,
    EpisodeRow,
    Sampling,
    TurnRules,
    answer_call,
    start_rows,
    take_policy_token,
)
from prefpipe.grpo.rollout.sampling import pick_tokens, prefill

__all__ = ["EpisodeLimits", "Sampling", "decode_episodes"]


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


def _policy_turns(
    model, state: _Cache, rows: list[EpisodeRow], rules: TurnRules, pad: int, sampling: Sampling
) -> None:
    """Step every row that is writing until none is: each ends at a call, an answer, EOS or a limit."""
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
                take_policy_token(row, token, rules)
        if any(r.state != DONE for r, on in zip(rows, active, strict=True) if on):
            bits = torch.tensor(active, dtype=torch.long, device=device)[:, None]
            ids = torch.tensor(
                [t if on else pad for t, on in zip(picked, active, strict=True)], device=device
            )
            state.feed(model, ids[:, None], bits)


def _environment_turns(model, state: _Cache, rows: list[EpisodeRow], rules: TurnRules, pad: int) -> None:
    """Run every waiting call, append its rendered observation (cut to the episode's budget), feed them."""
    results = [answer_call(row, rules) for row in rows]
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
    live = start_rows(runners, rows, group)
    rules = TurnRules(fmt, tokenizer, frozenset(eos_ids), limits)
    while any(r.state != DONE for r in live):
        _policy_turns(model, state, live, rules, pad_id, sampling)
        _environment_turns(model, state, live, rules, pad_id)
    return [r.episode for r in live]
