"""Bradley-Terry head: one scalar reward per response, s(a > b) = r(a) - r(b)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from prefpipe.reward.heads.base import Encoding, RewardHead
from prefpipe.reward.heads.registry import register

if TYPE_CHECKING:
    from prefpipe.settings.reward import HeadSettings


@register("bt")
class BTHead(RewardHead):
    encoding_keys = ("reward",)

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.value_head = nn.Linear(hidden_size, 1)

    @classmethod
    def from_settings(cls, settings: HeadSettings, input_size: int, prompt_size: int) -> BTHead:
        return cls(input_size)  # head.dim is unused; no prompt input

    def forward(self, h: torch.Tensor, h_prompt: torch.Tensor) -> Encoding:
        return {"reward": self.value_head(h).squeeze(-1)}

    @classmethod
    def score(cls, enc_a: Encoding, enc_b: Encoding) -> tuple[torch.Tensor, torch.Tensor | None]:
        return enc_a["reward"] - enc_b["reward"], None

    def projection_rows(self) -> torch.Tensor:
        return self.value_head.weight

    def linear_reward(self) -> tuple[torch.Tensor, float]:
        weight = self.value_head.weight.detach().double()  # (1, F)
        bias = float(self.value_head.bias.detach().double())
        norm = self._modules.get("input_norm")
        if norm is not None:  # w . ((h - mean) * inv_sd) + b = (w * inv_sd) . h + (b - (w * inv_sd) . mean)
            weight = weight * norm.inv_sd.double()
            bias -= float((weight * norm.mean.double()).sum())
        return weight, bias

    @classmethod
    def training_score(cls, out_c: Encoding, out_r: Encoding) -> torch.Tensor:
        return out_c["reward"] - out_r["reward"]

    @classmethod
    def rewards(cls, enc: Encoding) -> torch.Tensor:
        return enc["reward"]
