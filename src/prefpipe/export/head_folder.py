"""Any reward model as a folder that torch + transformers load without prefpipe: the backbone (LoRA merged) and
tokenizer as transformers saves them, the head's weights and settings, the frozen likelihood model when the
head reads it, `reward_loader.py` (prefpipe.export.reward_loader, copied) that scores with them and
`prefpipe_chat.py` (prefpipe.common.chat, copied) that renders its conversations; a Bayesian head also gets
`prefpipe_expected_sigmoid.py` (prefpipe.common.expected_sigmoid, copied), the evaluation's integration of its
P(a > b)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from safetensors.torch import save_file

from prefpipe.common.chat import reply_end
from prefpipe.common.io import atomic_write_json
from prefpipe.export import reward_loader
from prefpipe.export.common import (
    export_tokenizer,
    plain_backbone,
    ship_chat_module,
    ship_expected_sigmoid,
)
from prefpipe.reward import likelihood
from prefpipe.reward.model import RewardModel

LOADER_FILE = "reward_loader.py"


def head_settings(rm: RewardModel) -> dict[str, Any]:
    """reward_head.json: what reward_loader needs besides weights (its docstring gives the math)."""
    spec, head = rm.spec, rm.spec.head
    bayes = head.bayes if rm.bayesian else None
    return {
        "format": reward_loader.FORMAT,
        "head_type": head.type,
        "tau": float(head.tau),
        "dim": head.dim,
        "normalize": head.normalize,
        "prompt_size": spec.hidden_size,
        "logvar_clamp": list(bayes.logvar_clamp) if bayes else None,
        "backbone_kind": spec.backbone_kind,
        "pooling": spec.pooling,
        "max_length": spec.max_length,
        "keep_response": spec.keep_response,
        "reply_end": reply_end(rm.tokenizer),
        "embedding_features": spec.embedding_features,
        "likelihood_features": spec.likelihood_features,
    }


def write_head_folder(rm: RewardModel, folder: Path) -> dict[str, Any]:
    """Save `rm` in the head-folder form in `folder`; returns what the model card reports. A head type the
    loader cannot score is refused before anything is written."""
    settings = head_settings(rm)
    reward_loader.head_type(settings, f"exporting {rm.spec.head.type!r} head")
    plain_backbone(rm).save_pretrained(folder)
    export_tokenizer(rm).save_pretrained(folder)
    weights = {k: v.detach().float().cpu().contiguous() for k, v in rm.head.state_dict().items()}
    save_file(weights, str(folder / reward_loader.HEAD_WEIGHTS))
    atomic_write_json(folder / reward_loader.HEAD_JSON, settings)
    if rm.likelihood_model is not None:
        rm.likelihood_model.save_pretrained(folder / likelihood.FOLDER)
    shutil.copyfile(reward_loader.__file__, folder / LOADER_FILE)
    info = {"format": "head-folder", "loader": LOADER_FILE, "chat": ship_chat_module(folder)}
    if rm.bayesian:
        info["expected_sigmoid"] = ship_expected_sigmoid(folder)
    return info | {"head_type": rm.head_type}
