"""Token choice and the plain decode loop of a rollout (the reference path; grpo/rollout/fast/decode.py is the fast one).

Every token is drawn by inverse-CDF sampling from one pre-drawn uniform per (row, step): the token of row i at
step t depends only on the logits of row i and `uniforms[i, t]` (the smallest index whose cumulative probability
reaches u), never on which other rows are in the batch. So the fast loop, which drops finished rows, draws the
same tokens, and a process that generates a slice of the batch (data-parallel GRPO) draws exactly the tokens a
single process would draw for those rows. Greedy decoding (uniforms None) takes the argmax, as `generate` does.

The plain loop prefills each prompt once and repeats its cache G times (causal attention makes the G copies
identical), then keeps every row in the batch until all have finished, stepping through the model's forward.
"""

from __future__ import annotations

import torch

from prefpipe.common.torch_runtime.transformers_api import cache_kwargs, output_cache
from prefpipe.grpo.logprobs import position_ids_from_mask


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Top-k then nucleus (top-p) filtering as transformers does it (-inf outside; at least one token kept)."""
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=False, dim=-1)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop_sorted = cum <= (1.0 - top_p)
        drop_sorted[..., -1:] = False
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def inverse_cdf_sample(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Index of the first token whose cumulative probability reaches u * total (exact categorical sampling)."""
    cdf = probs.cumsum(-1)
    idx = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1).contiguous())
    return idx.squeeze(-1).clamp_(max=probs.shape[-1] - 1)


def pick_tokens(
    logits: torch.Tensor, u: torch.Tensor | None, temperature: float, top_k: int, top_p: float
) -> torch.Tensor:
    if u is None:
        return logits.argmax(-1)
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    logits = filter_logits(logits, top_k, top_p)
    return inverse_cdf_sample(torch.softmax(logits, dim=-1), u)


def pad_buffer(prompt_ids: torch.Tensor, group_size: int, max_new_tokens: int, pad_id: int) -> torch.Tensor:
    """(P * group_size, max_new_tokens) pad ids: the completions of a decode loop before it writes them."""
    n = prompt_ids.shape[0] * group_size
    return torch.full((n, max_new_tokens), pad_id, dtype=torch.long, device=prompt_ids.device)


def prefill(
    model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, group_size: int
) -> tuple[object, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(KV cache, next-token logits, attention mask, next positions) of the P prompts, each repeated G times
    (prompt-major: rows p*G .. p*G+G-1 continue prompt p) after one forward per prompt."""
    position = position_ids_from_mask(prompt_mask)
    first = model(
        input_ids=prompt_ids,
        attention_mask=prompt_mask,
        position_ids=position,
        use_cache=True,
        logits_to_keep=1,
    )
    cache = output_cache(first)
    if group_size > 1:
        cache.batch_repeat_interleave(group_size)
    logits = first.logits[:, -1, :].repeat_interleave(group_size, dim=0)
    attn = prompt_mask.repeat_interleave(group_size, dim=0)
    next_pos = (position[:, -1] + 1).repeat_interleave(group_size)
    return cache, logits, attn, next_pos


def forward_step(
    model: torch.nn.Module, token: torch.Tensor, attn: torch.Tensor, next_pos: torch.Tensor, cache: object
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, object]:
    """One token per row through the model's forward: (next logits, attention mask, next positions, cache)."""
    attn = torch.cat([attn, attn.new_ones(attn.shape[0], 1)], dim=1)
    out = model(
        input_ids=token.unsqueeze(-1),
        attention_mask=attn,
        position_ids=next_pos.unsqueeze(-1),
        **cache_kwargs(model, cache),
    )
    return out.logits[:, -1, :], attn, next_pos + 1, output_cache(out)


@torch.no_grad()
def decode(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    group_size: int,
    max_new_tokens: int,
    eos_ids: list[int],
    pad_id: int,
    uniforms: torch.Tensor | None,
    temperature: float,
    top_k: int,
    top_p: float,
) -> torch.Tensor:
    """(P * group_size, C) completion ids for P left-padded prompts, prompt-major (rows p*G .. p*G+G-1 belong to
    prompt p); pad after each row's first EOS; C = the longest completion (at most max_new_tokens).
    `uniforms` (P*G, max_new_tokens) in [0, 1) drives sampling; None = greedy."""
    out = pad_buffer(prompt_ids, group_size, max_new_tokens, pad_id)
    n, device = out.shape[0], out.device
    if max_new_tokens < 1 or n == 0:
        return out[:, :0]
    eos = torch.tensor(eos_ids, device=device)
    cache, logits, attn, next_pos = prefill(model, prompt_ids, prompt_mask, group_size)
    done = torch.zeros(n, dtype=torch.bool, device=device)
    steps = 0
    for t in range(max_new_tokens):
        u = None if uniforms is None else uniforms[:, t]
        token = pick_tokens(logits, u, temperature, top_k, top_p)
        token = torch.where(done, torch.full_like(token, pad_id), token)
        out[:, t] = token
        steps = t + 1
        done = done | torch.isin(token, eos)
        if bool(done.all()) or t + 1 == max_new_tokens:
            break
        logits, attn, next_pos, cache = forward_step(model, token, attn, next_pos, cache)
    return out[:, :steps]
