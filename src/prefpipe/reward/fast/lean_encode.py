"""Scoring forward of a Llama-architecture reward backbone: the final states at the positions the head reads.

Why: scoring (no gradient) on small backbones spends a large share of the transformers forward outside the
matmuls. Its RMSNorm is five elementwise passes where torch's `F.rms_norm` is one fused kernel; its rotary
embedding is slice/neg/cat/mul/mul/add per tensor where one multiply and two in-place `addcmul_` do; and each
call builds a causal mask and output wrappers. On the 2-layer scratch base, skipping them took 6-13% off the
scoring forward (RewardBench rows at max_length 128, one thread, separate runs); on SmolLM2-135M (matmul-bound)
it is neutral. The `kernels` hub that transformers can swap in for RMSNorm needs a download, which this
pipeline never does.

What: the arithmetic of `LlamaModel.forward` followed by `selected_last_layer`: every layer but the last at
every position; the last layer's keys and values everywhere, its query, attention output, MLP and the final
norm at `index` only (`selected_last_layer.forward_at`, with the fused norm and rotary). The layers' own
Linear modules do the projections, so LoRA adapters and other Linear variants apply as usual; the model's
rotary module gives cos and sin, so every rope variant it implements is honoured. Attention is torch SDPA:
the causal flag for a batch without padding, else causal and real-key masking (a padded query also sees
itself, so no row is fully masked; padded positions are never read).

Only for inference (`RewardModel.encode_dataset`, under inference mode in eval mode): training, the head refit
and the likelihood cache keep the transformers forward, so their numbers are unchanged. The fused norm and
rotary round differently from transformers' (last bits); tests compare states and scores with the plain path.

Plain path it must match: transformers' forward with the selected last layer (RewardModel.encode_dataset
with `lean_scoring` False). Proof: tests/test_reward_lean_encode.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from prefpipe.reward.backbone import unwrap_peft
from prefpipe.reward.fast.selected_last_layer import SUPPORTED_LAYERS, forward_at, last_layer

SUPPORTED_NORMS = ("LlamaRMSNorm",)  # weight * x / rms(x): exactly what F.rms_norm computes


def lean_core(backbone: nn.Module) -> nn.Module | None:
    """The Llama model inside `backbone` when this forward can run it, else None."""
    core = unwrap_peft(backbone)
    if last_layer(core) is None:
        return None
    if not all(hasattr(core, name) for name in ("embed_tokens", "rotary_emb", "norm")):
        return None
    if any(type(layer).__name__ not in SUPPORTED_LAYERS for layer in core.layers):
        return None
    norms = [core.norm] + [n for la in core.layers for n in (la.input_layernorm, la.post_attention_layernorm)]
    if any(type(n).__name__ not in SUPPORTED_NORMS for n in norms):
        return None
    return core


def _norm(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), module.weight, module.variance_epsilon)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x * cos + rotate_half(x) * sin, with rotate_half(x) = (-x2, x1), in three passes."""
    half = x.shape[-1] // 2
    out = x * cos
    out[..., :half].addcmul_(x[..., half:], sin[..., :half], value=-1)
    out[..., half:].addcmul_(x[..., :half], sin[..., half:])
    return out


def _attention_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(N, 1, T, T) bool: causal and real keys; the diagonal is always allowed (padded queries see
    themselves, so SDPA never normalises an empty row)."""
    length = attention_mask.shape[1]
    keys = torch.arange(length, device=attention_mask.device)
    causal = keys[None, :] <= keys[:, None]
    allowed = causal[None, None] & attention_mask.bool()[:, None, None, :]
    return allowed | torch.eye(length, dtype=torch.bool, device=attention_mask.device)


def _layer(layer: nn.Module, x: torch.Tensor, cos_sin: tuple, mask: torch.Tensor | None) -> torch.Tensor:
    """One Llama decoder layer at every position (inference)."""
    attn = layer.self_attn
    n, length, _ = x.shape
    d = attn.head_dim
    cos, sin = (t[:, None] for t in cos_sin)  # (N or 1, 1, T, D): broadcast over heads
    h = _norm(layer.input_layernorm, x)
    q = _rope(attn.q_proj(h).view(n, length, -1, d).transpose(1, 2), cos, sin)
    k = _rope(attn.k_proj(h).view(n, length, -1, d).transpose(1, 2), cos, sin)
    v = attn.v_proj(h).view(n, length, -1, d).transpose(1, 2)
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=mask is None, scale=attn.scaling,
        enable_gqa=q.shape[1] != k.shape[1],
    )  # fmt: skip
    x = x + attn.o_proj(out.transpose(1, 2).reshape(n, length, -1))
    return x + layer.mlp(_norm(layer.post_attention_layernorm, x))


@torch.inference_mode()
def final_states_at(
    core: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    index: torch.Tensor,
    allowed: torch.Tensor,
) -> torch.Tensor:
    """(N, S, H) final-norm states at `index` (N, S), as the backbone's last_hidden_state gives them there.
    attention_mask None: no padding; position_ids None: 0, 1, ... (right padding or none); allowed (N, S, T):
    the keys each read position attends to (`causal_allowed`)."""
    if core.training:
        raise RuntimeError("lean_encode is for inference: call .eval() first")
    x = core.embed_tokens(input_ids)
    if position_ids is None:
        position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
    cos_sin = core.rotary_emb(x, position_ids)  # (N or 1, T, D) each
    mask = None if attention_mask is None else _attention_mask(attention_mask)
    for layer in core.layers[:-1]:
        x = _layer(layer, x, cos_sin, mask)
    x = forward_at(core.layers[-1], x, cos_sin, index, allowed, norm=_norm, rope=_rope)
    return _norm(core.norm, x)
