"""Reward heads on top of pooled hidden states: Bradley-Terry scalar, GPM embedding, Bayesian GPM.

Each head maps (h_response (N, H), h_prompt (N, H)) to a dict of float32 tensors. Heads always run in
fp32 (autocast off) so scores do not depend on the backbone's mixed precision.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from prefpipe.reward.scores import sample_embedding
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


class BTHead(nn.Module):
    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.value_head = nn.Linear(hidden_size, 1)

    def forward(self, h: torch.Tensor, h_prompt: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"reward": self.value_head(h).squeeze(-1)}


class GPMHead(nn.Module):
    def __init__(self, hidden_size: int, dim: int, normalize: bool, gate: bool) -> None:
        super().__init__()
        self.value_head = nn.Linear(hidden_size, dim, bias=False)
        self.gate = PromptGate(hidden_size, dim // 2) if gate else None
        self.normalize = normalize
        self.k = dim // 2

    def _gate(self, h_prompt: torch.Tensor) -> torch.Tensor:
        if self.gate is None:
            return h_prompt.new_ones(h_prompt.shape[0], self.k)
        return self.gate(h_prompt)

    def forward(self, h: torch.Tensor, h_prompt: torch.Tensor) -> dict[str, torch.Tensor]:
        emb = self.value_head(h)
        if self.normalize:
            emb = F.normalize(emb, p=2, dim=-1)
        return {"embedding": emb, "gate": self._gate(h_prompt)}


class BayesianGPMHead(GPMHead):
    """Linear(H, 2 * 2k) -> (raw_mean, logvar); mean = normalize(raw_mean); samples only in train mode."""

    def __init__(self, hidden_size: int, dim: int, normalize: bool, gate: bool, settings) -> None:
        super().__init__(hidden_size, dim, normalize, gate)
        self.value_head = nn.Linear(hidden_size, 2 * dim, bias=False)
        self.dim = dim
        self.clamp = settings.logvar_clamp
        with torch.no_grad():  # fix 5a: shrink the logvar half so logvar barely depends on the input at init
            self.value_head.weight[dim:, :].mul_(settings.logvar_init_scale)
        # fix 5b: the weight scaling alone leaves logvar ~ 0 (variance ~ 1); an offset starting at
        # log(init variance) is what actually gives the intended small initial variance.
        if settings.logvar_init_variance is not None:
            self.logvar_bias = nn.Parameter(torch.full((dim,), math.log(settings.logvar_init_variance)))
        else:
            self.logvar_bias = None

    def forward(self, h: torch.Tensor, h_prompt: torch.Tensor) -> dict[str, torch.Tensor]:
        raw_mean, logvar = self.value_head(h).split(self.dim, dim=-1)
        if self.logvar_bias is not None:
            logvar = logvar + self.logvar_bias
        logvar = logvar.clamp(*self.clamp)
        mean = F.normalize(raw_mean, p=2, dim=-1) if self.normalize else raw_mean
        var = logvar.exp()
        out = {"mean": mean, "var": var, "logvar": logvar, "raw_mean": raw_mean, "gate": self._gate(h_prompt)}
        if self.training:
            out["sample"] = sample_embedding(mean, var, self.normalize)
        return out


def build_head(settings: HeadSettings, hidden_size: int) -> nn.Module:
    if settings.type == "bt":
        return BTHead(hidden_size)
    if settings.type == "gpm":
        return GPMHead(hidden_size, settings.dim, settings.normalize, settings.gate)
    if settings.type == "bgpm":
        return BayesianGPMHead(hidden_size, settings.dim, settings.normalize, settings.gate, settings.bayes)
    raise ValueError(f"head.type: unknown head {settings.type!r}")
