"""A reward model's life outside training: built fresh for training, saved to its folder, and the one loader
evaluation and GRPO use (the class is prefpipe.reward.network.RewardModel, re-exported here).

Saved folder (<out>/model/): the backbone via save_pretrained (safetensors) or a LoRA adapter plus a
reference to its base, the tokenizer, head.safetensors and head_config.json (head type, dims, tau, pooling,
options, chat formatting, max_length). See docs/reference/CONTRACTS.md. When the trainer refitted the head after
fine-tuning (train.head_fit.after_steps), head_finetuned.safetensors keeps the head as fine-tuned, before the
refit, so evaluation can score both on one backbone pass (`extra_heads`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from prefpipe.common.io import atomic_dir, atomic_write_json, read_json
from prefpipe.common.torch_runtime.model_errors import model_load
from prefpipe.common.torch_runtime.transformers_api import load_peft_adapter
from prefpipe.reward import backbone as bb
from prefpipe.reward import likelihood
from prefpipe.reward.heads.base import RewardHead
from prefpipe.reward.heads.registry import build_head, check_head_settings
from prefpipe.reward.network import POINT_POOLING, RewardModel
from prefpipe.reward.spec import FINETUNED_HEAD_WEIGHTS, HEAD_CONFIG, HEAD_WEIGHTS, ModelSpec
from prefpipe.settings.reward import RewardSettings

# The reward model's API in one import: the class, its folder's description and file names, and the
# functions below that build, save and load it.
__all__ = [
    "FINETUNED_HEAD_WEIGHTS",
    "HEAD_CONFIG",
    "HEAD_WEIGHTS",
    "POINT_POOLING",
    "ModelSpec",
    "RewardModel",
    "build_reward_model",
    "load_finetuned_head",
    "load_reward_model",
    "save_reward_model",
]

log = logging.getLogger(__name__)


def build_reward_model(base: str, settings: RewardSettings) -> RewardModel:
    """Fresh reward model for training: backbone (+ LoRA) from `base` (backbone.model resolved: the base
    model's folder, another folder or a hub id), new head, fixed tokenizer. The head settings are checked
    first (a stage started by hand gets the registry's check before anything loads)."""
    check_head_settings(settings.head)
    bb.offline_hint()
    s = settings.backbone
    config = bb.load_config(base, s.trust_remote_code)
    width = bb.check_usable(str(base), config, s.trust_remote_code)
    kind = bb.backbone_kind(config, s.kind)
    with_likelihood = likelihood.enabled(
        s.likelihood_features, str(base), config, kind, settings.lora.enabled
    )
    tokenizer, pad_fix = bb.load_tokenizer(base, kind, s)
    max_length = settings.data.max_length
    limit = bb.max_positions(config)
    if limit is not None and max_length > limit:
        log.warning(
            "data.max_length %d > backbone max_position_embeddings %d: using %d", max_length, limit, limit
        )
        max_length = limit
    backbone = bb.load_backbone(base, s)
    if settings.lora.enabled:
        backbone = bb.apply_lora(backbone, settings.lora)
    if s.gradient_checkpointing:
        bb.enable_gradient_checkpointing(backbone)
    spec = ModelSpec(
        head=settings.head,
        hidden_size=width,
        backbone_kind=kind,
        pooling=bb.default_pooling(kind, s.pooling),
        max_length=max_length,
        padding_side=settings.data.padding_side,
        keep_response=settings.data.keep_response,
        pad_token_fix=pad_fix,
        trust_remote_code=s.trust_remote_code,
        backbone_format="lora" if settings.lora.enabled else "full",
        base_model=str(base) if settings.lora.enabled else None,
        embedding_features=s.embedding_features,
        likelihood_features=with_likelihood,
    )
    head = build_head(settings.head, spec.head_input_size, spec.hidden_size)
    scorer = bb.load_backbone(base, s) if with_likelihood else None
    log.info(
        "reward model: %s head on a %s backbone (%s pooling%s, hidden %d, head input %d, max_length %d)",
        spec.head.type,
        kind,
        spec.pooling,
        (" + embedding mean" if spec.embedding_features else "")
        + (" + log-likelihood" if spec.likelihood_features else ""),
        spec.hidden_size,
        spec.head_input_size,
        max_length,
    )
    return RewardModel(backbone, head, tokenizer, spec, scorer).set_fast_paths(settings.fast_paths)


def save_reward_model(
    rm: RewardModel,
    folder: str | os.PathLike,
    state_dict: dict[str, torch.Tensor] | None = None,
    finetuned_head: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write the model folder atomically. `state_dict` (full RewardModel keys) overrides the live weights,
    e.g. weights gathered from DeepSpeed ZeRO-3 shards; `finetuned_head` (head keys) is the head before the
    refit, written to head_finetuned.safetensors."""
    folder = Path(folder)
    state = state_dict if state_dict is not None else rm.state_dict()
    backbone_state = {k[len("backbone.") :]: v for k, v in state.items() if k.startswith("backbone.")}
    head_state = {
        k[len("head.") :]: v.detach().float().cpu().contiguous()
        for k, v in state.items()
        if k.startswith("head.")
    }
    spec = rm.spec
    with atomic_dir(folder) as tmp:
        rm.backbone.save_pretrained(tmp, state_dict=backbone_state)
        rm.tokenizer.save_pretrained(tmp)
        save_file(head_state, str(tmp / HEAD_WEIGHTS))
        if finetuned_head is not None:
            kept = {k: v.detach().float().cpu().contiguous() for k, v in finetuned_head.items()}
            save_file(kept, str(tmp / FINETUNED_HEAD_WEIGHTS))
        if rm.likelihood_model is not None:
            rm.likelihood_model.save_pretrained(tmp / likelihood.FOLDER)
        if spec.backbone_format == "lora" and spec.base_model and Path(spec.base_model).exists():
            spec.base_model_relpath = os.path.relpath(Path(spec.base_model).resolve(), folder.resolve())
        atomic_write_json(tmp / HEAD_CONFIG, spec.to_json(rm.tokenizer))
    return folder


def _resolve_base(folder: Path, spec: ModelSpec) -> str:
    if spec.base_model_relpath and (folder / spec.base_model_relpath).exists():
        return str((folder / spec.base_model_relpath).resolve())
    if spec.base_model is None:
        raise ValueError(f"{folder / HEAD_CONFIG}: LoRA model without base_model")
    return spec.base_model


def load_reward_model(
    folder: str | os.PathLike,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    fast_paths: bool | None = None,
) -> RewardModel:
    """Load a saved reward model in eval mode on `device` (the only loader evaluation and GRPO use).
    `fast_paths`: the stage's run-wide setting (RewardModel.set_fast_paths); None leaves the model's paths
    as built (all fast)."""
    folder = Path(folder)
    config_path = folder / HEAD_CONFIG
    if not config_path.exists():
        raise FileNotFoundError(f"{folder}: not a prefpipe reward model folder (no {HEAD_CONFIG})")
    spec = ModelSpec.from_json(read_json(config_path))
    from transformers import AutoModel, AutoTokenizer

    with model_load(folder, "reward model"):
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=spec.trust_remote_code)
        if tokenizer.pad_token_id is None:
            raise ValueError(f"{folder}: saved tokenizer has no pad token")
        if spec.backbone_format == "lora":
            base = AutoModel.from_pretrained(
                _resolve_base(folder, spec), dtype=dtype, trust_remote_code=spec.trust_remote_code
            )
            backbone = load_peft_adapter(base, folder)
        else:
            backbone = AutoModel.from_pretrained(
                folder, dtype=dtype, trust_remote_code=spec.trust_remote_code
            )
        head = build_head(spec.head, spec.head_input_size, spec.hidden_size)
        head.load_state_dict(load_file(str(folder / HEAD_WEIGHTS)), strict=True)
        scorer = None
        if spec.likelihood_features:
            scorer = AutoModel.from_pretrained(
                folder / likelihood.FOLDER, dtype=dtype, trust_remote_code=False
            )
    rm = RewardModel(backbone, head, tokenizer, spec, scorer)
    if fast_paths is not None:
        rm.set_fast_paths(fast_paths)
    return rm.to(device).eval()


def load_finetuned_head(folder: str | os.PathLike, rm: RewardModel) -> RewardHead | None:
    """The head as fine-tuned (before the refit) saved beside `rm`'s own, on its device in eval mode; None
    when the folder has none (no refit, or a model saved before it was kept)."""
    path = Path(folder) / FINETUNED_HEAD_WEIGHTS
    if not path.exists():
        return None
    head = build_head(rm.spec.head, rm.spec.head_input_size, rm.spec.hidden_size)
    head.load_state_dict(load_file(str(path)), strict=True)
    return head.to(rm.device).eval()
