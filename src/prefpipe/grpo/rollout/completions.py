"""Rollouts: G sampled completions per prompt, and the masks that decide which tokens are trained.

Three masks stay separate tensors because they answer different questions:
  attention mask   which positions the model may attend to (prompt padding and post-EOS tokens are off)
  completion mask  which generated tokens belong to the answer: up to AND including the first EOS
  env mask         which completion tokens the policy produced itself (an environment or tool could insert
                   tokens that must not be trained on); every generated token here, so all ones
The loss mask is completion mask * env mask. Completions with no EOS within max_new_tokens are counted as
truncated, and prompts longer than max_prompt_length are cut from the left (keeping the generation prompt)
and counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from prefpipe.generation.tokens import PromptBatch, eos_token_ids, pad_token_id, tokenize_prompts
from prefpipe.grpo.rollout.fast.decode import decode_compact
from prefpipe.grpo.rollout.sampling import decode


@dataclass
class GenerationSettings:
    max_new_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off, so sampling follows the temperature-scaled distribution exactly
    do_sample: bool = True
    # The run's fast_paths (no default here: its one owner is config.yaml, so every caller passes it):
    # grpo/rollout/fast/decode.py, else the plain loop of grpo/rollout/sampling.py.
    fast: bool = field(kw_only=True)
    # grpo.<run>.rollout.compile_decode for the training rollouts of the plain engine (grpo/rollout/fast/
    # static_decode.py; fast only); none (the lean step uncompiled) wherever decoding is not a run's rollout
    compile_decode: str = field(default="none", kw_only=True)


@dataclass
class Rollout:
    prompt_ids: torch.Tensor  # (N, P) left padded, N = prompts * G, prompt-major
    prompt_mask: torch.Tensor  # (N, P)
    completion_ids: torch.Tensor  # (N, C)
    completion_mask: torch.Tensor  # (N, C) up to and including the first EOS
    env_mask: torch.Tensor  # (N, C) tokens the policy generated itself
    truncated: torch.Tensor  # (N,) bool: no EOS within max_new_tokens
    prompt_truncated: torch.Tensor  # (N,) bool
    texts: list[str]  # decoded completions up to the first EOS, special tokens removed
    # (N, C) the sampling engine's own log-prob of each completion token (a separate engine such as vLLM; None
    # when the policy module sampled them itself): the trainer logs the gap to its own and corrects for it
    sampler_logprobs: torch.Tensor | None = None

    @property
    def input_ids(self) -> torch.Tensor:
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)

    @property
    def loss_mask(self) -> torch.Tensor:
        return self.completion_mask * self.env_mask

    @property
    def lengths(self) -> torch.Tensor:
        return self.completion_mask.sum(dim=1)


def completion_mask(completion_ids: torch.Tensor, eos_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(mask up to and including the first EOS, has_eos per row); rows without EOS keep every token."""
    is_eos = torch.isin(completion_ids, torch.tensor(eos_ids, device=completion_ids.device))
    has_eos = is_eos.any(dim=1)
    width = completion_ids.shape[1]
    first = torch.where(
        has_eos, is_eos.float().argmax(dim=1), torch.full_like(has_eos, width, dtype=torch.long)
    )
    positions = torch.arange(width, device=completion_ids.device)[None, :]
    return (positions <= first[:, None]).long(), has_eos


def decode_completions(tokenizer, completion_ids: torch.Tensor, mask: torch.Tensor) -> list[str]:
    return [
        tokenizer.decode(ids[: int(n)].tolist(), skip_special_tokens=True)
        for ids, n in zip(completion_ids, mask.sum(dim=1), strict=True)
    ]


@torch.no_grad()
def generate(
    model,
    tokenizer,
    prompts: list[str],
    group_size: int,
    settings: GenerationSettings,
    max_prompt_length: int | None = None,
    uniforms: torch.Tensor | None = None,
) -> Rollout:
    """Sample group_size completions for each prompt (eval mode, no grad; training mode restored after).

    Runs grpo/rollout/fast/decode.py (finished rows dropped) with settings.fast, else the plain loop of grpo/rollout/sampling.py
    (the same tokens); the prompt is prefilled once per group either way. `uniforms` (N, max_new_tokens) fixes
    the samples; None draws them from torch's global generator."""
    batch = tokenize_prompts(tokenizer, prompts, max_prompt_length)
    device = next(model.parameters()).device
    n = batch.input_ids.shape[0] * group_size
    if settings.do_sample and uniforms is None:
        uniforms = torch.rand(n, settings.max_new_tokens)
    eos_ids = eos_token_ids(tokenizer, model)
    was_training = model.training
    model.eval()
    try:
        compiled = {"compile_decode": settings.compile_decode} if settings.fast else {}
        completion_ids = (decode_compact if settings.fast else decode)(
            model,
            batch.input_ids.to(device),
            batch.attention_mask.to(device),
            group_size,
            settings.max_new_tokens,
            eos_ids,
            pad_token_id(tokenizer),
            uniforms.to(device) if settings.do_sample else None,
            settings.temperature,
            settings.top_k,
            settings.top_p,
            **compiled,
        )
    finally:
        model.train(was_training)
    return build_rollout(tokenizer, batch, group_size, completion_ids, eos_ids, device)


def build_rollout(tokenizer, batch: PromptBatch, group_size: int, completion_ids, eos_ids, device) -> Rollout:
    """The Rollout of `completion_ids` (N, C; right padded, prompt-major) sampled for the prompts of `batch`."""
    mask, has_eos = completion_mask(completion_ids, eos_ids)
    return Rollout(
        prompt_ids=batch.input_ids.repeat_interleave(group_size, dim=0).to(device),
        prompt_mask=batch.attention_mask.repeat_interleave(group_size, dim=0).to(device),
        completion_ids=completion_ids,
        completion_mask=mask,
        env_mask=torch.ones_like(mask),
        truncated=~has_eos,
        prompt_truncated=batch.truncated.repeat_interleave(group_size),
        texts=decode_completions(tokenizer, completion_ids, mask),
    )


@torch.no_grad()
def generate_hf(
    model,
    tokenizer,
    prompts: list[str],
    group_size: int,
    settings: GenerationSettings,
    max_prompt_length: int | None = None,
) -> Rollout:
    """`model.generate` over all G copies of each prompt: the transformers reference the decode loops are
    checked against (greedy: the same tokens; kept for equivalence tests and benchmarks)."""
    batch = tokenize_prompts(tokenizer, prompts, max_prompt_length)
    device = next(model.parameters()).device
    prompt_ids = batch.input_ids.repeat_interleave(group_size, dim=0).to(device)
    prompt_mask = batch.attention_mask.repeat_interleave(group_size, dim=0).to(device)
    eos_ids = eos_token_ids(tokenizer, model)
    was_training = model.training
    model.eval()
    try:
        sampling = {"temperature": settings.temperature, "top_p": settings.top_p, "top_k": settings.top_k}
        output = model.generate(
            input_ids=prompt_ids,
            attention_mask=prompt_mask,
            max_new_tokens=settings.max_new_tokens,
            do_sample=settings.do_sample,
            pad_token_id=pad_token_id(tokenizer),
            eos_token_id=eos_ids,
            **(sampling if settings.do_sample else {}),
        )
    finally:
        model.train(was_training)
    sequences = output if isinstance(output, torch.Tensor) else output.sequences
    return build_rollout(tokenizer, batch, group_size, sequences[:, prompt_ids.shape[1] :], eos_ids, device)
