"""The reference policy pi_ref for the KL penalty (and for reference completions, when a reward needs them).

Which reference is right depends on how training starts (getting this wrong is a classic silent bug):
  no KL term (settings.grpo.no_kl_term:    no reference at all: no copy, no forward pass
  beta = 0) and no reference completions
  fresh LoRA adapter on a plain model      the same module with the adapter disabled (`disable_adapter()`):
                                           exactly the starting policy, at no memory cost
  already-trained (e.g. SFT) adapter       a frozen copy of that adapter + base: disabling it would measure KL
                                           to the bare base model instead of to the starting policy
  full fine-tuning                         a frozen copy of the starting weights
`grpo.reference_mode` picks it: auto (the table above), disable_adapter (fresh adapters only) or frozen_copy
(always a separate frozen copy). For a fresh adapter the last two give the same log-probs (tests), which is
what hypothesis H06 ("the LoRA reference is out of sync") checks.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator

import torch

from prefpipe.common.config import ConfigError
from prefpipe.grpo.logprobs import completion_logprobs

LORA_STATES = ("none", "fresh", "trained")
REFERENCE_MODES = ("auto", "disable_adapter", "frozen_copy")


class ReferencePolicy:
    """Frozen pi_ref: log-probs of given completions and greedy reference completions."""

    def __init__(self, module: torch.nn.Module, via_disable_adapter: bool) -> None:
        self.module = module
        self.via_disable_adapter = via_disable_adapter

    @contextlib.contextmanager
    def active(self) -> Iterator[torch.nn.Module]:
        """The module to call, in eval mode; for a fresh adapter the shared module with the adapter off."""
        was_training = self.module.training
        self.module.eval()
        try:
            if self.via_disable_adapter:
                with self.module.disable_adapter():
                    yield self.module
            else:
                yield self.module
        finally:
            self.module.train(was_training)

    @torch.no_grad()
    def logprobs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        n_completion: int,
        temperature: float,
        micro_batch_size: int | None = None,
    ) -> torch.Tensor:
        with self.active() as model:
            logp, _ = completion_logprobs(
                model, input_ids, attention_mask, n_completion, temperature, micro_batch_size
            )
        return logp

    @torch.no_grad()
    def span_logprobs(self, span, temperature: float) -> torch.Tensor:
        """(k, C) log-probs of a micro-batch (`grpo/algorithm/spans.py` plain_span, or `grpo/algorithm/fast/packing.py`) under pi_ref."""
        with self.active() as model:
            return span.logprobs(model, temperature)[0]


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    ref = copy.deepcopy(model)
    ref.eval()
    ref.requires_grad_(False)
    return ref


def build_reference(
    policy: torch.nn.Module, lora_state: str, needed: bool, mode: str
) -> ReferencePolicy | None:
    """Reference for a policy in `lora_state` (none | fresh | trained) built the `mode` way (REFERENCE_MODES);
    None when nothing needs one."""
    if lora_state not in LORA_STATES:
        raise ValueError(f"lora_state must be one of {LORA_STATES}, got {lora_state!r}")
    if mode not in REFERENCE_MODES:
        raise ConfigError(f"grpo.reference_mode must be one of {REFERENCE_MODES}, got {mode!r}")
    if mode == "disable_adapter" and lora_state != "fresh":
        raise ConfigError(
            f"grpo.reference_mode disable_adapter needs a fresh LoRA adapter (grpo.lora.enabled), but the policy "
            f"is {lora_state!r}: disabling a trained adapter would measure KL to the bare base model"
        )
    if not needed:
        return None
    if lora_state == "fresh" and mode != "frozen_copy":
        return ReferencePolicy(policy, via_disable_adapter=True)
    return ReferencePolicy(frozen_copy(policy), via_disable_adapter=False)
