"""The starting backbone's next-token log-likelihood of a response, summarised for the reward head.

A decoder whose output layer is tied to its input embeddings scores every next token with
log_softmax(h_{t-1} @ E^T), from the hidden states and embedding matrix a bare AutoModel already has. The SFT base
ranks a flawed reasoning chain below the correct one by this likelihood (0.91 on held-out pairs) while a
head on pooled states fits the training chains without generalising (0.55); the mean and the least likely response
token hand that check to the head directly (one flawed token shows in the minimum). The likelihood comes from a
frozen copy of the starting backbone (saved beside the reward model in `FOLDER`), like DPO's reference model:
read through the fine-tuned backbone it decays as reward training reshapes the LM (held-out copy flaws 1.00 ->
0.70 when this was measured).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from prefpipe.common.config import ConfigError
from prefpipe.reward.pooling import response_mask

WIDTH = 2  # [mean token log-prob ; min token log-prob] over the response
FOLDER = "likelihood_model"  # the frozen copy inside a saved reward model folder


def enabled(requested: bool | str, source: str, model_config: Any, kind: str, lora: bool) -> bool:
    """Resolve backbone.likelihood_features: auto = on for a decoder with tied embeddings and no LoRA (the
    scratch base), off otherwise; true refuses, naming the key, a backbone it cannot read."""
    tied = bool(getattr(model_config, "tie_word_embeddings", False))
    if requested == "auto":
        return kind == "decoder" and tied and not lora
    if not requested:
        return False
    if kind != "decoder" or not tied:
        raise ConfigError(
            f"reward backbone.likelihood_features: backbone.model {source!r} is a {kind} with "
            f"tie_word_embeddings={tied}; it needs a decoder whose output layer is its input embeddings "
            "(set likelihood_features: false)"
        )
    if lora:
        raise ConfigError(
            "reward backbone.likelihood_features: not supported with lora.enabled (set one false)"
        )
    return True


def freeze(model: nn.Module) -> nn.Module:
    """The likelihood model is read, never trained (no gradients, eval mode)."""
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


@torch.no_grad()
def response_stats(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_index: torch.Tensor,
    kwargs: dict[str, Any],
) -> torch.Tensor:
    """(N, WIDTH) likelihood summary of each row's response tokens under the frozen `model`."""
    hidden = model(input_ids=input_ids, attention_mask=attention_mask, **kwargs).last_hidden_state
    softcap = getattr(model.config, "final_logit_softcapping", None)
    log_probs = token_log_probs(hidden, input_ids, model.get_input_embeddings().weight, softcap)
    return summarise(log_probs, response_mask(attention_mask, prompt_index))


def token_log_probs(
    hidden: torch.Tensor, input_ids: torch.Tensor, embeddings: torch.Tensor, softcap: float | None = None
) -> torch.Tensor:
    """(N, L) log p(token t | tokens < t) from the final states (N, L, H) and the tied embedding matrix (V, H);
    position 0 has no prediction and holds 0. `softcap` (Gemma 2's final_logit_softcapping): the LM soft-caps its
    logits to softcap * tanh(logits / softcap) before the softmax, so the log-probs are its own only with it."""
    logits = hidden[:, :-1].float() @ embeddings.float().T
    if softcap:
        logits = softcap * torch.tanh(logits / softcap)
    picked = logits.log_softmax(-1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return torch.cat([torch.zeros_like(picked[:, :1]), picked], dim=1)


def summarise(log_probs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(N, WIDTH): mean and minimum of the log-probs where `mask` is 1 (0 for a row with no such token)."""
    keep = mask.bool()
    zero = torch.zeros((), dtype=log_probs.dtype, device=log_probs.device)
    count = keep.sum(1)
    mean = torch.where(keep, log_probs, zero).sum(1) / count.clamp(min=1)
    least = torch.where(keep, log_probs, torch.full_like(log_probs, torch.inf)).amin(1)
    least = torch.where(count > 0, least, zero)
    return torch.stack([mean, least], dim=-1)
