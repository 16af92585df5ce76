"""Chosen and rejected behind one copy of their shared start: one sequence per pair, [prompt][chosen][rejected].

Why: a preference pair's two rows repeat the same prompt, and on chat data the prompt is often the larger part
(HH-RLHF helpful pairs under SmolLM2's tokenizer at max length 128: 58 prompt tokens and 58 response tokens
per pair, so the two padded rows carry 173 real tokens where the shared form needs 116). The backbone's cost is
proportional to tokens, so sharing the prompt is the one way to do less arithmetic per pair than a padded
batch of both rows (length buckets only remove padding).

Layout: the two rows' longest common start (q tokens: the prompt, as a chat template ends it; a tokenizer that
merges across the prompt's end shares a little less, responses that open alike a little more) is written once,
then the rest of the chosen row, then the rest of the rejected row. Every token keeps its position in its own
row, and a 4-D attention mask lets it attend to exactly what it attends to there: the shared start causally,
its own row's later tokens causally, never the other row's. Padding after the sequence attends to itself only
(no fully masked row). The head reads the final states at each row's last token and prompt end; the last layer
runs only there (`selected_last_layer`, which also makes this Llama-only). Embedding features average each
row's own response tokens.

It applies to every pair (with nothing shared it is the two rows side by side). Likelihood features come from
the rows' cached summaries (`RewardModel.cache_likelihood`: the frozen model's log-probs would need each response's
first token scored from its own prompt end, so they are not computed here); another pooling than the last
token or an architecture `selected_last_layer` does not know keeps the padded rows.
Pairs are sorted by packed length and cut into chunks as the length buckets are (`collate.chunk_bounds`).
Tests compare outputs, losses and gradients with the padded rows.

Plain path it must match: the chosen and rejected rows padded in one batch
(`PairEncoder.pad_buckets`, what the trainer uses when `RewardModel.shares_prompts` is False). Proof:
tests/test_reward_shared_prompt.py.
"""

from __future__ import annotations

from typing import Any

import torch

from prefpipe.reward.collate import TokenizedRow, cached_likelihood, chunk_bounds


def shared_length(chosen: TokenizedRow, rejected: TokenizedRow) -> int:
    """Tokens the two rows share at the start (usually the prompt, sometimes more, fewer when a tokenizer
    merges across the prompt's end); each row keeps at least its last token as its own."""
    limit = min(len(chosen.input_ids), len(rejected.input_ids)) - 1
    q = 0
    while q < limit and chosen.input_ids[q] == rejected.input_ids[q]:
        q += 1
    return q


def _packed_length(chosen: TokenizedRow, rejected: TokenizedRow) -> int:
    return len(chosen.input_ids) + len(rejected.input_ids) - shared_length(chosen, rejected)


def pack_chunk(
    chosen: list[TokenizedRow], rejected: list[TokenizedRow], pad_id: int
) -> dict[str, torch.Tensor]:
    """k pairs as k sequences [shared start][rest of chosen][rest of rejected], right padded to the longest:
    input_ids and position_ids (k, W; a token's position is its index in its own row), attention_mask
    (k, 1, W, W) bool, read (k, 4) columns [chosen end, rejected end, chosen prompt end, rejected prompt end]
    and response (k, 2, W) bool: the chosen / rejected response tokens (what embedding features average); with
    rows that carry cached likelihood summaries, likelihood_stats (k, 2, WIDTH)."""
    k = len(chosen)
    shared = [shared_length(c, r) for c, r in zip(chosen, rejected, strict=True)]
    width = max(
        len(c.input_ids) + len(r.input_ids) - q for c, r, q in zip(chosen, rejected, shared, strict=True)
    )
    ids = torch.full((k, width), pad_id, dtype=torch.long)
    pos = torch.zeros((k, width), dtype=torch.long)
    segment = torch.full((k, width), -1, dtype=torch.long)  # 0 shared, 1 chosen, 2 rejected, -1 padding
    read = torch.empty((k, 4), dtype=torch.long)
    response = torch.zeros((k, 2, width), dtype=torch.bool)
    for i, (c, r, q) in enumerate(zip(chosen, rejected, shared, strict=True)):
        nc, nr = len(c.input_ids), len(r.input_ids)
        ids[i, :nc] = torch.tensor(c.input_ids, dtype=torch.long)
        ids[i, nc : nc + nr - q] = torch.tensor(r.input_ids[q:], dtype=torch.long)
        pos[i, :nc] = torch.arange(nc)
        pos[i, nc : nc + nr - q] = torch.arange(q, nr)
        segment[i, :q], segment[i, q:nc], segment[i, nc : nc + nr - q] = 0, 1, 2
        rejected_col = lambda j, q=q, nc=nc: j if j < q else nc + j - q  # noqa: E731
        read[i] = torch.tensor(
            [nc - 1, rejected_col(nr - 1), c.prompt_len - 1, rejected_col(r.prompt_len - 1)]
        )
        response[i, 0, c.prompt_len : nc] = True
        for j in range(r.prompt_len, nr):
            response[i, 1, rejected_col(j)] = True
    q_seg, k_seg = segment[:, :, None], segment[:, None, :]
    causal = pos[:, None, :] <= pos[:, :, None]  # key position <= query position
    shared_key = (k_seg == 0) & ((q_seg > 0) | causal)  # the shared start serves every real query
    own = (k_seg == q_seg) & (q_seg > 0) & causal
    real = segment >= 0
    allowed = (shared_key | own) & real[:, :, None] & real[:, None, :]
    allowed |= torch.eye(width, dtype=torch.bool)[None]  # padding rows see themselves (no fully masked row)
    chunk = {"input_ids": ids, "position_ids": pos, "attention_mask": allowed[:, None], "read": read,
             "response": response}  # fmt: skip
    cached = [cached_likelihood(rows) for rows in (chosen, rejected)]
    if cached[0] is not None and cached[1] is not None:
        chunk["likelihood_stats"] = torch.stack(cached, dim=1)  # (k, 2, WIDTH): chosen, rejected
    return chunk


def pack_pairs(
    chosen: list[TokenizedRow],
    rejected: list[TokenizedRow],
    pad_id: int,
    max_chunks: int,
    pass_cost: int,
) -> dict[str, Any]:
    """The micro-batch's pairs in the shared form, sorted by packed length and cut into at most `max_chunks`
    chunks as the length buckets are (RewardModel.forward(shared=..., inverse=...))."""
    lengths = [_packed_length(c, r) for c, r in zip(chosen, rejected, strict=True)]
    order = sorted(range(len(chosen)), key=lambda i: lengths[i])
    bounds = chunk_bounds([lengths[i] for i in order], max_chunks, pass_cost)
    chunks = [
        pack_chunk([chosen[i] for i in order[a:b]], [rejected[i] for i in order[a:b]], pad_id)
        for a, b in zip(bounds, bounds[1:], strict=False)
    ]
    inverse = torch.empty(len(chosen), dtype=torch.long)
    inverse[torch.tensor(order, dtype=torch.long)] = torch.arange(len(chosen))
    return {"shared": chunks, "inverse": inverse}
