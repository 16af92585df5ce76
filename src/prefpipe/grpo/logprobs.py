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

from prefpipe.common.transformers_api import cache_kwargs, output_cache


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


def shared_prompt_logprobs(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    group: torch.Tensor,
    completion_ids: torch.Tensor,
    temperature: float,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(k, C) log-probs of k completions whose prompts are shared: row i continues prompt `group[i]`.

    Each distinct prompt (left padded, (g, P)) is forwarded ONCE; its KV cache is gathered to the k rows and
    the completions (C-1 input tokens: the last token is only a target) run on top of it. Causal attention
    makes this the same computation as forwarding every [prompt, completion] row (to float tolerance), and
    gradients reach the prompt positions through the gathered cache (summed over the group's rows), so the
    backward is the same too, with the prompt computed 1/G as often."""
    position = position_ids_from_mask(prompt_mask)
    C = completion_ids.shape[1]
    # one embedding lookup for both calls: its backward (a dense vocab x hidden gradient) then runs once
    g, P = prompt_ids.shape
    embeds = model.get_input_embeddings()(
        torch.cat([prompt_ids.flatten(), completion_ids[:, : C - 1].flatten()])
    )
    first = model(
        inputs_embeds=embeds[: g * P].view(g, P, -1),
        attention_mask=prompt_mask,
        position_ids=position,
        use_cache=True,
        logits_to_keep=1,
    )
    logits = first.logits[group]  # (k, 1, V): predicts completion token 0
    cache = output_cache(first)
    if C > 1 and cache is None:  # a model that returns no cache (gradient checkpointing)
        return prefix_packed_logprobs(
            model, prompt_ids, prompt_mask, group, completion_ids, temperature, with_entropy
        )
    if C > 1:
        cache.batch_select_indices(group)
        mask = prompt_mask[group]
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], C - 1)], dim=1)
        pos = (position[group, -1:] + 1) + torch.arange(C - 1, device=position.device)[None, :]
        rest = model(
            inputs_embeds=embeds[g * P :].view(completion_ids.shape[0], C - 1, -1),
            attention_mask=mask,
            position_ids=pos,
            **cache_kwargs(model, cache),
        )
        logits = torch.cat([logits, rest.logits], dim=1)
    return token_logprobs(logits, completion_ids, temperature, with_entropy)


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


def prefix_packed_logprobs(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    group: torch.Tensor,
    completion_ids: torch.Tensor,
    temperature: float,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`shared_prompt_logprobs` in ONE forward call: each group becomes one sequence [prompt][completion 1]
    [completion 2]... (C-1 input tokens each) with a 4-D mask (a completion sees the prompt and its own earlier
    tokens, never another completion) and positions restarting after the prompt for every completion. One call
    means every weight's gradient is one matmul over all tokens instead of one per call (on a large model
    with few tokens that matmul is bound by the weight size, not the token count). Unused slots attend only to
    themselves (no fully masked row: its NaN would reach the gradients)."""
    g, P = prompt_ids.shape
    k, C = completion_ids.shape
    device = prompt_ids.device
    # segment of each row within its group (rows of a group are consecutive)
    first_of_group = torch.searchsorted(group, torch.arange(g, device=device))
    seg = torch.arange(k, device=device) - first_of_group[group]
    slots = int(seg.max()) + 1
    L = max(C - 1, 0)
    W = P + slots * L
    ids = prompt_ids.new_zeros(g, W)
    ids[:, :P] = prompt_ids
    pos = prompt_ids.new_zeros(g, W)
    pos[:, :P] = position_ids_from_mask(prompt_mask)
    if L:
        col = P + seg[:, None] * L + torch.arange(L, device=device)[None, :]  # (k, L)
        ids[group[:, None], col] = completion_ids[:, :L]
        plen = prompt_mask.sum(dim=1)
        pos[:, P:] = plen[:, None] + torch.arange(L, device=device).repeat(slots)[None, :]
    # key/query attributes: segment (-1 prompt), offset, real
    seg_of = torch.full((W,), -1, device=device)
    seg_of[P:] = torch.arange(slots, device=device).repeat_interleave(L)
    off = torch.arange(W, device=device)
    off[P:] = torch.arange(L, device=device).repeat(slots)
    real = torch.zeros(g, W, dtype=torch.bool, device=device)
    real[:, :P] = prompt_mask.bool()
    if L:
        real[group[:, None], col] = True
    q_seg, k_seg = seg_of[:, None], seg_of[None, :]
    q_off, k_off = off[:, None], off[None, :]
    prompt_key = (k_seg == -1) & ((q_seg != -1) | (k_off <= q_off))  # (W, W)
    own = (k_seg == q_seg) & (q_seg != -1) & (k_off <= q_off)
    allowed = (prompt_key | own)[None] & real[:, None, :] & real[:, :, None]
    allowed = allowed | torch.eye(W, dtype=torch.bool, device=device)[None]
    out = model(
        input_ids=ids,
        attention_mask=allowed[:, None],
        position_ids=pos,
        logits_to_keep=W - P + 1,
        use_cache=False,
    )
    idx = torch.zeros(k, C, dtype=torch.long, device=device)  # column 0: the prompt's last position
    if L:
        idx[:, 1:] = col - P + 1
    logits = out.logits[group[:, None], idx]
    return token_logprobs(logits, completion_ids, temperature, with_entropy)


# one call (prefix packing) pays while its extra attention (every slot of a group's sequence against every
# other, masked) costs less than the second call's extra weight-gradient pass, which is bound by reading and
# writing the weights. Measured on CPU: SmolLM2-135M, 2 groups of 4 x 16 tokens (attention / weights = 0.28):
# one call 1.92 s vs two 2.11 s per update; the tiny policy, 4 groups of 8 x 32 (ratio 23): 69 ms vs 61 ms.
# The threshold sits well inside the first case (weights count 8 attention MACs each), not at the break-even.
ATTENTION_MACS_PER_WEIGHT = 8
# below this width a weight matrix is too small for its gradient pass to be bound by memory: two calls always
ONE_CALL_MIN_HIDDEN = 256


def grouped_logprobs(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    group: torch.Tensor,
    completion_ids: torch.Tensor,
    temperature: float,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of completions with shared prompts, by whichever of the two equal forms is cheaper here."""
    cfg = getattr(model, "config", None)
    hidden, inter = getattr(cfg, "hidden_size", None), getattr(cfg, "intermediate_size", None)
    fn = shared_prompt_logprobs
    if (
        isinstance(hidden, int)
        and isinstance(inter, int)
        and hidden >= ONE_CALL_MIN_HIDDEN
        and completion_ids.shape[1] > 1
    ):
        g, P = prompt_ids.shape
        slots = int(torch.bincount(group).max())
        W = P + slots * (completion_ids.shape[1] - 1)
        attention = 2 * g * W * W * hidden
        if attention < ATTENTION_MACS_PER_WEIGHT * hidden * (4 * hidden + 3 * inter):
            fn = prefix_packed_logprobs
    return fn(model, prompt_ids, prompt_mask, group, completion_ids, temperature, with_entropy)
