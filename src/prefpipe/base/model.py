"""Build a tiny Llama from config, or load a pretrained causal LM, with a pad token distinct from EOS."""

from __future__ import annotations

import logging
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

from prefpipe.base.tokenizer import PAD
from prefpipe.common.config import ConfigError
from prefpipe.common.torch_runtime.model_errors import model_load
from prefpipe.settings.base import TinyLlamaSettings

log = logging.getLogger(__name__)


def build_tiny_llama(model_settings: TinyLlamaSettings, tokenizer: Any, seed: int) -> LlamaForCausalLM:
    """A randomly initialised LlamaForCausalLM sized by `base.model` (same seed, same weights)."""
    if model_settings.hidden_size % model_settings.num_attention_heads:
        raise ConfigError("base.model.hidden_size must be divisible by base.model.num_attention_heads")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=model_settings.hidden_size,
        intermediate_size=model_settings.intermediate_size,
        num_hidden_layers=model_settings.num_hidden_layers,
        num_attention_heads=model_settings.num_attention_heads,
        num_key_value_heads=model_settings.num_key_value_heads or model_settings.num_attention_heads,
        max_position_embeddings=model_settings.max_position_embeddings,
        tie_word_embeddings=model_settings.tie_word_embeddings,
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


def check_causal_lm(name_or_path: str, model: Any, loading_info: dict[str, Any]) -> None:
    """A policy must be a causal LM whose every weight came from the checkpoint. transformers otherwise
    initialises what is missing at random with only a warning: an encoder such as all-MiniLM-L6-v2 loads as
    BertLMHeadModel with a random LM head, and a checkpoint without its LM head gets a fresh one."""
    config = model.config
    if getattr(config, "is_encoder_decoder", False):
        raise ConfigError(f"base.pretrained={name_or_path!r}: an encoder-decoder model cannot be the policy")
    missing = sorted(loading_info.get("missing_keys") or [])
    encoder = config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(
        config, "is_decoder", False
    )
    if encoder or missing:
        what = f"an encoder ({config.model_type}), not a causal LM; " if encoder else ""
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        weights = (
            f"weights missing from the checkpoint would be randomly initialised: {shown}" if missing else ""
        )
        raise ConfigError(
            f"base.pretrained={name_or_path!r} ({type(model).__name__}): {what}{weights}".rstrip("; ")
            + " (use it as a reward backbone, reward.defaults.backbone.model, or pick a causal LM checkpoint)"
        )


def load_pretrained(name_or_path: str, trust_remote_code: bool) -> tuple[Any, Any, bool]:
    """Load a causal LM and its tokenizer in fp32; add a PAD token when it is missing or equals EOS.

    Returns (model, tokenizer, pad_added). A shared PAD/EOS id is the classic cause of reward models that
    score chosen and rejected identically, so the base stage never hands such a tokenizer downstream. Never
    adds a randomly initialised head silently (check_causal_lm).
    """
    with model_load(name_or_path, "base.pretrained"):
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    with model_load(name_or_path, "base.pretrained"):  # also: no causal-LM class for this architecture
        model, loading_info = AutoModelForCausalLM.from_pretrained(
            name_or_path, trust_remote_code=trust_remote_code, dtype=torch.float32, output_loading_info=True
        )
    check_causal_lm(name_or_path, model, loading_info)
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
