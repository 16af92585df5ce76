"""Episodes for a step's prompts: prompts written by the tool format (the tags: as single-turn rollouts are,
generation/tokens.py; chat_template: with the tool schemas), one environment runner per row, an engine's
decoder (the plain engine's batched decode, decode.py, by default; the vLLM engine's, engines/vllm_episodes.py),
the `Rollout` the trainer takes (episode.py; with the engine's own log-probs of the policy tokens when it
reports them) and the step's episode metrics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from prefpipe.generation.tokens import PromptBatch, eos_token_ids, pad_token_id, tokenize_prompts
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
from prefpipe.grpo.rollout.episodes.decode import decode_episodes
from prefpipe.grpo.rollout.episodes.episode import ANSWERED, ENVIRONMENT, Episode, episode_rollout
from prefpipe.grpo.rollout.episodes.format import ToolFormat
from prefpipe.grpo.rollout.episodes.turns import EpisodeLimits, Sampling


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


# an engine's episodes, each with its per-token log-probs of the sampled tokens (0 on environment tokens), or
# None when the engine reports none (the plain engine: the trainer's own log-probs are the sampler's)
Decoded = tuple[list[Episode], list[list[float]] | None]


class EpisodeDecoder(Protocol):
    def __call__(
        self,
        tokenizer,
        batch: PromptBatch,
        runners: list[EnvironmentRunner],
        rows: list[Mapping[str, Any]],
        fmt: ToolFormat,
        limits: EpisodeLimits,
        sampling: Sampling,
    ) -> Decoded:
        """Prompt-major episodes of the left-padded prompts `batch`, len(runners) / P per prompt."""
        ...


@dataclass(frozen=True)
class PlainDecoder:
    """The plain engine: the policy module decodes (eval mode while decoding, training mode restored)."""

    model: torch.nn.Module

    @torch.no_grad()
    def __call__(self, tokenizer, batch, runners, rows, fmt, limits, sampling) -> Decoded:
        model, device = self.model, next(self.model.parameters()).device
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
        return episodes, None


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
    decoder: EpisodeDecoder | None = None,
) -> EpisodeBatch:
    """group_size episodes for each (task row, prompt), decoded by `decoder` (None: the plain engine with
    `model`); the rollout lies on `model`'s device."""
    batch = tokenize_prompts(tokenizer, prompts, max_prompt_length, fmt.prompt)
    device = next(model.parameters()).device
    runners = [make_runner() for _ in range(len(prompts) * group_size)]
    decode = decoder or PlainDecoder(model)
    episodes, logprobs = decode(tokenizer, batch, runners, list(rows), fmt, limits, sampling)
    errors = sum((s.counts for s in runners), Counter())
    retrieved = [_retrieved(s.environment) for s in runners]
    rollout = episode_rollout(tokenizer, batch, group_size, episodes, pad_token_id(tokenizer), device)
    if logprobs is not None:
        rollout.sampler_logprobs = _padded(logprobs, rollout.completion_ids.shape[1]).to(device)
    return EpisodeBatch(rollout, episodes, errors, retrieved)


def _padded(rows: list[list[float]], width: int) -> torch.Tensor:
    out = torch.zeros(len(rows), width)
    for i, values in enumerate(rows):
        out[i, : len(values)] = torch.tensor(values, dtype=torch.float)
    return out


def _retrieved(environment) -> list[str] | None:
    """The titles a retrieving environment returned in its episode (`retrieved`, as search keeps them)."""
    got = getattr(environment, "retrieved", None)
    return None if got is None else list(got)
