"""Run a decoder backbone's last layer only at the positions the reward head reads.

Why: with last-token (or first-token) pooling the head reads the final layer's output at two positions per
row, the pooled token and the prompt's last token. Every earlier layer must run everywhere (later positions
attend to them), but in the last layer only the keys and values are needed at every position: its queries,
attention output, output projection, MLP and the final norm matter at the read positions alone. Computing
those at 2 positions instead of all T removes about (q + o + MLP) / (q + k + v + o + MLP) of the last layer's
matmul work, i.e. most of 1 / num_layers of the backbone (~43% on the 2-layer scratch base, ~3% on a 30-layer
model), in scoring and in training alike. transformers has no switch for it (its `logits_to_keep` trims only
the LM head), hence this.

How: `selected_last_layer(backbone, index, allowed)` swaps the last decoder layer's `forward` for the
duration of one backbone call (no module is added or renamed, so state dicts, LoRA and checkpoints are
unchanged); the call's `last_hidden_state` is then (N, S, H), the final-norm states at `index` (N, S). The
layer's own submodules (norms, q/k/v/o projections, MLP) do the arithmetic, so LoRA adapters and any Linear
variant apply as usual; attention is torch SDPA with the explicit mask the caller gives (causal by index and
the key padding mask for plain rows, `causal_allowed`; the shared-prompt mask for `shared_prompt` rows). Only
Llama-architecture layers are recognised (`last_layer`); anything else keeps the plain path. A test compares
scores, losses and gradients with the plain path.

Plain path it must match: the backbone's own forward over every position of the last layer
(RewardModel.features with `selected_last_layer` False). Proof: tests/test_reward_selected_last_layer.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.llama.modeling_llama import rotate_half

from prefpipe.reward.backbone import unwrap_peft

SUPPORTED_LAYERS = ("LlamaDecoderLayer",)


def last_layer(backbone: nn.Module) -> nn.Module | None:
    """The backbone's last decoder layer when its architecture is recognised, else None."""
    core = unwrap_peft(backbone)
    layers = getattr(core, "layers", None)
    model_config = getattr(core, "config", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0 or model_config is None:
        return None
    if len(layers) != getattr(model_config, "num_hidden_layers", -1):
        return None  # the model's forward would not run every layer
    layer = layers[-1]
    if type(layer).__name__ not in SUPPORTED_LAYERS:
        return None
    attn = getattr(layer, "self_attn", None)
    needed = ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "scaling")
    if attn is None or not all(hasattr(attn, name) for name in needed):
        return None
    return layer


def _norm(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return module(x)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """transformers' apply_rotary_pos_emb for one tensor (cos and sin broadcast over its heads)."""
    return x * cos + rotate_half(x) * sin


Norm = Callable[[nn.Module, torch.Tensor], torch.Tensor]
Rope = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def forward_at(
    layer: nn.Module,
    hidden: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    index: torch.Tensor,
    allowed: torch.Tensor,
    norm: Norm = _norm,
    rope: Rope = _rope,
) -> torch.Tensor:
    """The Llama decoder layer's output at `index` (N, S) only: (N, S, H); allowed (N, S, T): the keys each
    of those queries may attend to. `norm(module, x)` and `rope(x, cos, sin)` do the layer's RMSNorm and
    rotary embedding (transformers' own by default; `lean_encode` passes fused ones)."""
    attn = layer.self_attn
    n, length, _ = hidden.shape
    rows = torch.arange(n, device=hidden.device)[:, None]
    normed = norm(layer.input_layernorm, hidden)
    at = normed[rows, index]  # (N, S, H)
    d = attn.head_dim
    q = attn.q_proj(at).view(n, index.shape[1], -1, d).transpose(1, 2)  # (N, heads, S, D)
    k = attn.k_proj(normed).view(n, length, -1, d).transpose(1, 2)  # (N, kv heads, T, D)
    v = attn.v_proj(normed).view(n, length, -1, d).transpose(1, 2)
    cos, sin = (t.expand(n, -1, -1) for t in position_embeddings)  # (N or 1, T, D) -> (N, T, D)
    q = rope(q, cos[rows, index][:, None], sin[rows, index][:, None])
    k = rope(k, cos[:, None], sin[:, None])
    dropout = attn.attention_dropout if attn.training else 0.0
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=allowed[:, None], dropout_p=dropout, scale=attn.scaling,
        enable_gqa=q.shape[1] != k.shape[1],
    )  # fmt: skip
    x = hidden[rows, index] + attn.o_proj(out.transpose(1, 2).reshape(n, index.shape[1], -1))
    return x + layer.mlp(norm(layer.post_attention_layernorm, x))


def causal_allowed(index: torch.Tensor, key_mask: torch.Tensor | None, length: int) -> torch.Tensor:
    """(N, S, T) keys a query at `index` (N, S) sees in a causal padded row: earlier or equal positions that
    are real tokens (key_mask (N, T), None: no padding)."""
    keys = torch.arange(length, device=index.device)
    allowed = keys[None, None, :] <= index[:, :, None]
    return allowed if key_mask is None else allowed & key_mask.bool()[:, None, :]


@contextmanager
def selected_last_layer(backbone: nn.Module, index: torch.Tensor, allowed: torch.Tensor) -> Iterator[None]:
    """Within the block, one backbone call returns the final states at `index` (N, S) only, as its
    last_hidden_state (N, S, H). allowed (N, S, T): the keys each of those queries attends to (the rows of
    the call's attention mask at `index`; `causal_allowed` for plain padded rows)."""
    layer = last_layer(backbone)
    if layer is None:
        raise ValueError(
            f"{type(unwrap_peft(backbone)).__name__}: last layer not supported for selected positions"
        )

    def forward(hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        embeddings = kwargs.get("position_embeddings")
        if embeddings is None:
            raise RuntimeError("selected_last_layer: the model did not pass position_embeddings")
        return forward_at(layer, hidden_states, embeddings, index, allowed)

    layer.forward = forward  # instance attribute: shadows the class method for this call only
    try:
        yield
    finally:
        del layer.forward
