"""Per-token log-probs (and entropy) of completion tokens under a causal LM, in fp32.

Why the details matter:
- logits at position t predict token t+1, so completion token j is scored by the logits one position earlier;
- prompts are LEFT-padded for generation, so position ids come from the attention mask (as `generate` does),
  otherwise the scored distribution is not the one that was sampled from;
- logits are divided by the sampling temperature, so log-probs (and KL / ratios) describe the distribution
  the completions were actually drawn from;
- log_softmax runs in fp32 on only the completion positions (`logits_to_keep`), in micro-batches, to bound
  the B x T x vocab memory;
- with `grpo.<run>.logprob_chunk_tokens` > 0 (`set_logprob_chunk_tokens`) not even those logits exist at once:
  the decoder runs once to its final hidden states, then the output layer (grpo/output_layer.py: lm_head, and
  Gemma-2's final soft-cap) and the selective log-softmax run over chunks of that many positions, each chunk
  under torch.utils.checkpoint, so the backward recomputes a chunk's logits instead of keeping them: the peak
  holds one chunk's logits (chunk x V), not B x T x V. Every caller goes through `forward_kept` and
  `rows_logprobs`, which take either path; tests/test_grpo_chunked_logprobs.py checks the two agree.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from prefpipe.common.config import ConfigError
from prefpipe.grpo.output_layer import OutputLayer, check_splittable, decoder, output_layer

# where set_logprob_chunk_tokens keeps the setting: on the module (a frozen copy of it, the reference, keeps it)
CHUNK_ATTRIBUTE = "_prefpipe_logprob_chunk_tokens"


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
    _, rows = forward_kept(
        model,
        n_completion + 1,
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
    )
    return rows_logprobs(
        model, rows[:, -(n_completion + 1) : -1], input_ids[:, -n_completion:], temperature, with_entropy
    )


def set_logprob_chunk_tokens(model: torch.nn.Module, chunk_tokens: int) -> None:
    """grpo.<run>.logprob_chunk_tokens: every log-prob computed with `model` from now on (and with a frozen copy
    made after this call) runs its output layer over chunks of `chunk_tokens` positions; 0 = the plain path.
    ConfigError when the model's output layer is unknown (grpo/output_layer.py)."""
    if chunk_tokens < 0:
        raise ConfigError(f"grpo.logprob_chunk_tokens must be >= 0, got {chunk_tokens}")
    if chunk_tokens:
        check_splittable(model, "grpo.logprob_chunk_tokens")
    setattr(model, CHUNK_ATTRIBUTE, int(chunk_tokens))


def logprob_chunk_tokens(model: torch.nn.Module) -> int:
    """The model's log-prob chunk (0: the plain path, the default for a model nobody set it on)."""
    return getattr(model, CHUNK_ATTRIBUTE, 0)


def forward_kept(model: torch.nn.Module, keep: int, **inputs: Any) -> tuple[Any, torch.Tensor]:
    """One forward of `model` on `inputs`: its output (for a KV cache) and the rows of its last `keep` positions
    (0: all) that `rows_logprobs` scores: the logits (plain path), or with a log-prob chunk the decoder's final
    hidden states. Callers index the rows' leading dimensions alike either way."""
    if not logprob_chunk_tokens(model):
        out = model(**inputs, logits_to_keep=keep)
        return out, out.logits
    out = decoder(model)(**inputs)
    hidden = out.last_hidden_state
    return out, hidden[:, -keep:] if keep else hidden


def rows_logprobs(
    model: torch.nn.Module, rows: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`token_logprobs` of rows from `forward_kept` (logits, or hidden states through the output layer in
    chunks)."""
    chunk = logprob_chunk_tokens(model)
    if not chunk:
        return token_logprobs(rows, targets, temperature, with_entropy)
    return chunked_logprobs(output_layer(model), rows, targets, temperature, with_entropy, chunk)


def chunked_logprobs(
    layer: OutputLayer,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    with_entropy: bool,
    chunk_tokens: int,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """token_logprobs(layer(hidden), targets, ...) with layer(hidden) made for `chunk_tokens` positions at a
    time. With gradients each chunk runs under (non-reentrant) checkpoint: only its hidden rows are kept and the
    backward recomputes its logits; checkpoint's early stop ends that recomputation at the log-probs, so the
    entropy (a detached metric, computed after them) is not recomputed."""
    flat, flat_targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    if flat.shape[0] == 0:
        empty = hidden.new_zeros(targets.shape, dtype=torch.float32)
        return empty, (empty.clone() if with_entropy else None)
    logps, ents = [], []
    for rows, chunk_targets in zip(flat.split(chunk_tokens), flat_targets.split(chunk_tokens), strict=True):
        args = (layer, rows, chunk_targets, temperature, with_entropy)
        lp, ent = checkpoint(_chunk, *args, use_reentrant=False) if torch.is_grad_enabled() else _chunk(*args)
        logps.append(lp)
        ents.append(ent)
    entropy = torch.cat(ents).view(targets.shape) if with_entropy else None
    return torch.cat(logps).view(targets.shape), entropy


def _chunk(
    layer: OutputLayer, rows: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    return token_logprobs(layer(rows), targets, temperature, with_entropy)


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
