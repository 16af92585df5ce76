"""Episodes for a step's prompts on the plain engine: prompts written by the tool format (the tags: as
single-turn rollouts are, generation/tokens.py; chat_template: with the tool schemas), one environment runner
per row, the batched decode (decode.py), the `Rollout` the trainer takes (episode.py) and the step's episode
metrics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from prefpipe.generation.tokens import eos_token_ids, pad_token_id, tokenize_prompts
from prefpipe.grpo.environments.base import ERROR_KINDS, EnvironmentRunner
from prefpipe.grpo.metric_names import (
    EPISODE_ANSWERED,
    EPISODE_CALLS,
    EPISODE_CONTEXT_CUT,
    EPISODE_ENV_ERRORS,
    EPISODE_ENV_TOKEN_SHARE,
    EPISODE_LENGTH_MAX,
    EPISODE_LENGTH_MEAN,
    EPISODE_TURNS,
)
from prefpipe.grpo.rollout.completions import Rollout
from prefpipe.grpo.rollout.episodes.decode import EpisodeLimits, Sampling, decode_episodes
from prefpipe.grpo.rollout.episodes.episode import ANSWERED, ENVIRONMENT, Episode, episode_rollout
from prefpipe.grpo.rollout.episodes.format import ToolFormat


@dataclass
class EpisodeBatch:
    rollout: Rollout  # the trainer's view: environment tokens have env_mask 0
    episodes: list[Episode]  # prompt-major, G per prompt
    errors: Counter  # environment failures by kind over every row
    retrieved: list[list[str] | None]  # per row: what its environment retrieved (None: it does not retrieve)

    def metrics(self) -> dict[str, float]:
        eps, n = self.episodes, max(len(self.episodes), 1)
        tokens = sum(len(e.ids) for e in eps)
        env_tokens = sum(e.owners.count(ENVIRONMENT) for e in eps)
        out = {
            EPISODE_TURNS: sum(e.turns for e in eps) / n,
            EPISODE_CALLS: sum(len(e.calls) for e in eps) / n,
            EPISODE_ENV_TOKEN_SHARE: env_tokens / max(tokens, 1),
            EPISODE_LENGTH_MEAN: tokens / n,
            EPISODE_LENGTH_MAX: float(max([len(e.ids) for e in eps] + [0])),
            EPISODE_CONTEXT_CUT: sum(e.context_cut > 0 for e in eps) / n,
            EPISODE_ANSWERED: sum(e.finish == ANSWERED for e in eps) / n,
        }
        out.update({EPISODE_ENV_ERRORS.format(kind=k): self.errors[k] / n for k in ERROR_KINDS})
        return out


@torch.no_grad()
def generate_episodes(
    model: torch.nn.Module,
    tokenizer,
    rows: list[Mapping[str, Any]],
    prompts: list[str],
    group_size: int,
    make_runner: Callable[[], EnvironmentRunner],
    fmt: ToolFormat,
    limits: EpisodeLimits,
    sampling: Sampling,
    max_prompt_length: int | None = None,
) -> EpisodeBatch:
    """group_size episodes for each (task row, prompt); eval mode while decoding, training mode restored."""
    batch = tokenize_prompts(tokenizer, prompts, max_prompt_length, fmt.prompt)
    device = next(model.parameters()).device
    runners = [make_runner() for _ in range(len(prompts) * group_size)]
    was_training = model.training
    model.eval()
    try:
        episodes = decode_episodes(
            model,
            tokenizer,
            batch.input_ids.to(device),
            batch.attention_mask.to(device),
            runners,
            list(rows),
            fmt,
            limits,
            sampling,
            eos_token_ids(tokenizer, model),
            pad_token_id(tokenizer),
        )
    finally:
        model.train(was_training)
    errors = sum((s.counts for s in runners), Counter())
    retrieved = [_retrieved(s.environment) for s in runners]
    rollout = episode_rollout(tokenizer, batch, group_size, episodes, pad_token_id(tokenizer), device)
    return EpisodeBatch(rollout, episodes, errors, retrieved)


def _retrieved(environment) -> list[str] | None:
    """The titles a retrieving environment returned in its episode (`retrieved`, as search keeps them)."""
    got = getattr(environment, "retrieved", None)
    return None if got is None else list(got)
