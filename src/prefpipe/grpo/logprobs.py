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


# (rows x vocabulary) elements per chunk of the entropy: its temporaries stay this small (64 MiB in fp32)
ENTROPY_CHUNK_ELEMENTS = 1 << 24


def token_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(B, T) fp32 log-probs of `targets` under (B, T, V) `logits`; entropy (detached) if asked.

    Without entropy only the chosen token's logit and the log-normaliser are taken (selective log-softmax:
    no (B, T, V) log-prob tensor is written). With it one fp32 log_softmax serves both; it casts half-precision
    logits itself, so no fp32 copy of them outlives the call, and the entropy is summed without gradients in
    row chunks. Over a 256k vocabulary the direct -(exp(lp) * lp).sum(-1) held two more (B, T, V) fp32
    tensors at once (22 bytes per logit at the peak instead of 14; benchmarks/grpo_memory.py)."""
    if temperature != 1.0:
        logits = logits.float() / temperature
    if not with_entropy:
        logits = logits.float()
        return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logits.logsumexp(-1), None
    log_probs = F.log_softmax(logits, dim=-1, dtype=torch.float32)
    token_logp = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return token_logp, entropy_from_log_probs(log_probs.detach())


@torch.no_grad()
def entropy_from_log_probs(log_probs: torch.Tensor) -> torch.Tensor:
    """-sum_v p_v log p_v over the last dimension, ENTROPY_CHUNK_ELEMENTS at a time."""
    flat = log_probs.reshape(-1, log_probs.shape[-1])
    rows = max(1, ENTROPY_CHUNK_ELEMENTS // max(flat.shape[1], 1))
    parts = [-(chunk.exp() * chunk).sum(-1) for chunk in flat.split(rows)]
    return torch.cat(parts).view(log_probs.shape[:-1]) if parts else log_probs.new_zeros(log_probs.shape[:-1])


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
