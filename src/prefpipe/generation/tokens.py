"""Prompts to left-padded token batches, and the ids that end a completion: what the GRPO rollouts, policy
evaluation and the base policy's held-out accuracy share (see the package docstring)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from prefpipe.common.chat import format_prompt, has_chat_template


@dataclass
class PromptBatch:
    input_ids: torch.Tensor  # (N, P) left padded
    attention_mask: torch.Tensor  # (N, P)
    truncated: torch.Tensor  # (N,) bool: prompt was cut to max_prompt_length


def eos_token_ids(tokenizer, model=None) -> list[int]:
    """Every id that ends a completion: the tokenizer's EOS plus the model's generation_config EOS ids."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen_cfg = getattr(model, "generation_config", None)
    extra = getattr(gen_cfg, "eos_token_id", None) if gen_cfg is not None else None
    if isinstance(extra, int):
        ids.add(extra)
    elif extra is not None:
        ids.update(int(i) for i in extra)
    if not ids:
        raise ValueError("the tokenizer has no eos_token and the model no generation_config.eos_token_id")
    return sorted(ids)


def pad_token_id(tokenizer) -> int:
    return int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)


def tokenize_prompts(
    tokenizer, prompts: list[str], max_prompt_length: int | None, render: Callable = format_prompt
) -> PromptBatch:
    """`render` each prompt (format_prompt; a multi-turn run: its tool format's), tokenize, cut from the left
    to max_prompt_length, left-pad."""
    texts = [render(tokenizer, p) for p in prompts]
    # a chat template already writes BOS and friends; the plain layout relies on the tokenizer adding them
    encoded = tokenizer(texts, add_special_tokens=not has_chat_template(tokenizer))["input_ids"]
    truncated = [max_prompt_length is not None and len(ids) > max_prompt_length for ids in encoded]
    if max_prompt_length is not None:
        encoded = [ids[-max_prompt_length:] for ids in encoded]
    width = max(len(ids) for ids in encoded)
    pad = pad_token_id(tokenizer)
    input_ids = torch.full((len(encoded), width), pad, dtype=torch.long)
    attention = torch.zeros((len(encoded), width), dtype=torch.long)
    for row, ids in enumerate(encoded):
        if ids:
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention[row, width - len(ids) :] = 1
    return PromptBatch(input_ids, attention, torch.tensor(truncated, dtype=torch.bool))
