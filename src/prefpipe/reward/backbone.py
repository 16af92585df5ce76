"""Load any transformers backbone (hub id or local folder) and its tokenizer for a reward model.

AutoModel gives the bare transformer (no LM head). Decoder vs encoder decides the default pooling. A
tokenizer without a pad token is either fixed deliberately (pad = eos for decoders; pooling is mask-based,
so pad == eos is safe) and logged, or refused, by config.
"""

from __future__ import annotations

import inspect
import logging
import os
from typing import Any

import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    MODEL_MAPPING_NAMES,
)

from prefpipe.common.config import ConfigError
from prefpipe.common.torch_runtime.model_errors import model_load
from prefpipe.common.torch_runtime.transformers_api import (
    get_peft_model,
    set_activation_checkpointing,
    unwrap_peft,
)
from prefpipe.settings.reward import BackboneSettings, LoraSettings

log = logging.getLogger(__name__)
KEY = "backbone.model"  # the setting a loading error names


def backbone_kind(model_config: Any, requested: str = "auto") -> str:
    """'encoder' for masked-LM architectures (BERT, MiniLM, RoBERTa, ...), else 'decoder'."""
    if requested != "auto":
        return requested
    is_encoder = model_config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(
        model_config, "is_decoder", False
    )
    return "encoder" if is_encoder else "decoder"


def default_pooling(kind: str, requested: str = "auto") -> str:
    if requested != "auto":
        return requested
    return "last" if kind == "decoder" else "mean"


def fix_pad_token(tokenizer: Any, kind: str, policy: str, source: str) -> str | None:
    """Give a pad-less tokenizer a pad token per `backbone.pad_token_fix`; returns the fix applied. `source`
    (the model path or hub id) is named in the error."""
    if tokenizer.pad_token_id is not None:
        return None
    if policy == "eos" and kind == "decoder" and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
        log.warning(
            "tokenizer has no pad token: using eos %r as pad (safe: pooling uses the attention mask)",
            tokenizer.eos_token,
        )
        return "eos"
    raise ConfigError(
        f"{source}: tokenizer has no pad token (backbone.pad_token_fix={policy!r}, backbone kind {kind!r}); "
        "set backbone.pad_token_fix: eos for a decoder with an eos token, or add a pad token to the tokenizer"
    )


def load_tokenizer(source: str, kind: str, settings: BackboneSettings) -> tuple[Any, str | None]:
    with model_load(source, KEY):
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=settings.trust_remote_code)
    return tokenizer, fix_pad_token(tokenizer, kind, settings.pad_token_fix, source)


def load_backbone(
    source: str, settings: BackboneSettings, dtype: torch.dtype = torch.float32
) -> torch.nn.Module:
    kwargs: dict[str, Any] = {"trust_remote_code": settings.trust_remote_code, "dtype": dtype}
    if settings.attn_implementation:
        kwargs["attn_implementation"] = settings.attn_implementation
    with model_load(source, KEY):
        return AutoModel.from_pretrained(source, **kwargs)


def load_config(source: str, trust_remote_code: bool) -> Any:
    with model_load(source, KEY):
        return AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)


def check_usable(source: str, model_config: Any, trust_remote_code: bool) -> int:
    """Refuse, naming the model, an architecture a reward backbone cannot be built on; returns its hidden
    size. The backbone is the bare transformer (AutoModel) whose last hidden states are pooled, so it needs an
    AutoModel class, one stack of hidden states (not an encoder-decoder) and a hidden size."""
    name = f"backbone.model {source!r} ({model_config.model_type})"
    remote = trust_remote_code and "AutoModel" in (getattr(model_config, "auto_map", None) or {})
    if model_config.model_type not in MODEL_MAPPING_NAMES and not remote:
        raise ConfigError(f"{name}: transformers has no AutoModel class for this architecture")
    if getattr(model_config, "is_encoder_decoder", False):
        raise ConfigError(
            f"{name}: encoder-decoder models cannot be reward backbones (use an encoder or decoder)"
        )
    try:
        return hidden_size(model_config)
    except ConfigError as err:
        raise ConfigError(f"{name}: {err}") from err


def hidden_size(model_config: Any) -> int:
    for key in ("hidden_size", "d_model", "n_embd", "dim"):
        value = getattr(model_config, key, None)
        if isinstance(value, int):
            return value
    text_config = getattr(model_config, "text_config", None)
    if text_config is not None:
        return hidden_size(text_config)
    raise ConfigError(f"cannot find the hidden size in the backbone config ({type(model_config).__name__})")


def max_positions(model_config: Any) -> int | None:
    value = getattr(model_config, "max_position_embeddings", None)
    return value if isinstance(value, int) and value > 0 else None


def accepts_position_ids(model: torch.nn.Module) -> bool:
    """Whether forward takes position_ids (then left padding gets mask-based positions)."""
    target = unwrap_peft(model)
    return "position_ids" in inspect.signature(target.forward).parameters


def lora_targets(model: torch.nn.Module, requested: list[str] | str | None) -> list[str] | str | None:
    """lora.target_modules as given; null: peft's defaults for the architecture, or every linear layer
    ("all-linear") where peft has none (Phi-3's fused qkv_proj; peft would refuse)."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as DEFAULTS

    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if requested is not None or model_type in DEFAULTS:
        return requested
    log.info("lora.target_modules null: peft has no defaults for %r, using all-linear", model_type)
    return "all-linear"


def apply_lora(model: torch.nn.Module, lora: LoraSettings) -> torch.nn.Module:
    """Wrap in a task-agnostic peft LoRA; target modules from config or peft's per-architecture defaults
    (`lora_targets`)."""
    from peft import LoraConfig

    targets = lora_targets(model, lora.target_modules)
    config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets)
    try:
        peft_model = get_peft_model(model, config)
    except ValueError as err:
        raise ConfigError(f"lora.target_modules: {err}") from err
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    log.info(
        "LoRA r=%d on %s: %d trainable backbone parameters",
        lora.r,
        sorted(peft_model.peft_config["default"].target_modules),
        trainable,
    )
    return peft_model


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    target = unwrap_peft(model)
    if not getattr(target, "supports_gradient_checkpointing", False):
        raise ConfigError(f"backbone.gradient_checkpointing: {type(target).__name__} does not support it")
    set_activation_checkpointing(target, True)
    if hasattr(target.config, "use_cache"):
        target.config.use_cache = False


def offline_hint() -> None:
    """Log whether hub downloads are disabled; the pipeline never needs the network for local folders."""
    if os.environ.get("HF_HUB_OFFLINE") != "1":
        log.info("HF_HUB_OFFLINE is not set: a hub id may be downloaded")
