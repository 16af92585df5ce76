"""Which token positions of a GRPO batch are scored and trained, micro-batch by micro-batch.

The trainer and the one-step inspector (prefpipe.inspect_grpo) both cut a step's rollout with `loss_spans`, so
the inspector's table covers exactly the tokens, micro-batches and normalisers the trainer used.

`grpo.mask_mode` is a DEBUGGING SWITCH:
  completion   loss on completion tokens up to and including the first EOS (correct)
  with_prompt  ALSO loss on every real prompt token after the first (the classic masking bug, hypothesis H02:
               the policy is trained to reproduce its prompts). The `prompt_loss_share` metric is then > 0,
               which the report's "prompt loss" diagnostic flags at the first step.
  with_environment  ALSO loss (and KL) on the environment's tokens of a multi-turn episode (env_mask 0:
               grpo/rollout/episodes/): the policy is trained to write the retrieved text itself (H02 as the
               MuSiQue notes describe it). The `env_loss_share` metric is then > 0, which the "environment
               loss" diagnostic flags at the first step. Without environment tokens it changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from prefpipe.grpo.logprobs import completion_logprobs
from prefpipe.grpo.rollout.completions import Rollout

MASK_MODES = ("completion", "with_prompt", "with_environment")


@dataclass
class Span:
    """One micro-batch: rows `rows`, columns [:width] of the rollout's input ids; the LAST `n_scored` positions
    are scored (log-probs), `mask` (rows x n_scored) says which of them carry loss. The final `n_completion`
    scored positions are completion tokens 0..n_completion-1; any before them are prompt positions."""

    rows: slice
    width: int
    n_scored: int
    n_completion: int
    mask: torch.Tensor

    def inputs(self, rollout: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
        return rollout.input_ids[self.rows, : self.width], rollout.attention_mask[self.rows, : self.width]

    @property
    def n_prompt(self) -> int:
        return self.n_scored - self.n_completion

    def prompt_loss_tokens(self) -> int:
        return int(self.mask[:, : self.n_prompt].sum())


def completion_loss_mask(
    rollout: Rollout, mask_truncated: bool, with_environment: bool = False
) -> torch.Tensor:
    """(N, C) completion tokens that carry loss; cut-off completions get none with mask_truncated (DAPO);
    `with_environment` (the deliberate wrong mask) keeps the environment's tokens in."""
    mask = rollout.completion_mask if with_environment else rollout.loss_mask
    if mask_truncated:
        mask = mask * (~rollout.truncated).long()[:, None].to(mask.device)
    return mask


def ratio_mask(rollout: Rollout, mb, mask_truncated: bool) -> torch.Tensor:
    """The policy's own loss tokens of a micro-batch `mb` (a PackedSpan or SharedPromptSpan), in its mask's
    layout: the sequence a sequence-level ratio or importance weight runs over. Never a prompt position nor an
    environment token, whatever mask_mode trains."""
    out = torch.zeros_like(mb.mask)
    c = mb.span.n_completion
    if c:
        comp = completion_loss_mask(rollout, mask_truncated)
        out[:, -c:] = comp[mb.rows.to(comp.device), :c].to(out.device, out.dtype)
    return out


def loss_spans(rollout: Rollout, mask_mode: str, mask_truncated: bool, micro_batch_size: int) -> list[Span]:
    """The scored micro-batches of a step; a micro-batch without any loss token is left out."""
    if mask_mode not in MASK_MODES:
        raise ValueError(f"grpo.mask_mode must be one of {MASK_MODES}, got {mask_mode!r}")
    comp = completion_loss_mask(rollout, mask_truncated, mask_mode == "with_environment")
    n = comp.shape[0]
    prompt_width = rollout.prompt_ids.shape[1]
    # 1 + the last loss position of each row: the count of loss tokens only where they are a prefix (a
    # multi-turn episode's loss tokens have the environment's turns between them)
    cols = torch.arange(1, comp.shape[1] + 1, device=comp.device)
    ends = torch.cat([comp * cols, comp.new_zeros(n, 1)], dim=1).amax(dim=1)
    spans = []
    for start in range(0, n, micro_batch_size):
        rows = slice(start, min(start + micro_batch_size, n))
        c = int(ends[rows].max())
        if mask_mode != "with_prompt":
            if c > 0:
                spans.append(Span(rows, prompt_width + c, c, c, comp[rows, :c]))
            continue
        # with_prompt: every prompt position after the first is predicted by the one before it
        prompt_part = rollout.prompt_mask[rows, 1:].to(comp.dtype)
        mask = torch.cat([prompt_part, comp[rows, :c]], dim=1)
        if int(mask.sum()) > 0:
            spans.append(Span(rows, prompt_width + c, prompt_width - 1 + c, c, mask))
    return spans


def environment_loss_tokens(rollout: Rollout, spans: list[Span]) -> int:
    """Loss-carrying completion tokens that the environment wrote (env_mask 0): 0 unless mask_mode is
    with_environment."""
    total = 0
    for sp in spans:
        c = sp.n_completion
        env = 1 - rollout.env_mask[sp.rows, :c].to(sp.mask.dtype)
        total += int((sp.mask[:, sp.n_prompt :] * env).sum())
    return total


@dataclass
class PackedSpan:
    span: Span
    rows: torch.Tensor  # (k,) rollout rows kept (each has a loss token)
    input_ids: torch.Tensor  # (k, W) right-aligned, left padded
    attention_mask: torch.Tensor  # (k, W)
    mask: torch.Tensor  # (k, C) loss mask in the span's layout
    index: torch.Tensor  # (k, C) scored position of completion token j
    n_scored: int  # C

    def align(self, values: torch.Tensor) -> torch.Tensor:
        """(k, C) values at scored positions -> completion token j in column j (gradient flows)."""
        return values.gather(1, self.index)

    def logprobs(
        self, model: torch.nn.Module, temperature: float, with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(k, C) log-probs (and entropy) of the span's scored tokens in the span's layout."""
        logp, ent = completion_logprobs(
            model, self.input_ids, self.attention_mask, self.n_scored, temperature, with_entropy=with_entropy
        )
        return self.align(logp), (self.align(ent) if ent is not None else None)


def plain_span(rollout: Rollout, span: Span) -> PackedSpan:
    """A span in the padded layout, behind the same interface (with_prompt spans; tests' reference path)."""
    input_ids, attention_mask = span.inputs(rollout)
    rows = torch.arange(span.rows.start, span.rows.stop, device=input_ids.device)
    index = torch.arange(span.n_scored, device=input_ids.device).expand(rows.numel(), -1)
    return PackedSpan(span, rows, input_ids, attention_mask, span.mask, index.contiguous(), span.n_scored)
