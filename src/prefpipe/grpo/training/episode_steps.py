"""A multi-turn run's rollouts (grpo.<run>.episodes): each prompt's G episodes on the run's engine (the plain
engine's decode, or the vLLM engine's through its episode decoder, grpo/rollout/engines/), what the rewards score (the final answer, "" when the episode gave none), and the step's episode metrics.

The rollout's completion is the whole episode after the prompt with the environment's tokens masked out of the
loss and the KL (env_mask 0, grpo/rollout/episodes/episode.py); rewards and group-relative advantages are per
episode, as for single-turn completions. The prompt is the row's own (a multi-turn task's prompt states the
tool format, as the data stage writes it). Episode metrics are over this process's rows.

After the update, `audit` checks what trained against the episodes themselves: the loss mask of the step's
spans (grpo/algorithm/spans.py, what the update trains) position by position against each episode's segments,
not against the rollout's env_mask (which is built from them, so a wrong env_mask would hide from a check that
reads it). `episode/env_trained_share` is the share of loss tokens that no policy segment holds (H02).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from prefpipe.common.chat import conversation
from prefpipe.grpo.algorithm.spans import Span, loss_spans
from prefpipe.grpo.environments.base import EnvironmentRunner
from prefpipe.grpo.environments.registry import build_environment
from prefpipe.grpo.metric_names import EPISODE_ENV_TRAINED_SHARE
from prefpipe.grpo.rollout.completions import Rollout
from prefpipe.grpo.rollout.episodes.decode import EpisodeLimits, Sampling
from prefpipe.grpo.rollout.episodes.episode import POLICY, Episode
from prefpipe.grpo.rollout.episodes.generate import EpisodeBatch, EpisodeDecoder, generate_episodes
from prefpipe.grpo.rollout.episodes.measures import step_measures
from prefpipe.grpo.rollout.episodes.tool_formats import build_tool_format
from prefpipe.settings.grpo import GrpoSettings


class EpisodeSteps:
    """Builds the run's environment and tool format for the policy's tokenizer (failing at construction,
    naming the key) and rolls out its episodes."""

    def __init__(self, settings: GrpoSettings, tokenizer) -> None:
        ep = settings.episodes
        self.settings, self.spec = settings, ep.environment_spec()
        try:
            tools = build_environment(self.spec).tools
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"grpo.{settings.run}.episodes ({ep.environment}): {exc}") from exc
        key = f"grpo.{settings.run}.episodes.tool_format"
        self.fmt = build_tool_format(ep.tool_format, tokenizer, tools, key)
        self.limits = EpisodeLimits(ep.max_turns, ep.max_turn_tokens, ep.max_episode_tokens)
        self.episodes: list[Episode] = []  # the last step's, rollout row order

    def decoder_of(self, engine, policy: torch.nn.Module, seed: int, first_prompt: int) -> EpisodeDecoder:
        """The run engine's episode decoder for a step; an engine without one is refused, naming the key."""
        make = getattr(engine, "episode_decoder", None)
        if make is None:
            s = self.settings
            raise ValueError(
                f"grpo.{s.run}.rollout.engine {s.rollout.engine!r} rolls out no episodes (it has no "
                "episode_decoder, grpo/rollout/engines/base.py): use plain or vllm, or episodes.enabled: false"
            )
        return make(policy, seed, first_prompt)

    def runner(self) -> EnvironmentRunner:
        return EnvironmentRunner(build_environment(self.spec), self.settings.episodes.max_result_chars)

    def generate(
        self,
        policy: torch.nn.Module,
        tokenizer,
        rows: list[Mapping[str, Any]],
        uniforms: torch.Tensor | None,
        group_size: int,
        temperature: float | None = None,
        decoder: EpisodeDecoder | None = None,
    ) -> EpisodeBatch:
        """group_size episodes per row; `uniforms` (rows x G, max_episode_tokens) fix the plain engine's samples,
        None = greedy; `decoder`: an engine's (None: the plain engine with `policy`)."""
        s = self.settings
        sampling = Sampling(uniforms, s.temperature if temperature is None else temperature, s.top_k, s.top_p)
        return generate_episodes(
            policy,
            tokenizer,
            list(rows),
            [conversation(dict(r)) for r in rows],
            group_size,
            self.runner,
            self.fmt,
            self.limits,
            sampling,
            s.max_prompt_length,
            decoder,
        )

    def step(
        self,
        policy: torch.nn.Module,
        tokenizer,
        rows: list[dict],
        uniforms: torch.Tensor,
        decoder: EpisodeDecoder | None = None,
    ) -> tuple[Rollout, list[str], dict[str, float]]:
        """A training step's (rollout, each episode's final answer, episode metrics), decoded by the run
        engine's `decoder` (None: the plain engine)."""
        G = self.settings.num_generations
        batch = self.generate(policy, tokenizer, rows, uniforms, G, decoder=decoder)
        self.episodes = batch.episodes
        metrics = batch.metrics()
        prompt_tokens = batch.rollout.prompt_mask.sum(1).tolist()
        per_row = [r for r in rows for _ in range(G)]
        measures = step_measures(
            batch.episodes, per_row, batch.retrieved, prompt_tokens, self.limits.max_turns
        )
        metrics.update({k: v for k, v in measures.items() if v is not None})  # a row holds numbers only
        return batch.rollout, [ep.answer or "" for ep in batch.episodes], metrics

    def audit(self, rollout: Rollout, settings: GrpoSettings) -> dict[str, float]:
        """The last step's loss tokens that no policy segment holds, as a share of its loss tokens, under
        `settings` (the step's own mask mode)."""
        spans = loss_spans(
            rollout, settings.mask_mode, settings.mask_truncated_completions, settings.micro_batch_size
        )
        wrong, total = not_policy_trained(spans, self.episodes)
        return {EPISODE_ENV_TRAINED_SHARE: wrong / max(total, 1)}


def not_policy_trained(spans: list[Span], episodes: list[Episode]) -> tuple[int, int]:
    """(loss-carrying completion positions whose token no policy segment holds, every loss position): a walk
    of each span's mask beside the owners of its rows' episodes (a position past the episode is not the
    policy's either)."""
    wrong = total = 0
    for sp in spans:
        total += int(sp.mask.sum())
        trained = sp.mask[:, sp.n_prompt :].tolist()
        for i, row in enumerate(range(sp.rows.start, sp.rows.stop)):
            owners = episodes[row].owners
            for j, on in enumerate(trained[i]):
                wrong += bool(on) and (j >= len(owners) or owners[j] != POLICY)
    return wrong, total
