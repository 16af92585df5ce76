"""The optimised scoring path (RewardModel.encode_dataset: batched tokenisation, distinct rows once,
length-bucketed batches, no attention mask on equal-length batches) gives the plain path's tokens and scores:
per-row tokenisation and mask-padded batches in row order, on the same rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.models import build_reward, chat_tokenizer, pair_tokenizer, save_tiny_base

from prefpipe.common.io import read_jsonl
from prefpipe.evaluation.pair_scoring import score_pairs
from prefpipe.reward.batching import plan_batches
from prefpipe.reward.collate import PairEncoder


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    return save_tiny_base(tmp_path_factory.mktemp("tiny_base"))


@pytest.fixture(scope="module")
def rows(shared_data):
    real = read_jsonl(shared_data / "rewardbench_real_subsets.jsonl")
    picked = real[:12] + real[-12:]  # long LLMBar rows (cut at max_length) and short XSTest ones
    short = [{"prompt": "Play!", "chosen": "rock", "rejected": "paper"}] * 3  # equal lengths, duplicates
    return picked + short + picked[:2]


def _columns(rows):
    return [r["prompt"] for r in rows], [r["chosen"] for r in rows], [r["rejected"] for r in rows]


def _plain_encode(rm, prompts, responses, batch_size=5):
    """The plain path: tokenise row by row, pad each batch (row order) to its longest row with a mask."""
    keys = rm.head.encoding_keys
    tokenized = [rm.encoder.tokenize(p, r) for p, r in zip(prompts, responses, strict=True)]
    parts = {k: [] for k in keys}
    with torch.inference_mode():
        for start in range(0, len(tokenized), batch_size):
            out = rm(**rm.encoder.pad(tokenized[start : start + batch_size]))
            for k in keys:
                parts[k].append(out[k].float())
    return {k: torch.cat(v) for k, v in parts.items()}


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("max_length", [24, 512])
def test_batched_tokenisation_equals_row_by_row(rows, chat, max_length):
    tok = chat_tokenizer(chat_template=True) if chat else pair_tokenizer()
    one, many = PairEncoder(tok, max_length, "right", "start"), PairEncoder(tok, max_length, "right", "start")
    prompts, chosen, rejected = _columns(rows)
    responses = chosen + rejected
    expected = [one.tokenize(p, r) for p, r in zip(prompts + prompts, responses, strict=True)]
    assert many.tokenize_batch(prompts + prompts, responses) == expected
    assert many.truncated == one.truncated
    if max_length == 24:
        assert one.truncated["response"] > 0


@pytest.mark.parametrize(
    ("head", "backbone"),
    [
        ("bt", {"embedding_features": False, "pooling": "last"}),
        ("gpm", {"embedding_features": True, "pooling": "last"}),
        ("bgpm", {"embedding_features": True, "pooling": "response_mean"}),
        ("gpm", {"embedding_features": False, "pooling": "mean"}),
    ],
)
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_every_optimised_path_gives_the_plain_scores(tiny_base, rows, head, backbone, padding_side):
    rm, _ = build_reward(
        tiny_base, head, data={"max_length": 48, "padding_side": padding_side}, backbone=backbone
    )
    rm.eval()
    prompts, chosen, rejected = _columns(rows)
    plain_c = _plain_encode(rm, prompts, chosen)
    plain_r = _plain_encode(rm, prompts, rejected)
    before = dict(rm.encoder.truncated)
    for batch_size in (1, 4, 16, 64):  # 1: every batch unmasked; larger: unmasked and padded batches mixed
        rm.encoder.truncated.clear()
        enc, n_batches = rm.encode_dataset(prompts + prompts, chosen + rejected, batch_size)
        assert dict(rm.encoder.truncated) == before  # counts per row, duplicates included
        n = len(rows)
        for key in rm.head.encoding_keys:
            torch.testing.assert_close(enc[key][:n], plain_c[key], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(enc[key][n:], plain_r[key], atol=1e-5, rtol=1e-5)
        distinct = len(set(zip(prompts + prompts, chosen + rejected, strict=True)))
        assert n_batches >= -(-distinct // batch_size)
    score, _ = rm.compare(plain_c, plain_r)
    fast = score_pairs(rm, prompts, chosen, rejected, batch_size=16)
    np.testing.assert_allclose(fast.score, score.double().numpy(), atol=1e-5, rtol=1e-5)


class _GenericScorer:
    """The model behind the generic PairScorer protocol only (no encode_dataset): encode per batch."""

    def __init__(self, rm):
        self.rm, self.head_type, self.tau, self.bayesian = rm, rm.head_type, rm.tau, rm.bayesian

    def encode(self, prompts, responses, batch_size):
        return self.rm.encode(prompts, responses, batch_size)

    def compare(self, enc_a, enc_b):
        return self.rm.compare(enc_a, enc_b)


def test_score_pairs_fast_path_equals_the_generic_path(tiny_base, rows):
    rm, _ = build_reward(tiny_base, "bgpm", data={"max_length": 48})
    rm.eval()
    cols = _columns(rows)
    fast = score_pairs(rm, *cols, batch_size=8)
    generic = score_pairs(_GenericScorer(rm), *cols, batch_size=8)
    np.testing.assert_allclose(fast.score, generic.score, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(fast.variance, generic.variance, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("batch_size", [1, 3, 4, 100])
def test_plan_batches_covers_every_row_once_longest_first(batch_size):
    lengths = [5, 3, 5, 5, 7, 3, 5, 2, 7, 5, 1]
    batches = plan_batches(lengths, batch_size)
    flat = [i for b in batches for i in b.rows]
    assert sorted(flat) == list(range(len(lengths)))
    assert all(0 < len(b.rows) <= batch_size for b in batches)
    for b in batches:
        assert b.uniform == (len({lengths[i] for i in b.rows}) == 1)
    widths = [max(lengths[i] for i in b.rows) for b in batches]
    assert widths == sorted(widths, reverse=True)
    if batch_size == 4:  # the four 5s form one unmasked batch; the fifth 5 joins the leftovers
        assert any(b.uniform and [lengths[i] for i in b.rows] == [5] * 4 for b in batches)
