"""What both export forms need from a loaded reward model: its backbone as one plain transformers model (a
LoRA adapter merged into its base), its tokenizer padding on the right, as prefpipe scores, and prefpipe's text
renderer (and, for a Bayesian head, the evaluation's integration of P(a > b)) shipped beside them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from torch import nn

from prefpipe.common import chat, expected_sigmoid
from prefpipe.export.reward_loader import CHAT_FILE, EXPECTED_SIGMOID_FILE
from prefpipe.reward.model import RewardModel


def plain_backbone(rm: RewardModel) -> nn.Module:
    """The backbone with any LoRA adapter merged into its weights (the model is changed in place: export a
    model loaded for the purpose)."""
    merge = getattr(rm.backbone, "merge_and_unload", None)
    return merge() if callable(merge) else rm.backbone


def export_tokenizer(rm: RewardModel) -> Any:
    """The reward model's tokenizer set to pad on the right: the exported models read the last real token by
    its position, and a left-padded batch would shift the positions transformers' forward counts from 0."""
    tokenizer = rm.tokenizer
    tokenizer.padding_side = "right"
    return tokenizer


def ship_chat_module(folder: Path) -> str:
    """Copy prefpipe.common.chat (standard library only) into `folder` as CHAT_FILE: the exported model renders
    a conversation + reply with the very function prefpipe's reward inputs come from (`format_pairs`), not a
    re-implementation that could drift. Returns the file's name."""
    shutil.copyfile(chat.__file__, folder / CHAT_FILE)
    return CHAT_FILE


def ship_expected_sigmoid(folder: Path) -> str:
    """Copy prefpipe.common.expected_sigmoid (numpy and torch only) into `folder`: the loader integrates a Bayesian
    head's P(a > b) with the code the evaluation's per-pair probabilities come from. Returns the file's name."""
    shutil.copyfile(expected_sigmoid.__file__, folder / EXPECTED_SIGMOID_FILE)
    return EXPECTED_SIGMOID_FILE
