"""Build a tiny Llama from config, or load a pretrained causal LM, with a pad token distinct from EOS."""

from __future__ import annotations

import logging
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from prefpipe.base.tokenizer import PAD
from prefpipe.common.config import ConfigError
from prefpipe.settings.base import TinyLlamaSettings

log = logging.getLogger(__name__)


def build_tiny_llama(model_cfg: TinyLlamaSettings, tokenizer: Any, seed: int) -> LlamaForCausalLM:
    """A randomly initialised LlamaForCausalLM sized by `base.model` (same seed, same weights)."""
    if model_cfg.hidden_size % model_cfg.num_attention_heads:
        raise ConfigError("base.model.hidden_size must be divisible by base.model.num_attention_heads")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=model_cfg.hidden_size,
        intermediate_size=model_cfg.intermediate_size,
        num_hidden_layers=model_cfg.num_hidden_layers,
        num_attention_heads=model_cfg.num_attention_heads,
        num_key_value_heads=model_cfg.num_key_value_heads or model_cfg.num_attention_heads,
        max_position_embeddings=model_cfg.max_position_embeddings,
        tie_word_embeddings=model_cfg.tie_word_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    set_generation_ids(model, tokenizer)
    return model


def set_generation_ids(model: Any, tokenizer: Any) -> None:
    """Store pad/eos/bos in the generation config so every later `generate` stops and pads correctly."""
    gen = model.generation_config
    gen.pad_token_id = tokenizer.pad_token_id
    gen.eos_token_id = tokenizer.eos_token_id
    gen.bos_token_id = tokenizer.bos_token_id


def load_pretrained(name_or_path: str, trust_remote_code: bool) -> tuple[Any, Any, bool]:
    """Load a causal LM and its tokenizer in fp32; add a PAD token when it is missing or equals EOS.

    Returns (model, tokenizer, pad_added). A shared PAD/EOS id is the classic cause of reward models that
    score chosen and rejected identically, so the base stage never hands such a tokenizer downstream.
    """
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    model = AutoModelForCausalLM.from_pretrained(
        name_or_path, trust_remote_code=trust_remote_code, dtype=torch.float32
    )
    if tokenizer.eos_token_id is None:
        raise ConfigError(f"base.pretrained={name_or_path!r}: the tokenizer has no EOS token")
    pad_added = tokenizer.pad_token_id is None or tokenizer.pad_token_id == tokenizer.eos_token_id
    if pad_added:
        tokenizer.add_special_tokens({"pad_token": PAD})
        model.resize_token_embeddings(len(tokenizer))
        model.config.pad_token_id = tokenizer.pad_token_id
        log.info("added pad token %s (id %d) distinct from eos", PAD, tokenizer.pad_token_id)
    set_generation_ids(model, tokenizer)
    return model, tokenizer, pad_added
