"""Real tiny components for the GRPO tests: a byte-level BPE tokenizer trained here and a 2-layer Llama.

Imported by the other tests/test_grpo_*.py (pytest puts tests/ on sys.path); it holds no tests itself.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch
import yaml
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

GRPO_SCHEMA = Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "grpo.schema.yaml"
SPECIALS = ["<pad>", "<bos>", "<eos>"]
CORPUS = [
    "What is 2 plus 3? 5",
    "What is 7 plus 1? 8",
    "Say yes. yes",
    "Say no. no",
    "Repeat cat: cat",
    "the quick brown fox jumps over the lazy dog",
    "0 1 2 3 4 5 6 7 8 9",
    "abcdefghijklmnopqrstuvwxyz",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "Answer with one word.",
]


@functools.lru_cache(maxsize=2)
def _tokenizer_json(vocab_size: int) -> str:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS * 20, trainer)
    return tok.to_str()


def tiny_tokenizer(vocab_size: int = 320, chat_template: bool = False) -> PreTrainedTokenizerFast:
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tokenizer_json(vocab_size)),
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
    )
    if chat_template:
        tok.chat_template = (
            "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}"
        )
    return tok


def tiny_llama(tokenizer, seed: int = 0, hidden: int = 32, layers: int = 2) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


@functools.lru_cache(maxsize=1)
def _reward_spec_defaults() -> dict:
    props = yaml.safe_load(GRPO_SCHEMA.read_text())["$defs"]["reward_fn"]["properties"]
    return {key: prop["default"] for key, prop in props.items() if "default" in prop}


def reward_spec(type_: str, **overrides) -> dict:
    """A complete `grpo.rewards` entry as the settings layer passes it: the schema's defaults, then overrides."""
    return {**_reward_spec_defaults(), "type": type_, **overrides}
