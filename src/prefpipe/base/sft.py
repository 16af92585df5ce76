"""Supervised fine-tuning on demonstrations: loss on response tokens (and the closing EOS) only.

Rows are formatted with `prefpipe.common.chat.format_pair`, the same text every later stage uses, and the
prompt part is found by tokenising `format_prompt` alone: the chat template ends the prompt with a special
token, so its tokens are an exact prefix of the full sequence (checked per row).

A multi-turn demonstration (a row with `turns`: [{owner: policy | environment, text}], the tool-use episodes of
prefpipe.data.synthetic_multihop) is tokenised turn by turn, as a multi-turn rollout builds its episode (each
environment result encoded on its own, grpo/rollout/episodes): loss on the policy's turns and the reply end,
none on the environment's text (the policy must learn to call the tool, not to write its results).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from prefpipe.common.chat import format_pair, format_prompt, reply_end
from prefpipe.common.config import ConfigError, DataError
from prefpipe.common.progress import Progress
from prefpipe.settings.base import SFTSettings

log = logging.getLogger(__name__)
IGNORE = -100


@dataclass
class SFTData:
    """Tokenised demonstrations: `examples` are (input_ids, labels); `skipped` counts dropped rows by reason."""

    examples: list[tuple[list[int], list[int]]] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)


def encode_demonstrations(tokenizer: Any, rows: list[dict], max_length: int) -> SFTData:
    """Tokenise (prompt, response) rows; prompt tokens get label IGNORE, response tokens and EOS keep theirs."""
    data = SFTData()
    shortest = math.inf  # the shortest demonstration that was too long, for the message below
    for index, row in enumerate(rows):
        prompt, response = row.get("prompt"), row.get("response")
        if not isinstance(prompt, str) or not isinstance(response, str):
            raise DataError(
                f"demonstrations row {index} (id {row.get('id')!r}): prompt/response must be strings"
            )
        if not response.strip():
            data.skipped["empty_response"] += 1
            continue
        ids, labels = _encode_row(tokenizer, row, index)
        if len(ids) > max_length:
            data.skipped["too_long"] += 1
            shortest = min(shortest, len(ids))
            continue
        data.examples.append((ids, labels))
    if not data.examples and data.skipped["too_long"]:
        raise ConfigError(
            f"base.sft.max_length: {max_length} tokens is below every demonstration (the shortest has "
            f"{shortest}; {data.skipped['too_long']} too long, the rest empty): raise it to at least {shortest}"
        )
    if not data.examples:
        raise DataError(f"no usable demonstrations (skipped: {dict(data.skipped)})")
    return data


def _encode_row(tokenizer: Any, row: dict, index: int) -> tuple[list[int], list[int]]:
    """(input ids, labels) of one demonstration: prompt tokens IGNORE, response tokens their own."""
    prompt, response = row["prompt"], row["response"]
    prompt_ids = tokenizer(format_prompt(tokenizer, prompt), add_special_tokens=False)["input_ids"]
    if row.get("turns"):
        return _encode_turns(tokenizer, prompt_ids, row["turns"], index)
    ids = tokenizer(format_pair(tokenizer, prompt, response), add_special_tokens=False)["input_ids"]
    if ids[: len(prompt_ids)] != prompt_ids:
        raise ValueError(
            f"demonstrations row {index}: prompt tokens are not a prefix of prompt+response tokens; "
            "the tokenizer's chat template must end the prompt on a token boundary"
        )
    return ids, [IGNORE] * len(prompt_ids) + ids[len(prompt_ids) :]


def _encode_turns(
    tokenizer: Any, prompt_ids: list[int], turns: list[dict], index: int
) -> tuple[list[int], list[int]]:
    """A multi-turn demonstration turn by turn: the environment's text carries no loss."""
    ids, labels = list(prompt_ids), [IGNORE] * len(prompt_ids)
    end = reply_end(tokenizer) or ""
    for turn in [*turns, {"owner": "policy", "text": end}]:
        if turn.get("owner") not in ("policy", "environment") or not isinstance(turn.get("text"), str):
            raise DataError(f"demonstrations row {index}: a turn needs owner policy|environment and a text")
        part = tokenizer(turn["text"], add_special_tokens=False)["input_ids"]
        ids += part
        labels += part if turn["owner"] == "policy" else [IGNORE] * len(part)
    return ids, labels


def collate(batch: list[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a batch; padding gets attention 0 and label IGNORE."""
    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (ids, lab) in enumerate(batch):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, : len(lab)] = torch.tensor(lab)
        attention[row, : len(ids)] = 1
    return {"input_ids": input_ids, "labels": labels, "attention_mask": attention}


def masked_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over positions whose target label is not IGNORE (logits at t predict t+1)."""
    shifted_logits = logits[:, :-1, :].float()
    targets = labels[:, 1:]
    return F.cross_entropy(
        shifted_logits.reshape(-1, shifted_logits.size(-1)), targets.reshape(-1), ignore_index=IGNORE
    )


def lr_factor(step: int, warmup_steps: int, total_steps: int, min_ratio: float = 0.1) -> float:
    """Linear warm-up from 0 to 1 over `warmup_steps`, then cosine decay from 1 to `min_ratio` at the end."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    span = max(total_steps - warmup_steps, 1)
    progress = min(max(step - warmup_steps, 0) / span, 1.0)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def train_sft(
    model: torch.nn.Module,
    data: SFTData,
    settings: SFTSettings,
    pad_id: int,
    seed: int,
    log_step: Callable[..., None] | None = None,
) -> dict[str, float]:
    """AdamW with warm-up + cosine; batches walk seeded permutations of the examples (epoch by epoch)."""
    steps, batch_size = settings.steps, settings.batch_size
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=settings.learning_rate,
        betas=(0.9, 0.95),
        weight_decay=settings.weight_decay,
    )
    min_ratio = settings.min_lr_ratio
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, settings.warmup_steps, steps, min_ratio)
    )
    grad_clip = settings.grad_clip
    generator = torch.Generator().manual_seed(seed)
    order: list[int] = []
    losses: list[float] = []
    model.train()
    device = next(model.parameters()).device
    bar = Progress(steps, "base SFT")
    for step in range(steps):
        while len(order) < batch_size:
            order += torch.randperm(len(data.examples), generator=generator).tolist()
        batch = {
            k: v.to(device)
            for k, v in collate([data.examples[i] for i in order[:batch_size]], pad_id).items()
        }
        del order[:batch_size]
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        loss = masked_lm_loss(logits, batch["labels"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        if log_step is not None:
            log_step(step=step, sft_loss=losses[-1], lr=lr, grad_norm=float(grad_norm))
        bar.step(loss=losses[-1], lr=lr, grad_norm=float(grad_norm))
    bar.close()
    model.eval()
    tail = losses[-min(50, len(losses)) :]
    return {
        "steps": steps,
        "first_loss": losses[0],
        "final_loss": losses[-1],
        "mean_loss_last_50": sum(tail) / len(tail),
    }
