"""Log-probs of completions whose prompts are shared (the G completions of a group): each prompt is forwarded
once per group instead of G times, through its KV cache in a second call (`shared_prompt_logprobs`) or in one
call with the group's completions packed behind it under a 4-D mask (`prefix_packed_logprobs`);
`grouped_logprobs` picks the cheaper for the model's size.

Plain path it must match: `prefpipe.grpo.logprobs.completion_logprobs` on the padded [prompt, completion] rows
(log-probs, entropy and gradients, to float tolerance). Tests: tests/test_grpo_fast_paths.py
(test_unpadded_micro_batches_give_the_padded_losses_and_gradients,
test_prefix_packed_one_call_equals_the_cache_two_call_form,
test_shared_prompt_form_without_a_cache_falls_back_to_one_call, test_fast_paths_switch_*).

Every forward goes through grpo/logprobs.py's `forward_kept` / `rows_logprobs`, so with
`grpo.logprob_chunk_tokens` the rows gathered and concatenated here are final hidden states, not logits
(tests/test_grpo_chunked_logprobs.py).
"""

from __future__ import annotations

import torch

from prefpipe.common.torch_runtime.transformers_api import cache_kwargs, output_cache
from prefpipe.grpo.logprobs import forward_kept, position_ids_from_mask, rows_logprobs


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
    first, rows = forward_kept(
        model,
        1,
        inputs_embeds=embeds[: g * P].view(g, P, -1),
        attention_mask=prompt_mask,
        position_ids=position,
        use_cache=True,
    )
    rows = rows[group]  # (k, 1, V) logits or (k, 1, H) hidden states: predict completion token 0
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
        _, rest = forward_kept(
            model,
            0,
            inputs_embeds=embeds[g * P :].view(completion_ids.shape[0], C - 1, -1),
            attention_mask=mask,
            position_ids=pos,
            **cache_kwargs(model, cache),
        )
        rows = torch.cat([rows, rest], dim=1)
    return rows_logprobs(model, rows, completion_ids, temperature, with_entropy)


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
    _, rows = forward_kept(
        model, W - P + 1, input_ids=ids, attention_mask=allowed[:, None], position_ids=pos, use_cache=False
    )
    idx = torch.zeros(k, C, dtype=torch.long, device=device)  # column 0: the prompt's last position
    if L:
        idx[:, 1:] = col - P + 1
    return rows_logprobs(model, rows[group[:, None], idx], completion_ids, temperature, with_entropy)


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
    model_config = getattr(model, "config", None)
    hidden, inter = (
        getattr(model_config, "hidden_size", None),
        getattr(model_config, "intermediate_size", None),
    )
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
