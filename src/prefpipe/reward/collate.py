"""Rows -> token ids -> padded batches, the same way in training, evaluation and GRPO.

Text comes only from prefpipe.common.chat. The last prompt token (for the prompt gate) is located from the
formatted prompt: its token ids are the common prefix of tokenize(prompt) and tokenize(prompt + response).
Over-long sequences lose tokens from the LEFT of the prompt (leading special tokens such as BOS/CLS and the
last prompt token are kept); only if that is not enough is the response cut, keeping its trailing special
tokens (EOS/SEP): from the right (keep_response "start", the default) or from the left ("end": a reply's
conclusion is kept, its opening dropped). Both cases are counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from prefpipe.common.chat import format_pair, format_pairs, format_prompt, has_chat_template
from prefpipe.common.config import ConfigError
from prefpipe.reward.fast.token_ids import token_ids
from prefpipe.reward.pooling import position_ids_from_mask


@dataclass
class TokenizedRow:
    input_ids: list[int]
    prompt_len: int  # tokens up to and including the last prompt token (>= 1)
    cut: str = ""  # what truncation removed: "" | "prompt" | "response"
    # The frozen likelihood model's response summary (likelihood.WIDTH floats), computed once per row in
    # training (RewardModel.cache_likelihood); None: features() computes it with the backbone pass.
    likelihood: tuple[float, ...] | None = None


def cached_likelihood(rows: list[TokenizedRow]) -> torch.Tensor | None:
    """(N, WIDTH) float32 of the rows' cached likelihood summaries, or None when they carry none."""
    missing = sum(r.likelihood is None for r in rows)
    if missing == len(rows):
        return None
    if missing:
        raise ValueError(
            f"rows mix cached and uncached likelihood summaries ({missing} of {len(rows)} uncached)"
        )
    return torch.tensor([r.likelihood for r in rows], dtype=torch.float32)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _leading(ids: list[int], special: set[int], limit: int) -> int:
    n = 0
    while n < limit and ids[n] in special:
        n += 1
    return n


def _trailing(ids: list[int], special: set[int]) -> int:
    n = 0
    while n < len(ids) and ids[len(ids) - 1 - n] in special:
        n += 1
    return n


# reward.*.data.keep_response: which `room` tokens of a too-long response body (trailing specials excluded) stay.
KEEP_RESPONSE: dict[str, Callable[[list[int], int], list[int]]] = {
    "start": lambda body, room: body[:room],
    "end": lambda body, room: body[len(body) - room :],
}


def check_keep_response(keep: str) -> str:
    """`keep` if KEEP_RESPONSE knows it, else a ConfigError naming the key."""
    if keep not in KEEP_RESPONSE:
        raise ConfigError(f"data.keep_response={keep!r}: expected one of {sorted(KEEP_RESPONSE)}")
    return keep


def truncate_row(
    ids: list[int], prompt_len: int, max_length: int, special: set[int], keep: str
) -> tuple[TokenizedRow, str]:
    """Fit one sequence into max_length; returns the row and what was cut: '', 'prompt' or 'response'.
    The prompt gives way first; then the response keeps its start or its end (`keep`, KEEP_RESPONSE)."""
    excess = len(ids) - max_length
    if excess <= 0:
        return TokenizedRow(ids, prompt_len), ""
    lead = _leading(ids, special, prompt_len - 1)
    droppable = prompt_len - lead - 1  # keep leading specials and the last prompt token
    if excess <= droppable:
        return TokenizedRow(ids[:lead] + ids[lead + excess :], prompt_len - excess, "prompt"), "prompt"
    head = ids[:lead] + ids[prompt_len - 1 : prompt_len]
    response = ids[prompt_len:]
    tail = _trailing(response, special)
    room = max_length - len(head) - tail
    if room < 1:
        raise ConfigError(f"data.max_length={max_length} is too small to hold any response token")
    body = response[: len(response) - tail]  # room < len(body): the prompt alone could not give way
    kept = KEEP_RESPONSE[check_keep_response(keep)](body, room) + response[len(body) :]
    return TokenizedRow(head + kept, len(head), "response"), "response"


def chunk_bounds(lengths: list[int], max_chunks: int, pass_cost: int) -> list[int]:
    """Cut points [0, ..., n] of ascending `lengths` into at most `max_chunks` contiguous chunks minimising
    sum(rows * longest row) + pass_cost * chunks (padded tokens plus a fixed cost per backbone pass), by
    dynamic programming over the sorted rows; ties go to fewer chunks, then to the earliest cut (a pure
    function of the lengths, so runs and resumed runs cut alike)."""
    n = len(lengths)
    if n == 0:
        return [0]
    inf = float("inf")
    best = [0.0] + [inf] * n  # best[j]: padded tokens of rows[:j] in the chunks used so far
    back: list[list[int]] = []
    choice: tuple[float, int] = (n * lengths[-1] + pass_cost, 1)
    for k in range(1, min(max_chunks, n) + 1):
        new = [inf] * (n + 1)
        cut = [0] * (n + 1)
        for j in range(k, n + 1):
            width = lengths[j - 1]
            for i in range(k - 1, j):
                cost = best[i] + (j - i) * width
                if cost < new[j]:
                    new[j], cut[j] = cost, i
        back.append(cut)
        best = new
        if best[n] + pass_cost * k < choice[0]:
            choice = (best[n] + pass_cost * k, k)
    bounds, j = [n], n
    for k in range(choice[1], 0, -1):
        j = back[k - 1][j]
        bounds.append(j)
    return bounds[::-1]


class PairEncoder:
    """Tokenises (prompt, response) rows and pads batches; counts truncations by kind."""

    def __init__(self, tokenizer: Any, max_length: int, padding_side: str, keep_response: str) -> None:
        if tokenizer.pad_token_id is None:
            raise ValueError("tokenizer has no pad token; load it through prefpipe.reward.backbone")
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.keep_response = check_keep_response(keep_response)  # which part of a too-long response stays
        self.padding_side = padding_side
        self.add_special_tokens = not has_chat_template(tokenizer)  # templates carry their own BOS
        self.special = set(tokenizer.all_special_ids)
        self.truncated: Counter[str] = Counter()
        # tokenize_batch through the backend's batched call (prefpipe.reward.fast.token_ids); False: the plain
        # per-row tokenize() (RewardModel.set_fast_paths).
        self.fast_tokenize = True

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=self.add_special_tokens, verbose=False)["input_ids"]

    def tokenize(self, prompt: str, response: str) -> TokenizedRow:
        full = self._ids(format_pair(self.tokenizer, prompt, response))
        prompt_ids = self._ids(format_prompt(self.tokenizer, prompt))
        prompt_len = max(1, min(_common_prefix(full, prompt_ids), len(full) - 1))
        row, cut = truncate_row(full, prompt_len, self.max_length, self.special, self.keep_response)
        if cut:
            self.truncated[cut] += 1
        return row

    def tokenize_many(self, prompts: list[str], responses: list[str]) -> list[TokenizedRow]:
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        return [self.tokenize(p, r) for p, r in zip(prompts, responses, strict=True)]

    def pad_buckets(self, rows: list[TokenizedRow], max_chunks: int, pass_cost: int) -> dict[str, Any]:
        """Rows sorted by length (stable) and cut into at most `max_chunks` chunks, each padded to its own
        longest row: a batch of mixed lengths pads far less (RewardModel.forward(buckets=..., inverse=...)
        runs one backbone pass per chunk and puts the outputs back in row order with `inverse`). Where to cut
        is chosen by chunk_bounds: an extra pass is only worth it where it saves more than `pass_cost`
        padded tokens (each pass re-accumulates every weight gradient and the embedding's dense one)."""
        order = sorted(range(len(rows)), key=lambda i: len(rows[i].input_ids))
        bounds = chunk_bounds([len(rows[i].input_ids) for i in order], max_chunks, pass_cost)
        chunks = [self.pad([rows[i] for i in order[a:b]]) for a, b in zip(bounds, bounds[1:], strict=False)]
        inverse = torch.empty(len(rows), dtype=torch.long)
        inverse[torch.tensor(order, dtype=torch.long)] = torch.arange(len(rows))
        return {"buckets": chunks, "inverse": inverse}

    def tokenize_batch(self, prompts: list[str], responses: list[str]) -> list[TokenizedRow]:
        """tokenize() for many rows at once: each distinct prompt formatted and tokenised once, all pair texts in
        one batched call (`token_ids`: a fast tokenizer encodes the batch in Rust); the same rows and counts."""
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        if not prompts:
            return []
        if not self.fast_tokenize:
            return self.tokenize_many(prompts, responses)
        heads, texts = format_pairs(self.tokenizer, prompts, responses)
        distinct = list(dict.fromkeys(heads))
        special = self.add_special_tokens
        head_ids = dict(zip(distinct, token_ids(self.tokenizer, distinct, special), strict=True))
        rows = []
        for head, full in zip(heads, token_ids(self.tokenizer, texts, special), strict=True):
            prompt_ids = head_ids[head]
            n = len(prompt_ids)
            common = n if full[:n] == prompt_ids else _common_prefix(full, prompt_ids)
            prompt_len = max(1, min(common, len(full) - 1))
            row, cut = truncate_row(full, prompt_len, self.max_length, self.special, self.keep_response)
            if cut:
                self.truncated[cut] += 1
            rows.append(row)
        return rows

    def pad(self, rows: list[TokenizedRow]) -> dict[str, torch.Tensor]:
        """Dynamic padding to the longest row; prompt_index is the last prompt token's padded position."""
        width = max(len(r.input_ids) for r in rows)
        pad_id = self.tokenizer.pad_token_id
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        prompt_index = torch.empty(len(rows), dtype=torch.long)
        for i, row in enumerate(rows):
            n = len(row.input_ids)
            start = width - n if self.padding_side == "left" else 0
            ids[i, start : start + n] = torch.tensor(row.input_ids, dtype=torch.long)
            mask[i, start : start + n] = 1
            prompt_index[i] = start + row.prompt_len - 1
        batch = {
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": position_ids_from_mask(mask),
            "prompt_index": prompt_index,
        }
        cached = cached_likelihood(rows)
        if cached is not None:
            batch["likelihood_stats"] = cached
        return batch
