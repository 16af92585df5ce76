"""A lean decode loop for rollouts: each prompt is prefilled once (not G times), finished rows leave the batch,
and every token is drawn by inverse-CDF sampling from one pre-drawn uniform per (row, step).

Why not `model.generate`:
- `generate` keeps decoding rows that already emitted EOS (a profile found 76% of decode steps spent on them)
  and runs a stack of logits processors per step; here the KV cache is compacted to the unfinished rows;
- the prompt is the same for all G completions of a group, so its forward runs once and the cache is repeated;
- the token of row i at step t depends only on the logits of row i and `uniforms[i, t]` (the smallest index
  whose cumulative probability reaches u), never on which other rows are in the batch. So compaction does not
  change the samples, and a process that generates a slice of the batch (data-parallel GRPO) draws exactly the
  tokens a single process would draw for those rows.
Greedy decoding (uniforms None) takes the argmax, as `generate` does; tests check both against `generate`.
For Llama-architecture policies the decode steps after the prefill run through `LeanLlama` (preallocated
cache, no per-step framework work; `grpo/lean_decode.py`), others through the model's forward.
"""

from __future__ import annotations

import torch

from prefpipe.common.transformers_api import cache_kwargs, output_cache
from prefpipe.grpo.lean_decode import LeanLlama
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
    compact: bool = True,
    lean: bool = True,
) -> torch.Tensor:
    """(P * group_size, C) completion ids for P left-padded prompts, prompt-major (rows p*G .. p*G+G-1 belong to
    prompt p); pad after each row's first EOS; C = the longest completion (at most max_new_tokens).
    `uniforms` (P*G, max_new_tokens) in [0, 1) drives sampling; None = greedy. compact=False keeps finished
    rows in the batch (the plain loop, for tests); lean=False decodes through the model's forward even where
    `LeanLlama` applies (tests compare the two)."""
    device = prompt_ids.device
    n = prompt_ids.shape[0] * group_size
    out = torch.full((n, max_new_tokens), pad_id, dtype=torch.long, device=device)
    if max_new_tokens < 1 or n == 0:
        return out[:, :0]
    eos = torch.tensor(eos_ids, device=device)
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
    fast = LeanLlama.build(model, max_new_tokens) if lean else None
    if fast is not None:
        fast.start(cache, attn, next_pos, max_new_tokens)
    rows = torch.arange(n, device=device)  # batch slot -> output row
    done = torch.zeros(n, dtype=torch.bool, device=device)
    steps = 0
    for t in range(max_new_tokens):
        u = None if uniforms is None else uniforms[rows, t]
        token = pick_tokens(logits, u, temperature, top_k, top_p)
        if not compact:
            token = torch.where(done, torch.full_like(token, pad_id), token)
        out[rows, t] = token
        steps = t + 1
        finished = torch.isin(token, eos)
        if compact:
            keep = (~finished).nonzero().squeeze(-1)
            if keep.numel() == 0:
                break
            if keep.numel() < rows.numel():
                if fast is not None:
                    fast.select(keep)
                else:
                    cache.batch_select_indices(keep)
                rows, token, attn, next_pos = rows[keep], token[keep], attn[keep], next_pos[keep]
        else:
            done = done | finished
            if bool(done.all()):
                break
        if t + 1 == max_new_tokens:
            break
        if fast is not None:
            logits = fast.step(token)
            continue
        attn = torch.cat([attn, attn.new_ones(attn.shape[0], 1)], dim=1)
        step_out = model(
            input_ids=token.unsqueeze(-1),
            attention_mask=attn,
            position_ids=next_pos.unsqueeze(-1),
            **cache_kwargs(model, cache),
        )
        cache = output_cache(step_out)
        logits = step_out.logits[:, -1, :]
        next_pos = next_pos + 1
    return out[:, :steps]
