"""fp32 master weights for a model held in bf16/fp16: a GRPO policy (`grpo.*.dtype: bfloat16`) and a reward
model trained with `reward.*.backbone.precision: bf16_master`.

An optimizer stepping half-precision parameters in place loses every update smaller than the parameter's
rounding step: bf16 keeps 8 significant bits, so a weight of 0.02 moves only by multiples of about 1e-4 and an
Adam step of lr = 1e-6 vanishes (the run trains nothing, silently). Here the optimizer steps fp32 copies of the
trainable parameters (the model's half-precision gradients cast up), and the model gets the copies rounded after
each step, as mixed-precision trainers keep their master weights. The forward and backward stay in the policy's
dtype; log-probs and losses are fp32 anyway (grpo/logprobs.py casts the logits, grpo/algorithm/losses.py the log-probs).

Its state_dict holds the inner optimizer's state and the fp32 copies, so a resumed run continues from the same
fp32 values, not from their rounding. `clip_grad_norm_` clips the fp32 gradients of the copies (the reward
trainer's path: the norm is computed in fp32, not from bf16 gradients); `step` casts the gradients up itself when
nothing clipped them first. Tests: tests/test_grpo_precision.py, tests/test_reward_master_weights.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

HALF = (torch.bfloat16, torch.float16)


class MasterWeights:
    """An optimizer's interface (param_groups, zero_grad, step, state_dict, load_state_dict; clip_grad_norm_)
    over fp32 copies of `params`; `make` builds the inner optimizer on the copies."""

    def __init__(
        self, params: list[torch.nn.Parameter], make: Callable[[list[torch.Tensor]], torch.optim.Optimizer]
    ) -> None:
        self.params = params
        self.master = [p.detach().float().clone() for p in params]
        self.inner = make(self.master)
        self._cast = False  # the gradients of this step are already on the copies (clip_grad_norm_)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.inner.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None
        self.inner.zero_grad(set_to_none=set_to_none)

    def _grads_to_master(self) -> None:
        for master, p in zip(self.master, self.params, strict=True):
            master.grad = None if p.grad is None else p.grad.float()

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Cast this step's gradients up onto the fp32 copies and clip them to `max_norm` in place; returns
        their total norm before clipping (a device tensor: no host sync)."""
        self._grads_to_master()
        self._cast = True
        return torch.nn.utils.clip_grad_norm_(self.master, max_norm)

    @torch.no_grad()
    def step(self) -> None:
        if not self._cast:
            self._grads_to_master()
        self._cast = False
        self.inner.step()
        for master, p in zip(self.master, self.params, strict=True):
            p.copy_(master)

    def state_dict(self) -> dict[str, Any]:
        return {"inner": self.inner.state_dict(), "master": [m.clone() for m in self.master]}

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state["inner"])
        for master, p, value in zip(self.master, self.params, state["master"], strict=True):
            master.copy_(value)
            p.copy_(master)


def needs_master_weights(params: list[torch.nn.Parameter]) -> bool:
    """Some trainable parameter is half precision (a LoRA adapter on a bf16 base is fp32: peft's default)."""
    return any(p.dtype in HALF for p in params)
