"""Per-token log-probs (and entropy) of completion tokens under a causal LM, in fp32.

Why the details matter:
- logits at position t predict token t+1, so completion token j is scored by the logits one position earlier;
- prompts are LEFT-padded for generation, so position ids come from the attention mask (as `generate` does),
  otherwise the scored distribution is not the one that was sampled from;
- logits are divided by the sampling temperature, so log-probs (and KL / ratios) describe the distribution
  the completions were actually drawn from;
- log_softmax runs in fp32 on only the completion positions (`logits_to_keep`), in micro-batches, to bound
  the B x T x vocab memory.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """0, 1, 2, ... counted over attended tokens only (left padding does not shift positions)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def _chunk_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    n_completion: int,
    temperature: float,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        logits_to_keep=n_completion + 1,
        use_cache=False,
    )
    return token_logprobs(
        out.logits[:, -(n_completion + 1) : -1, :], input_ids[:, -n_completion:], temperature, with_entropy
    )


def token_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(B, T) fp32 log-probs of `targets` under (B, T, V) `logits`; entropy (detached) if asked.

    Without entropy only the chosen token's logit and the log-normaliser are taken (selective log-softmax:
    no (B, T, V) log-prob tensor is written); with it one log_softmax serves both."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    if not with_entropy:
        return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logits.logsumexp(-1), None
    log_probs = F.log_softmax(logits, dim=-1)
    token_logp = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1).detach()
    return token_logp, entropy


def completion_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    n_completion: int,
    temperature: float,
    micro_batch_size: int | None = None,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(B, n_completion) fp32 log-probs of the last n_completion tokens of input_ids; entropy if asked.

    Gradients flow when called outside torch.no_grad (the policy); the caller masks the result.
    """
    if n_completion < 1:
        raise ValueError("completion_logprobs needs at least one completion token")
    size = micro_batch_size or input_ids.shape[0]
    logps, ents = [], []
    for start in range(0, input_ids.shape[0], size):
        sl = slice(start, start + size)
        lp, ent = _chunk_logprobs(
            model, input_ids[sl], attention_mask[sl], n_completion, temperature, with_entropy
        )
        logps.append(lp)
        ents.append(ent)
    entropy = torch.cat(ents) if with_entropy else None
    return torch.cat(logps), entropy
