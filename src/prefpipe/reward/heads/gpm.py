"""General Preference Model head: a 2k-dim embedding per response, optional unit normalisation and prompt
gate; s(a > b | x) is the skew-symmetric block form (prefpipe.reward.scores.gpm_score)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from prefpipe.reward.heads.base import Encoding, RewardHead
from prefpipe.reward.heads.registry import register
from prefpipe.reward.scores import gpm_score, pair_gate

if TYPE_CHECKING:
    from prefpipe.settings.reward import HeadSettings


class PromptGate(nn.Module):
    """lambda(x) = softmax(prompt_head(h_x) / sqrt(H)) * k: per-block scales that sum to k."""

    def __init__(self, hidden_size: int, k: int) -> None:
        super().__init__()
        self.prompt_head = nn.Linear(hidden_size, k, bias=False)
        self.hidden_size = hidden_size
        self.k = k

    def forward(self, h_prompt: torch.Tensor) -> torch.Tensor:
        return F.softmax(self.prompt_head(h_prompt) / math.sqrt(self.hidden_size), dim=-1) * self.k


@register("gpm")
class GPMHead(RewardHead):
    encoding_keys = ("embedding", "gate")

    def __init__(self, input_size: int, prompt_size: int, dim: int, normalize: bool, gate: bool) -> None:
        super().__init__()
        self.value_head = nn.Linear(input_size, dim, bias=False)
        self.gate = PromptGate(prompt_size, dim // 2) if gate else None
        self.normalize = normalize
        self.k = dim // 2

    @classmethod
    def from_settings(cls, settings: HeadSettings, input_size: int, prompt_size: int) -> GPMHead:
        return cls(input_size, prompt_size, settings.dim, settings.normalize, settings.gate)

    def _gate(self, h_prompt: torch.Tensor) -> torch.Tensor:
        if self.gate is None:
            return h_prompt.new_ones(h_prompt.shape[0], self.k)
        return self.gate(h_prompt)

    def forward(self, h: torch.Tensor, h_prompt: torch.Tensor) -> Encoding:
        emb = self.value_head(h)
        if self.normalize:
            emb = F.normalize(emb, p=2, dim=-1)
        return {"embedding": emb, "gate": self._gate(h_prompt)}

    @classmethod
    def score(cls, enc_a: Encoding, enc_b: Encoding) -> tuple[torch.Tensor, torch.Tensor | None]:
        gate = pair_gate(enc_a["gate"], enc_b["gate"])
        return gpm_score(enc_a["embedding"], enc_b["embedding"], gate), None

    def projection_rows(self) -> torch.Tensor:
        return self.value_head.weight

    @classmethod
    def training_score(cls, out_c: Encoding, out_r: Encoding) -> torch.Tensor:
        gate = pair_gate(out_c.get("gate"), out_r.get("gate"))
        return gpm_score(out_c["embedding"], out_r["embedding"], gate)
