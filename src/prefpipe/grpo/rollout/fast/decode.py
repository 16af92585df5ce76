"""The fast decode loop of a rollout: finished rows leave the batch, and Llama-architecture policies step
through `LeanLlama` (grpo/rollout/fast/lean_decode.py) instead of the transformers forward.

Plain path it must match: `prefpipe.grpo.rollout.sampling.decode` (same tokens: sampling never depends on which other
rows are in the batch, see grpo/rollout/sampling.py). Tests: tests/test_grpo_fast_paths.py
(test_sampling_does_not_depend_on_compaction_or_the_rest_of_the_batch, test_greedy_decode_equals_model_generate_*,
test_lean_decode_steps_give_the_model_forward_logits_and_samples, test_fast_paths_switch_*).

Why not `model.generate`: it keeps decoding rows that already emitted EOS (a profile found 76% of decode steps
spent on them) and runs a stack of logits processors per step; here the KV cache is compacted to the
unfinished rows.
"""

from __future__ import annotations

import torch

from prefpipe.grpo.rollout.fast.lean_decode import LeanLlama
from prefpipe.grpo.rollout.fast.static_decode import StaticDecode
from prefpipe.grpo.rollout.sampling import forward_step, pad_buffer, pick_tokens, prefill


@torch.no_grad()
def decode_compact(
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
    lean: bool = True,
    *,
    compile_decode: str,
) -> torch.Tensor:
    """`sampling.decode`'s output (same arguments) with finished rows dropped from the batch; lean=False decodes
    through the model's forward even where `LeanLlama` applies (tests compare the two). compile_decode other
    than none (grpo.<run>.rollout.compile_decode) steps a Llama policy through the compiled static step instead
    (grpo/rollout/fast/static_decode.py): finished rows stay in the batch, their tokens discarded."""
    out = pad_buffer(prompt_ids, group_size, max_new_tokens, pad_id)
    n, device = out.shape[0], out.device
    if max_new_tokens < 1 or n == 0:
        return out[:, :0]
    eos = torch.tensor(eos_ids, device=device)
    cache, logits, attn, next_pos = prefill(model, prompt_ids, prompt_mask, group_size)
    fast = LeanLlama.build(model, max_new_tokens) if lean else None
    if fast is not None and compile_decode != "none":
        fast = StaticDecode(model, fast, compile_decode)
        fast.start(cache, attn, next_pos, max_new_tokens)
        return _static_loop(fast, logits, out, eos, uniforms, (temperature, top_k, top_p))
    if fast is not None:
        fast.start(cache, attn, next_pos, max_new_tokens)
    rows = torch.arange(n, device=device)  # batch slot -> output row
    steps = 0
    for t in range(max_new_tokens):
        u = None if uniforms is None else uniforms[rows, t]
        token = pick_tokens(logits, u, temperature, top_k, top_p)
        out[rows, t] = token
        steps = t + 1
        keep = (~torch.isin(token, eos)).nonzero().squeeze(-1)
        if keep.numel() == 0:
            break
        if keep.numel() < rows.numel():
            if fast is not None:
                fast.select(keep)
            else:
                cache.batch_select_indices(keep)
            rows, token, attn, next_pos = rows[keep], token[keep], attn[keep], next_pos[keep]
        if t + 1 == max_new_tokens:
            break
        if fast is not None:
            logits = fast.step(token)
        else:
            logits, attn, next_pos, cache = forward_step(model, token, attn, next_pos, cache)
    return out[:, :steps]


def _static_loop(
    fast: StaticDecode,
    logits: torch.Tensor,
    out: torch.Tensor,
    eos: torch.Tensor,
    uniforms: torch.Tensor | None,
    sampling: tuple[float, int, float],
) -> torch.Tensor:
    """The decode loop over a batch of fixed size: every row steps until all have finished; a row's tokens
    after its EOS are not written (`out` keeps its pad ids there), so the output is the compacting loop's."""
    alive = torch.ones(out.shape[0], dtype=torch.bool, device=out.device)
    steps = 0
    for t in range(out.shape[1]):
        token = pick_tokens(logits, None if uniforms is None else uniforms[:, t], *sampling)
        out[:, t] = torch.where(alive, token, out[:, t])
        steps = t + 1
        alive &= ~torch.isin(token, eos)
        if t + 1 == out.shape[1] or not bool(alive.any()):
            break
        logits = fast.step(token)
    return out[:, :steps]
