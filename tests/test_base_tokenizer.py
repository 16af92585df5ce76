"""The scratch tokenizer: exact round trip, distinct special tokens, chat format shared with common.chat."""

from __future__ import annotations

import pytest
from support.settings import world_settings
from transformers import AutoTokenizer

from prefpipe.base.tokenizer import BOS, EOS, PAD, train_tokenizer
from prefpipe.common.chat import format_pair, format_prompt
from prefpipe.data.synthetic_world import build_world

SYNTH = world_settings(
    pairs=(20, 4), triples=(6, 3), rl_prompts=(16, 16), demonstrations=300, demo_error_rate=0.3
)


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    world = build_world(SYNTH, seed=1)
    texts = [t for r in world.demonstrations for t in (r["prompt"], r["response"])]
    return texts + [t for r in world.pairs_train for t in (r["prompt"], r["chosen"], r["rejected"])]


@pytest.fixture(scope="module")
def tokenizer(corpus: list[str]):
    return train_tokenizer(corpus, vocab_size=320, model_max_length=128)


@pytest.mark.parametrize(
    "text",
    [
        "Repeat: cat dog",
        "What is 17 + 5?",
        "  two  spaces\nnew line\ttab",
        "Ünïcödé ✓ 🙂 日本",
        "CAT DOG",
        "",
        "x",
    ],
)
def test_round_trip_is_exact(tokenizer, text: str) -> None:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text


def test_special_tokens_are_distinct_single_ids(tokenizer) -> None:
    assert (tokenizer.pad_token, tokenizer.bos_token, tokenizer.eos_token) == (PAD, BOS, EOS)
    ids = {tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id}
    assert len(ids) == 3 and None not in ids
    for token in (PAD, BOS, EOS, "<|user|>", "<|assistant|>"):
        assert len(tokenizer(token, add_special_tokens=False)["input_ids"]) == 1
    assert len(tokenizer) == 320


def test_chat_format_and_prompt_prefix(tokenizer) -> None:
    prompt, response = "Uppercase: cat dog", "CAT DOG"
    assert format_prompt(tokenizer, prompt) == f"{BOS}<|user|>{prompt}<|assistant|>"
    pair = format_pair(tokenizer, prompt, response)
    assert pair == f"{BOS}<|user|>{prompt}<|assistant|>{response}{EOS}"
    full = tokenizer(pair, add_special_tokens=False)["input_ids"]
    head = tokenizer(format_prompt(tokenizer, prompt), add_special_tokens=False)["input_ids"]
    assert full[: len(head)] == head and full[-1] == tokenizer.eos_token_id
    # A response word is the same token in the prompt and at the start of the answer (easy copying).
    assert tokenizer("cat ", add_special_tokens=False)["input_ids"][0] in head
    # No BOS is inserted by default tokenisation of bare text (it comes from the chat template only).
    assert tokenizer("cat dog")["input_ids"][0] != tokenizer.bos_token_id


def test_save_and_reload(tokenizer, tmp_path) -> None:
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = format_pair(loaded, "Sort alphabetically: dog ant", "ant dog")
    assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert loaded.pad_token_id != loaded.eos_token_id
    assert loaded.chat_template == tokenizer.chat_template


def test_vocab_too_small_is_rejected(corpus) -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        train_tokenizer(corpus, vocab_size=100, model_max_length=64)
