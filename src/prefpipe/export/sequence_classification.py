"""A reward model whose head gives a linear reward (BT) as a standard transformers
`AutoModelForSequenceClassification` folder.

Such a model computes logit = w . h_last with h_last the final state at the last token that is not padding and
a score layer without bias. That is prefpipe's BT reward exactly when the head reads only the last token's final
state: the standardisation (h - mean) / sd folds into w, and the head's bias b' (after folding) is the one part
the class cannot carry. logit = r(x, y) - b' for every row, so preferences r(a) - r(b) and sigmoid((r(a) - r(b)) /
tau) are unchanged; b' is stored in config.json as `prefpipe_reward_offset` (and tau as `prefpipe_tau`) for
whoever needs the reward itself.

A head reading more than that (backbone.embedding_features: the response tokens' mean input embedding;
backbone.likelihood_features: log-probs under a frozen copy of the base), an encoder backbone (its class
reads a pooler, not prefpipe's pooling), another pooling or a model that keeps a too-long response's end
(data.keep_response: end) has no such class: `why_not_standard` says why, and the export writes the head-folder
form instead (prefpipe.export.head_folder). The class reads a row whole: prefpipe cuts a row longer than
max_length (`prefpipe_max_length` in config.json; prompt tokens from the left first), and the model card says to
score such rows with the head-folder form, whose loader cuts them as prefpipe does.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForSequenceClassification
from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

from prefpipe.common.chat import reply_end, reply_start
from prefpipe.export.common import export_tokenizer, plain_backbone, ship_chat_module
from prefpipe.reward.heads.base import RewardHead
from prefpipe.reward.heads.registry import HEADS
from prefpipe.reward.model import RewardModel

PAD_TOKEN = "<|prefpipe_pad|>"  # added when the tokenizer pads with its EOS token


def linear_reward_heads() -> list[str]:
    """The registered head types whose reward is one linear map of the features (`RewardHead.linear_reward`)."""
    return sorted(name for name, cls in HEADS.items() if cls.linear_reward is not RewardHead.linear_reward)


def exportable_config() -> str:
    """The reward config that trains a model this form takes (the refusal names it)."""
    return (
        f"head.type: {' | '.join(linear_reward_heads())} on a decoder backbone with backbone.pooling: last (or "
        "auto), backbone.embedding_features: false, backbone.likelihood_features: false and data.keep_response: "
        "start"
    )


def why_not_standard(rm: RewardModel) -> str | None:
    """Why this reward model has no faithful AutoModelForSequenceClassification form (None: it has one)."""
    spec, model_type = rm.spec, rm.config.model_type
    reasons = []
    if type(rm.head).linear_reward is RewardHead.linear_reward:
        reasons.append(
            f"head.type is {spec.head.type!r} (only a head whose reward is one linear map of the final state "
            f"has a score layer: {', '.join(linear_reward_heads())})"
        )
    if spec.backbone_kind != "decoder":
        reasons.append("the backbone is an encoder (its sequence-classification class reads the pooler)")
    if spec.pooling != "last":
        reasons.append(f"backbone.pooling is {spec.pooling!r} (the class reads the last token)")
    if spec.embedding_features:
        reasons.append(
            "backbone.embedding_features is on (the head reads the response's mean input embedding)"
        )
    if spec.likelihood_features:
        reasons.append(
            "backbone.likelihood_features is on (the head reads log-probs under a frozen base copy)"
        )
    if spec.keep_response == "end":
        reasons.append(
            "data.keep_response is 'end' (prefpipe keeps a too-long response's end, a cut the class's tokenizer "
            "cannot make)"
        )
    if model_type not in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES:
        reasons.append(f"transformers has no sequence-classification class for {model_type!r}")
    return "; ".join(reasons) or None


def _pad_apart(tokenizer: Any, model: torch.nn.Module) -> None:
    """The class finds the last real token as the last one that is not the pad token: a tokenizer padding
    with the token that ends every formatted row (EOS, or the template's turn end) gets a pad token of its own,
    and the embeddings a row."""
    pad = tokenizer.pad_token
    if pad is not None and pad != tokenizer.eos_token and not (reply_end(tokenizer) or "").endswith(pad):
        return
    tokenizer.add_special_tokens({"pad_token": PAD_TOKEN})
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)


def write_sequence_classification(rm: RewardModel, folder: Path) -> dict[str, Any]:
    """Save `rm` (a model `why_not_standard` accepts) as an AutoModelForSequenceClassification folder in
    `folder`; returns what the model card reports."""
    reason = why_not_standard(rm)
    if reason is not None:
        raise ValueError(
            f"not exportable as AutoModelForSequenceClassification: {reason}; train with {exportable_config()}"
        )
    backbone = plain_backbone(rm)
    tokenizer = export_tokenizer(rm)
    weight, offset = rm.head.linear_reward()
    config = copy.deepcopy(backbone.config)
    config.num_labels = 1
    config.id2label, config.label2id = {0: "reward"}, {"reward": 0}
    model = AutoModelForSequenceClassification.from_config(config, dtype=backbone.dtype)
    model.base_model.load_state_dict(backbone.state_dict(), strict=True)
    _pad_apart(tokenizer, model)
    with torch.no_grad():
        model.score.weight.copy_(weight.to(model.score.weight.dtype))
    model.config.pad_token_id = tokenizer.pad_token_id
    model.config.prefpipe_reward_offset = offset
    model.config.prefpipe_tau = rm.tau
    model.config.prefpipe_max_length = rm.spec.max_length
    model.config.prefpipe_reply_start = reply_start(tokenizer)
    model.config.prefpipe_reply_end = reply_end(tokenizer)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {
        "format": "sequence-classification",
        "chat": ship_chat_module(folder),
        "architecture": type(model).__name__,
        "reward_offset": offset,
        "pad_token_added": tokenizer.pad_token == PAD_TOKEN,
    }
