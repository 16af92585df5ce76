"""Padding-free packing (train.packing): a micro-batch's chosen and rejected rows laid end to end in a few rows.

Why: a padded micro-batch computes every row to the longest one's length (48% padding on HH-RLHF pairs at
max_length 512, measured on an H200); length buckets remove some of it at the price of extra passes. Packed,
the backbone runs on the real tokens only (plus at most one short tail of padding per packed row).

Layout: the rows (chosen ones, then rejected ones) are placed first-fit by decreasing length into packed rows
of at most `row_tokens` tokens each (0: one row for the whole micro-batch, the form for flash-attention's
variable-length kernel; with sdpa's dense mask a row's attention costs its length squared, hence the cap).
position_ids restart at 0 with each sequence, and no attention mask is passed: transformers (5.x,
masking_utils.find_packed_sequence_indices) then reads the restarts and builds a block-diagonal causal mask for
sdpa, eager and flex attention; flash-attention takes them as cu_seqlens. A packed row's tail is padding laid
out as one more sequence (positions from 0), which attends only to itself and is never read.
The head reads each sequence's last token and prompt end; with `selected_last_layer` the last layer runs at
those positions only, attending within the sequence. Embedding features average each sequence's response
tokens; likelihood features come from the rows' cached summaries (as in the shared-prompt form).

Plain path it must match: the same rows padded in one batch (`PairEncoder.pad_buckets`). Proof:
tests/test_reward_packing.py (scores, losses and gradients for BT, GPM and the Bayesian GPM).
"""

from __future__ import annotations

from typing import Any

import torch

from prefpipe.reward.collate import TokenizedRow, cached_likelihood
from prefpipe.reward.fast.selected_last_layer import selected_last_layer


def applies(rm: Any) -> bool:
    """Whether a RewardModel's training may pack its rows: a decoder that takes position_ids, read at the
    last token."""
    return rm.spec.backbone_kind == "decoder" and rm._uses_position_ids and rm.spec.pooling == "last"


def place(lengths: list[int], row_tokens: int) -> list[list[int]]:
    """Sequence indices per packed row: first fit by decreasing length into rows of at most row_tokens
    tokens (0: one row); a sequence longer than row_tokens gets a row of its own."""
    if row_tokens <= 0:
        return [sorted(range(len(lengths)), key=lambda i: -lengths[i])]
    rows: list[list[int]] = []
    used: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        fit = next((r for r, u in enumerate(used) if u + lengths[i] <= row_tokens), None)
        if fit is None:
            rows.append([i])
            used.append(lengths[i])
        else:
            rows[fit].append(i)
            used[fit] += lengths[i]
    return rows


def pack_rows(rows: list[TokenizedRow], pad_id: int, row_tokens: int) -> dict[str, Any]:
    """The rows packed (see the module docstring): input_ids and position_ids (R, W); read (N, 2) the flat
    positions (into R * W) of each row's last token and prompt end; index (R, S) and allowed (R, S, W) for
    `selected_last_layer` (S: the most read positions of a packed row) with slot (N, 2) their flat places
    (into R * S); word (R * W,) the row whose response a token belongs to (-1: prompt or padding); with
    cached likelihood summaries, likelihood_stats (N, WIDTH)."""
    lengths = [len(r.input_ids) for r in rows]
    layout = place(lengths, row_tokens)
    width = max(sum(lengths[i] for i in members) for members in layout)
    n_rows, n_reads = len(layout), 2 * max(len(members) for members in layout)
    ids = torch.full((n_rows, width), pad_id, dtype=torch.long)
    pos = torch.zeros((n_rows, width), dtype=torch.long)
    seq = torch.full((n_rows, width), -1, dtype=torch.long)  # which row a position holds (-1: padding)
    word = torch.full((n_rows, width), -1, dtype=torch.long)
    read = torch.empty((len(rows), 2), dtype=torch.long)
    index = torch.zeros((n_rows, n_reads), dtype=torch.long)
    slot = torch.empty((len(rows), 2), dtype=torch.long)
    for r, members in enumerate(layout):
        start = 0
        for j, i in enumerate(members):
            n, p = lengths[i], rows[i].prompt_len
            ids[r, start : start + n] = torch.tensor(rows[i].input_ids, dtype=torch.long)
            pos[r, start : start + n] = torch.arange(n)
            seq[r, start : start + n] = i
            word[r, start + p : start + n] = i
            ends = torch.tensor([start + n - 1, start + p - 1])
            read[i] = r * width + ends
            index[r, 2 * j : 2 * j + 2] = ends
            slot[i] = r * n_reads + torch.tensor([2 * j, 2 * j + 1])
            start += n
        pos[r, start:] = torch.arange(width - start)  # the tail: one more sequence, never read
        index[r, 2 * len(members) :] = index[r, 0]  # unused slots repeat a real read
    rows_r = torch.arange(n_rows)[:, None]
    q_seq, q_pos = seq[rows_r, index], pos[rows_r, index]  # (R, S)
    allowed = (seq[:, None, :] == q_seq[:, :, None]) & (pos[:, None, :] <= q_pos[:, :, None])
    packed = {"input_ids": ids, "position_ids": pos, "read": read, "index": index, "allowed": allowed,
              "slot": slot, "word": word.flatten()}  # fmt: skip
    stats = cached_likelihood(rows)
    if stats is not None:
        packed["likelihood_stats"] = stats
    return packed


def packed_features(rm: Any, packed: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The head's raw inputs of the packed rows, in row order: what RewardModel.features gives for them
    padded. `rm`: the RewardModel (its backbone, spec and selected_last_layer switch)."""
    ids, backbone = packed["input_ids"], rm.backbone
    kwargs = {"position_ids": packed["position_ids"], "use_cache": False}
    if rm.selected_last_layer:
        with selected_last_layer(backbone, packed["index"], packed["allowed"]):
            states = backbone(input_ids=ids, attention_mask=None, **kwargs).last_hidden_state
        states, where = states.flatten(0, 1), packed["slot"]
    else:
        states = backbone(input_ids=ids, attention_mask=None, **kwargs).last_hidden_state.flatten(0, 1)
        where = packed["read"]
    pooled, h_prompt = states[where[:, 0]], states[where[:, 1]]
    if rm.spec.embedding_features:
        embedded = backbone.get_input_embeddings()(ids).flatten(0, 1)
        word, n = packed["word"], len(where)
        # every position added, the others (-1) to row 0 with weight 0: no boolean indexing (a host sync)
        keep, row = (word >= 0).to(embedded.dtype), word.clamp(min=0)
        sums = embedded.new_zeros((n, embedded.shape[-1])).index_add_(0, row, embedded * keep[:, None])
        counts = keep.new_zeros(n).index_add_(0, row, keep).clamp(min=1)
        pooled = torch.cat([pooled, (sums / counts[:, None]).to(pooled.dtype)], dim=-1)
    if rm.spec.likelihood_features:
        if "likelihood_stats" not in packed:
            raise ValueError("the packed form needs the rows' cached likelihood summaries")
        pooled = torch.cat([pooled, packed["likelihood_stats"].to(pooled.device, pooled.dtype)], dim=-1)
    return pooled, h_prompt
