"""Tokenisation, truncation and mask-based pooling on a real tiny tokenizer and Llama."""

from __future__ import annotations

import pytest
import torch
from support.models import build_reward, pair_tokenizer, save_tiny_base
from transformers import AutoModel

from prefpipe.common.chat import format_pair, format_prompt
from prefpipe.reward.collate import PairEncoder, TokenizedRow, truncate_row
from prefpipe.reward.pooling import (
    first_token_index,
    last_token_index,
    mean_pool,
    pool,
    position_ids_from_mask,
)

SPECIAL = {1, 2}  # <s>, </s> in the hand-made id lists below


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    return save_tiny_base(tmp_path_factory.mktemp("tiny_base"))


def test_truncate_keeps_bos_last_prompt_token_and_whole_response():
    ids = [1, 10, 11, 12, 13, 14, 20, 21, 2]  # <s> p p p p p r r </s>, prompt_len 6
    row, cut = truncate_row(ids, 6, 6, SPECIAL, "start")
    assert cut == "prompt"
    assert row.input_ids == [1, 13, 14, 20, 21, 2]  # dropped from the LEFT of the prompt, BOS kept
    assert row.prompt_len == 3 and row.input_ids[row.prompt_len - 1] == 14


def test_truncate_cuts_response_only_when_unavoidable_and_keeps_eos():
    ids = [1, 10, 11, 20, 21, 22, 23, 24, 2]
    row, cut = truncate_row(ids, 3, 6, SPECIAL, "start")
    assert cut == "response"
    assert row.input_ids == [1, 11, 20, 21, 22, 2]  # BOS, last prompt token, response head, EOS
    assert row.prompt_len == 2
    assert truncate_row(ids, 3, 9, SPECIAL, "start") == (TokenizedRow(ids, 3), "")


def test_encoder_locates_last_prompt_token_from_the_formatted_prompt():
    tok = pair_tokenizer()
    enc = PairEncoder(tok, max_length=64, padding_side="right", keep_response="start")
    row = enc.tokenize("What is 2 plus 3?", "The answer is 5.")
    full = tok(format_pair(tok, "What is 2 plus 3?", "The answer is 5."))["input_ids"]
    prompt = tok(format_prompt(tok, "What is 2 plus 3?"))["input_ids"]
    assert row.input_ids == full and full[0] == tok.bos_token_id and full[-1] == tok.eos_token_id
    assert row.input_ids[: row.prompt_len] == prompt[: row.prompt_len]
    assert tok.decode(row.input_ids[row.prompt_len :], skip_special_tokens=True).strip() == "The answer is 5."


def test_encoder_counts_truncations_and_pads_both_sides():
    tok = pair_tokenizer()
    enc = PairEncoder(tok, max_length=12, padding_side="right", keep_response="start")
    rows = enc.tokenize_many(["What is 2 plus 3? " * 4, "Play!"], ["5", "rock"])
    assert enc.truncated == {"prompt": 1} and rows[0].cut == "prompt" and len(rows[0].input_ids) == 12
    right = enc.pad(rows)
    enc.padding_side = "left"
    left = enc.pad(rows)
    short = len(rows[1].input_ids)
    assert right["attention_mask"][1].tolist() == [1] * short + [0] * (12 - short)
    assert left["attention_mask"][1].tolist() == [0] * (12 - short) + [1] * short
    assert left["prompt_index"][1] == right["prompt_index"][1] + 12 - short
    assert right["input_ids"][1, short:].eq(tok.pad_token_id).all()
    assert left["position_ids"][1, 12 - short :].tolist() == list(range(short))


def test_pool_indices_under_left_and_right_padding():
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert last_token_index(mask).tolist() == [2, 4, 4]
    assert first_token_index(mask).tolist() == [0, 2, 0]
    hidden = torch.arange(15.0).reshape(3, 5, 1).expand(3, 5, 2).clone()
    hidden[0, 3:] = float("nan")  # garbage at pad positions must not leak into the mean
    torch.testing.assert_close(mean_pool(hidden, mask)[:, 0], torch.tensor([1.0, 8.0, 12.0]))
    assert position_ids_from_mask(mask)[1].tolist() == [0, 0, 0, 1, 2]


def test_response_mean_averages_only_the_tokens_after_the_prompt_under_both_paddings():
    mask = torch.tensor([[1, 1, 1, 1, 0], [0, 1, 1, 1, 1]])
    prompt_index = torch.tensor([1, 2])  # last prompt token: row 0 at 1, row 1 (left-padded) at 2
    hidden = torch.arange(10.0).reshape(2, 5, 1)
    hidden[0, 4] = float("nan")  # padding
    # by hand: row 0 averages positions 2, 3 -> (2 + 3) / 2; row 1 positions 3, 4 -> (8 + 9) / 2
    torch.testing.assert_close(
        pool(hidden, mask, "response_mean", prompt_index)[:, 0], torch.tensor([2.5, 8.5])
    )
    with pytest.raises(ValueError, match="response_mean"):
        pool(hidden, mask, "response_mean")


def _unpadded_last_hidden(model, ids: list[int]) -> torch.Tensor:
    x = torch.tensor([ids])
    return model(input_ids=x, attention_mask=torch.ones_like(x)).last_hidden_state[0, -1]


def test_last_token_pooling_matches_unpadded_under_left_right_and_pad_eq_eos(tiny_base):
    model = AutoModel.from_pretrained(tiny_base).eval()
    for pad_is_eos in (False, True):
        tok = pair_tokenizer()
        if pad_is_eos:
            tok.pad_token = tok.eos_token
        enc = PairEncoder(tok, max_length=64, padding_side="right", keep_response="start")
        rows = enc.tokenize_many(
            ["What is 2 plus 3?", "Play!", "Your move?"], ["5", "rock", "I pick paper now"]
        )
        expected = torch.stack([_unpadded_last_hidden(model, r.input_ids) for r in rows])
        for side in ("right", "left"):
            enc.padding_side = side
            batch = enc.pad(rows)
            with torch.no_grad():
                hidden = model(
                    input_ids=batch["input_ids"],
                    attention_mask=batch["attention_mask"],
                    position_ids=batch["position_ids"],
                ).last_hidden_state
            torch.testing.assert_close(
                pool(hidden, batch["attention_mask"], "last"), expected, atol=1e-5, rtol=0
            )
            # A token-id rule (first eos) would pick position 0 of the padding run when pad == eos:
            if pad_is_eos and side == "right":
                first_eos = (batch["input_ids"][0] == tok.eos_token_id).nonzero()[0, 0]
                assert first_eos == last_token_index(batch["attention_mask"])[0]  # longest row: no padding
                assert (batch["input_ids"][1] == tok.eos_token_id).sum() > 1  # shorter row: eos + pads


def test_prompt_gate_position_under_both_padding_sides(tiny_base):
    rm, _ = build_reward(tiny_base, "gpm")
    rm.eval()
    prompts, responses = ["What is 2 plus 3?", "Play!"], ["The answer is 5.", "rock"]
    out = {}
    for side in ("right", "left"):
        rm.encoder.padding_side = side
        out[side] = rm.encode(prompts, responses, batch_size=2)
    torch.testing.assert_close(out["right"]["gate"], out["left"]["gate"], atol=1e-5, rtol=0)
    torch.testing.assert_close(out["right"]["embedding"], out["left"]["embedding"], atol=1e-5, rtol=0)
