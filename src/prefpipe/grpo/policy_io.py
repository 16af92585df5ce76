"""Loading a policy (hub id, plain folder or a trained LoRA adapter folder) and saving the trained one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from prefpipe.common.io import atomic_dir
from prefpipe.common.torch_runtime.device import resolve_device
from prefpipe.common.torch_runtime.model_errors import model_load
from prefpipe.common.torch_runtime.transformers_api import get_peft_model, load_peft_adapter
from prefpipe.settings.grpo import GrpoLoraSettings

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def is_adapter_folder(path: str | os.PathLike) -> bool:
    return (Path(path) / "adapter_config.json").exists()


def load_tokenizer(path: str | os.PathLike):
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if tokenizer.pad_token is None:  # left padding needs a pad id; pad positions are always masked
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_policy(
    path: str | os.PathLike,
    lora: GrpoLoraSettings | None,
    dtype: str,
    device: str,
):
    """(model, tokenizer, lora_state): lora_state is none (full fine-tuning), fresh or trained (adapter folder)."""
    torch_dtype = DTYPES[dtype]
    target = resolve_device(device, "grpo.device")
    with model_load(path, "policy"):
        model, tokenizer, state = _load(path, torch_dtype)
    if state == "none" and lora is not None and lora.enabled:
        from peft import LoraConfig

        config = LoraConfig(
            r=lora.r,
            lora_alpha=lora.alpha,
            lora_dropout=lora.dropout,
            target_modules=lora.target_modules,
            task_type="CAUSAL_LM",
        )
        return get_peft_model(model, config).to(target), tokenizer, "fresh"
    return model.to(target), tokenizer, state


def _load(path: str | os.PathLike, torch_dtype: torch.dtype):
    """(model, tokenizer, "trained" for an adapter folder else "none"), on the CPU."""
    if is_adapter_folder(path):
        base_path = json.loads((Path(path) / "adapter_config.json").read_text())["base_model_name_or_path"]
        base = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch_dtype)
        model = load_peft_adapter(base, str(path), is_trainable=True)
        has_tokenizer = (Path(path) / "tokenizer_config.json").exists()
        tokenizer = load_tokenizer(path if has_tokenizer else base_path)
        return model, tokenizer, "trained"
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype)
    return model, load_tokenizer(path), "none"


def load_for_inference(path: str | os.PathLike, device: str):
    """A policy for evaluation (adapter folders are merged into their base), eval mode, no grad."""
    model, tokenizer, state = load_policy(path, None, "float32", device)
    if state == "trained":
        model = model.merge_and_unload()
    model.eval().requires_grad_(False)
    return model, tokenizer


def save_policy(model, tokenizer, folder: str | os.PathLike, merge_lora: bool = True) -> Path:
    """save_pretrained (safetensors) atomically; a LoRA policy is merged first unless merge_lora is False."""
    with atomic_dir(folder) as tmp:
        to_save = model
        if merge_lora and hasattr(model, "merge_and_unload"):
            import copy

            to_save = copy.deepcopy(model).merge_and_unload()
        to_save.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
    return Path(folder)
