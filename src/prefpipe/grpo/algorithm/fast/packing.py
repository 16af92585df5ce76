"""Unpadded micro-batches for the GRPO forward/backward: the same spans (`grpo/algorithm/spans.py`), fewer tokens.

Plain path it must match: `prefpipe.grpo.algorithm.spans.plain_span` (the padded layout): the same log-probs, losses and
gradients to float tolerance. Tests: tests/test_grpo_fast_paths.py
(test_unpadded_micro_batches_give_the_padded_losses_and_gradients, test_fast_paths_switch_*).

A rollout row is [prompt left padding][prompt][completion][padding after EOS]; within a micro-batch every
row is as wide as the longest prompt plus the longest completion, and rows whose loss mask is empty (cut-off
completions under `mask_truncated_completions`) are forwarded for nothing. `pack_span` keeps only rows with a
loss token and lays each one out as [padding][prompt][completion up to its last loss token], right-aligned to
the longest such row, so a micro-batch is as wide as its longest real sequence. Completion token j of a row
with c completion tokens then sits at scored position C - c + j (C = the span's n_completion);
`PackedSpan.align` gathers the log-probs back to the span's layout (token j in column j), so losses, masks
and metrics see exactly what the padded layout gives (to float tolerance; tests compare them).

The row partition into micro-batches is untouched (bnpo normalises per micro-batch), only columns and empty
rows go. `with_prompt` (a debugging switch) keeps the padded layout.

`share_prompt_span` goes further: the G rows of a group have the same prompt, so the prompt is forwarded once
per group in the micro-batch and serves the group's completions (`grouped_logprobs`: through its KV cache in a
second call, or in one call with the group's completions packed behind it under a 4-D mask, whichever costs
less for the model's size); the forward/backward then carries each prompt once instead of G times. Every
layout answers `logprobs(model, ...)` with (k, C) values in the span's layout (completion token j in column
j), so the trainer does not care which one it holds. With `fast_paths` the trainer uses the shared-prompt form
for completion-mode spans and `plain_span` for `with_prompt` (and for every span without `fast_paths`);
`pack_span` is the unpadded form without prompt sharing, kept as a checked alternative.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from prefpipe.grpo.algorithm.fast.shared_prompt import grouped_logprobs
from prefpipe.grpo.algorithm.spans import PackedSpan, Span
from prefpipe.grpo.rollout.completions import Rollout


@dataclass
class SharedPromptSpan:
    span: Span
    rows: torch.Tensor  # (k,) rollout rows kept (each has a loss token)
    prompt_ids: torch.Tensor  # (g, P) the distinct prompts, left padded to the longest of them
    prompt_mask: torch.Tensor  # (g, P)
    group: torch.Tensor  # (k,) which prompt each row continues
    completion_ids: torch.Tensor  # (k, C)
    mask: torch.Tensor  # (k, C)
    n_scored: int  # C

    def align(self, values: torch.Tensor) -> torch.Tensor:
        return values

    def logprobs(
        self, model: torch.nn.Module, temperature: float, with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return grouped_logprobs(
            model,
            self.prompt_ids,
            self.prompt_mask,
            self.group,
            self.completion_ids,
            temperature,
            with_entropy=with_entropy,
        )


def share_prompt_span(rollout: Rollout, span: Span, group_size: int) -> SharedPromptSpan | None:
    """The shared-prompt form of a completion-mode span (None: no row carries loss). Rollout rows are
    prompt-major (rows p*G .. p*G+G-1 share prompt p), which `generate` guarantees."""
    if span.n_scored != span.n_completion:
        raise ValueError("share_prompt_span handles completion-mode spans only (mask_mode: completion)")
    C = span.n_completion
    local = (span.mask.sum(dim=1) > 0).nonzero().squeeze(-1)
    if local.numel() == 0:
        return None
    rows = local + span.rows.start
    groups, group = torch.unique_consecutive(
        torch.div(rows, group_size, rounding_mode="floor"), return_inverse=True
    )
    first_rows = groups * group_size
    prompt_ids, prompt_mask = rollout.prompt_ids[first_rows], rollout.prompt_mask[first_rows]
    lead = int((prompt_mask.sum(dim=0) == 0).long().cumprod(0).sum())  # columns that are padding in every row
    return SharedPromptSpan(
        span=span,
        rows=rows,
        prompt_ids=prompt_ids[:, lead:],
        prompt_mask=prompt_mask[:, lead:],
        group=group,
        completion_ids=rollout.completion_ids[rows, :C],
        mask=span.mask[local],
        n_scored=C,
    )


def pack_span(rollout: Rollout, span: Span, pad_id: int) -> PackedSpan | None:
    """The unpadded form of a completion-mode span (None: no row carries loss)."""
    if span.n_scored != span.n_completion:
        raise ValueError("pack_span handles completion-mode spans only (mask_mode: completion)")
    C = span.n_completion
    start = span.rows.start
    has_loss = span.mask.sum(dim=1) > 0
    local = has_loss.nonzero().squeeze(-1)
    if local.numel() == 0:
        return None
    rows = local + start
    mask = span.mask[local]
    cols = torch.arange(C, device=mask.device)
    # completion tokens kept per row: up to its last loss token
    c = torch.where(mask.bool(), cols + 1, torch.zeros_like(cols)).max(dim=1).values
    prompt_ids, prompt_mask = rollout.prompt_ids[rows], rollout.prompt_mask[rows]
    P = prompt_ids.shape[1]
    p = prompt_mask.sum(dim=1)
    W = int((p + c).max())
    seq = torch.cat([prompt_ids, rollout.completion_ids[rows, :C]], dim=1)
    src = (P + c - W)[:, None] + torch.arange(W, device=seq.device)[None, :]
    real = src >= (P - p)[:, None]
    input_ids = torch.where(real, seq.gather(1, src.clamp(min=0)), torch.full_like(src, pad_id))
    index = (C - c)[:, None] + cols[None, :]
    return PackedSpan(
        span=span,
        rows=rows,
        input_ids=input_ids,
        attention_mask=real.long(),
        mask=mask,
        index=index.clamp(max=C - 1),
        n_scored=C,
    )
