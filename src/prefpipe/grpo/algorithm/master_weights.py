"""fp32 master weights for a policy held in bf16/fp16 (`grpo.*.dtype: bfloat16`).

An optimizer stepping half-precision parameters in place loses every update smaller than the parameter's
rounding step: bf16 keeps 8 significant bits, so a weight of 0.02 moves only by multiples of about 1e-4 and an
Adam step of lr = 1e-6 vanishes (the run trains nothing, silently). Here the optimizer steps fp32 copies of the
trainable parameters (the model's half-precision gradients cast up), and the model gets the copies rounded after
each step, as mixed-precision trainers keep their master weights. The forward and backward stay in the policy's
dtype; log-probs and losses are fp32 anyway (grpo/logprobs.py casts the logits, grpo/algorithm/losses.py the log-probs).

Its state_dict holds the inner optimizer's state and the fp32 copies, so a resumed run continues from the same
fp32 values, not from their rounding. Tests: tests/test_grpo_precision.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

HALF = (torch.bfloat16, torch.float16)


class MasterWeights:
    """The optimizer interface the GRPO trainer uses (param_groups, zero_grad, step, state_dict,
    load_state_dict) over fp32 copies of `params`; `make` builds the inner optimizer on the copies."""

    def __init__(
        self, params: list[torch.nn.Parameter], make: Callable[[list[torch.Tensor]], torch.optim.Optimizer]
    ) -> None:
        self.params = params
        self.master = [p.detach().float().clone() for p in params]
        self.inner = make(self.master)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.inner.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None
        self.inner.zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def step(self) -> None:
        for master, p in zip(self.master, self.params, strict=True):
            master.grad = None if p.grad is None else p.grad.float()
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
