"""The rollout-engine interface and the plain engine (prefpipe's own decode, grpo/rollout/completions.py)."""

from __future__ import annotations

from typing import Protocol

import torch

from prefpipe.grpo.rollout.completions import GenerationSettings, Rollout, generate
from prefpipe.grpo.rollout.episodes.generate import EpisodeDecoder, PlainDecoder
from prefpipe.settings.grpo import GrpoSettings


class RolloutEngine(Protocol):
    def generate(
        self,
        policy: torch.nn.Module,
        tokenizer,
        prompts: list[str],
        uniforms: torch.Tensor,
        seed: int,
        first_prompt: int = 0,
    ) -> Rollout:
        """G completions per prompt, prompt-major rows; `uniforms` fix the plain engine's samples, `seed` and
        `first_prompt` (the step's index of prompts[0], for data-parallel slices) an engine's own sampler."""
        ...

    def episode_decoder(self, policy: torch.nn.Module, seed: int, first_prompt: int = 0) -> EpisodeDecoder:
        """What rolls out a multi-turn step's episodes (grpo/rollout/episodes/generate.py): `seed` and
        `first_prompt` as for `generate`."""
        ...

    def sync(self, policy: torch.nn.Module, step: int) -> dict[str, float]:
        """Make the engine sample from `policy`'s current weights (after step `step`'s update; -1 = the
        starting weights) and prove it; the metrics of the sync. Raises when the proof fails."""
        ...

    def close(self) -> None: ...


class PlainEngine:
    """Samples with the policy module itself: nothing to sync, no separate log-probs."""

    def __init__(self, settings: GrpoSettings) -> None:
        self.settings = settings
        self.gen = GenerationSettings(
            settings.max_new_tokens,
            settings.temperature,
            settings.top_p,
            settings.top_k,
            True,
            fast=settings.fast_paths,
            compile_decode=settings.rollout.compile_decode,
        )

    def generate(
        self,
        policy: torch.nn.Module,
        tokenizer,
        prompts: list[str],
        uniforms: torch.Tensor,
        seed: int,
        first_prompt: int = 0,
    ) -> Rollout:
        s = self.settings
        return generate(
            policy, tokenizer, prompts, s.num_generations, self.gen, s.max_prompt_length, uniforms=uniforms
        )

    def episode_decoder(self, policy: torch.nn.Module, seed: int, first_prompt: int = 0) -> EpisodeDecoder:
        return PlainDecoder(policy)  # the uniforms of the step fix its samples, as for completions

    def sync(self, policy: torch.nn.Module, step: int) -> dict[str, float]:
        return {}

    def close(self) -> None:
        pass
