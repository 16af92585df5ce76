"""`LeanLlama`'s decode step with every shape and address fixed, so that torch.compile can turn it into one
graph (and, in mode reduce-overhead on CUDA, replay it as a CUDA graph): `grpo.<run>.rollout.compile_decode`.

Plain path it must match: `LeanLlama.step` (grpo/rollout/fast/lean_decode.py), same arithmetic through the same
helpers. Tests: tests/test_grpo_compiled_decode.py (the static step's logits against the lean step's, and the
compiled decode's tokens and log-probs against the eager one's, greedy and sampled).

Why: a decode step of a small policy on a GPU is bound by kernel launches (about 10 per layer, each a few
microseconds of work), which a CUDA graph replays as one launch. A graph needs what the lean step does not
give: the same shapes and the same tensor addresses at every step. So here
  - the KV cache is sized once per rollout shape: rows x (prompt width + max_new_tokens, rounded up to
    CACHE_BUCKET positions, so prompts of a similar width share one graph), and attention always reads all of
    it, the unwritten positions masked by the additive key bias (-inf: exp gives exactly 0);
  - the write position and the rows' positions are device tensors updated in place, not Python ints;
  - finished rows stay in the batch (the compacting loop drops them, which changes the shape); their tokens
    are discarded (grpo/rollout/fast/decode.py);
  - the cache, bias, rotary tables and every weight the step reads keep their addresses across steps and
    rollouts: buffers kept per model (weakly; the cache's, one set per shape) and copied into at the start of a
    rollout (a parameter is read where it is; a LoRA-merged or concatenated weight is copied into its buffer).
Each compiled shape (rows, cache width) is one graph; a shape seen for the first time compiles (seconds to a
minute), so the option pays over a run's many rollouts of one shape, not in a single short decode.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
import torch.nn.functional as F

from prefpipe.grpo.rollout.fast.lean_decode import LeanLlama, attend, mlp, roped_qkv

# grpo.<run>.rollout.compile_decode -> torch.compile's mode; none = the lean step as it is (the static step
# uncompiled only in tests). The schema's enum lists these names (tests/test_grpo_compiled_decode.py).
COMPILE_MODES: dict[str, str | None] = {
    "none": None,
    "default": "default",
    "reduce-overhead": "reduce-overhead",
}
CACHE_BUCKET = 64  # the cache width is a multiple of this many positions

_BUFFERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {slot: tensor}
_COMPILED: dict[str, Callable] = {}


def cache_width(prompt_width: int, max_new_tokens: int) -> int:
    """Positions of the static cache: prompt + new tokens, rounded up to CACHE_BUCKET."""
    return -(-(prompt_width + max_new_tokens) // CACHE_BUCKET) * CACHE_BUCKET


def static_step(weights: dict, state: dict, token: torch.Tensor) -> torch.Tensor:
    """Logits (n, vocab) after writing `token` (n,) at position state["at"] of every row's cache; the cache,
    the key bias, the write position and the rows' positions are updated in place. No shape depends on the step."""
    at, positions, bias = state["at"], state["positions"], state["bias"]
    cos = state["cos"][positions][:, None, :]  # (n, 1, D), broadcast over heads
    sin = state["sin"][positions][:, None, :]
    bias.index_fill_(1, at, 0.0)
    key_bias = bias[:, None, None, :]
    x = F.embedding(token, weights["embed"])
    for layer, keys, values in zip(weights["layers"], state["k"], state["v"], strict=True):
        q_k, v = roped_qkv(x, layer, cos, sin, keys.shape[1])
        keys.index_copy_(2, at, q_k[:, -keys.shape[1] :, None])
        values.index_copy_(2, at, v[:, :, None])
        x = x + attend(q_k, keys, values, key_bias, layer["o"])
        x = x + mlp(x, layer)
    at.add_(1)
    positions.add_(1)
    return F.linear(F.rms_norm(x, (x.shape[-1],), *weights["norm"]), *weights["head"])


def compiled_step(mode: str) -> Callable:
    """`static_step` compiled in torch.compile mode `mode` (one compiled function per mode, shared by every
    model; each shape it meets is compiled once); `none` gives `static_step` itself."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile_decode {mode!r} is not one of {sorted(COMPILE_MODES)}")
    if COMPILE_MODES[mode] is None:
        return static_step
    if mode not in _COMPILED:
        _COMPILED[mode] = torch.compile(static_step, mode=COMPILE_MODES[mode], dynamic=False, fullgraph=True)
    return _COMPILED[mode]


class _Slots:
    """Tensors at fixed addresses, one per name, reused while the shape and dtype stay the same."""

    def __init__(self, store: dict[str, torch.Tensor]) -> None:
        self.store = store

    def empty(self, name: str, like: torch.Tensor, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        shape = tuple(like.shape) if shape is None else shape
        buf = self.store.get(name)
        if buf is None or tuple(buf.shape) != shape or buf.dtype != like.dtype or buf.device != like.device:
            buf = like.new_empty(shape)
            torch._dynamo.mark_static_address(buf)
            self.store[name] = buf
        return buf

    def hold(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """A parameter as it is (updated in place, its address fixed); any other tensor copied into a slot."""
        if isinstance(tensor, torch.nn.Parameter):
            torch._dynamo.mark_static_address(tensor)
            return tensor
        return self.empty(name, tensor).copy_(tensor)


class StaticDecode:
    """`LeanLlama.start`/`step` over fixed shapes and addresses, stepping through `compiled_step(mode)`."""

    def __init__(self, model: torch.nn.Module, lean: LeanLlama, mode: str) -> None:
        self.lean, self.mode, self.run = lean, mode, compiled_step(mode)
        self.slots = _Slots(_BUFFERS.setdefault(model, {}))

    @torch.no_grad()
    def _weights(self) -> dict:
        hold, lean = self.slots.hold, self.lean
        layers = []
        for i, layer in enumerate(lean.layers):
            held = {}
            for key, value in layer.items():
                if isinstance(value, list):
                    held[key] = [hold(f"{i}.{key}.{j}", w) for j, w in enumerate(value)]
                elif isinstance(value, tuple):  # (norm weight, eps)
                    held[key] = (hold(f"{i}.{key}", value[0]), value[1])
                else:
                    held[key] = hold(f"{i}.{key}", value)
            layers.append(held)
        head_w, head_b = lean.head
        head = (hold("head", head_w), None if head_b is None else hold("head.bias", head_b))
        norm = (hold("norm", lean.norm[0]), lean.norm[1])
        return {"embed": hold("embed", lean.embed), "layers": layers, "norm": norm, "head": head}

    @torch.no_grad()
    def start(
        self, cache, attention_mask: torch.Tensor, positions: torch.Tensor, max_new_tokens: int
    ) -> None:
        """As `LeanLlama.start`: the prefilled cache (rows x prompt width) copied into the static one."""
        lean = self.lean
        n, width = attention_mask.shape
        total = cache_width(width, max_new_tokens)

        def empty(name: str, like: torch.Tensor, shape: tuple[int, ...] | None = None) -> torch.Tensor:
            # one set per shape: rollouts of alternating shapes each keep their graph's addresses
            return self.slots.empty(f"{n}x{total}.{name}", like, shape)

        self.weights = self._weights()
        ks, vs = [], []
        for i in range(len(lean.layers)):
            for name, prefilled, into in (("k", cache.layers[i].keys, ks), ("v", cache.layers[i].values, vs)):
                buf = empty(f"{name}{i}", prefilled, (n, lean.kv_heads, total, lean.head_dim)).zero_()
                buf[:, :, :width] = prefilled
                into.append(buf)
        bias = empty("bias", lean.embed, (n, total)).fill_(float("-inf"))
        bias[:, :width].masked_fill_(attention_mask.bool(), 0.0)
        at = empty("at", positions, (1,)).fill_(width)
        cos, sin = lean.rotary(lean.embed[:1, None, :], torch.arange(total, device=positions.device)[None, :])
        self.state = {
            "k": ks, "v": vs, "bias": bias, "at": at, "positions": empty("positions", positions).copy_(positions),
            "cos": empty("cos", cos[0]).copy_(cos[0]), "sin": empty("sin", sin[0]).copy_(sin[0]),
        }  # fmt: skip

    @torch.no_grad()
    def step(self, token: torch.Tensor) -> torch.Tensor:
        """Logits (n, vocab) after appending `token` (n,) to every row (finished rows included)."""
        if self.mode == "reduce-overhead":  # the previous step's logits were read: the graph may reuse them
            torch.compiler.cudagraph_mark_step_begin()
        return self.run(self.weights, self.state, token)
