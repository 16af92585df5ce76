"""Pick one hidden state per sequence using the attention mask only (never token ids).

Mask-based indices are correct under left or right padding and when pad == eos, the usual cause of
identical chosen/rejected scores in RewardBench harnesses.
"""

from __future__ import annotations

import torch


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position of the last non-pad token per row (largest index whose mask is 1)."""
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    return (attention_mask.long() * positions).argmax(dim=1)


def first_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position of the first non-pad token per row (0 under right padding)."""
    return attention_mask.long().argmax(dim=1)


def gather_positions(hidden: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """hidden (N, L, H), index (N,) -> (N, H)."""
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), index]


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean over non-pad positions; torch.where keeps NaN/inf at pad positions from leaking in."""
    mask = attention_mask.bool().unsqueeze(-1)
    summed = torch.where(mask, hidden, torch.zeros((), dtype=hidden.dtype, device=hidden.device)).sum(1)
    return summed / mask.sum(1).clamp(min=1).to(hidden.dtype)


def response_mask(attention_mask: torch.Tensor, prompt_index: torch.Tensor) -> torch.Tensor:
    """1 on the response's tokens (after the prompt's last token, not padding) under either padding side."""
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    return attention_mask * (positions.unsqueeze(0) > prompt_index.unsqueeze(1)).to(attention_mask.dtype)


def pool(
    hidden: torch.Tensor, attention_mask: torch.Tensor, method: str, prompt_index: torch.Tensor | None = None
) -> torch.Tensor:
    if method == "response_mean":
        if prompt_index is None:
            raise ValueError("backbone.pooling: response_mean needs the prompt's last position")
        return mean_pool(hidden, response_mask(attention_mask, prompt_index))
    if method == "last":
        return gather_positions(hidden, last_token_index(attention_mask))
    if method == "first":
        return gather_positions(hidden, first_token_index(attention_mask))
    if method == "mean":
        return mean_pool(hidden, attention_mask)
    raise ValueError(f"backbone.pooling: unknown pooling {method!r}")


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """0, 1, 2, ... over real tokens whatever the padding side, so left padding does not shift positions."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
