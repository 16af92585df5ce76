"""A causal LM's forward in two halves, for log-probs that never hold every position's logits at once
(`grpo.<run>.logprob_chunk_tokens`, grpo/logprobs.py): the decoder to its final hidden states, then the output
layer, which grpo/logprobs.py runs over chunks of positions.

The second half must be exactly what the CausalLM's own forward does after its decoder (transformers 5.24):
  LlamaForCausalLM, Qwen2ForCausalLM, GemmaForCausalLM   logits = lm_head(h)   (the final norm is in the decoder)
  Gemma2ForCausalLM                                      logits = cap * tanh(lm_head(h) / cap),
                                                         cap = config.final_logit_softcapping (None: no cap)
A model type not in OUTPUT_LAYERS is refused (a ConfigError naming the key), never guessed: another model's
forward may scale or cap its logits in a way this table does not know. Tests: tests/test_grpo_chunked_logprobs.py
(every entry against its model's logits).

For a peft-wrapped policy the halves are the wrapped transformers model's own modules, in which LoRA's layers
sit (peft replaces the linear layers in place), so the adapter applies, and `disable_adapter()` turns it off, as
in the wrapper's forward.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from prefpipe.common.config import ConfigError
from prefpipe.common.torch_runtime.transformers_api import unwrap_peft

OutputLayer = Callable[[torch.Tensor], torch.Tensor]


def _linear(model: torch.nn.Module) -> OutputLayer:
    return model.get_output_embeddings()


def _softcapped(model: torch.nn.Module) -> OutputLayer:
    """Gemma-2: the final logit soft-cap after the linear layer, in the logits' dtype, as its forward does."""
    head, cap = model.get_output_embeddings(), model.config.final_logit_softcapping
    if cap is None:
        return head

    def layer(hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(head(hidden) / cap) * cap

    return layer


# config.model_type -> the output layer its CausalLM's forward applies after the decoder
OUTPUT_LAYERS: dict[str, Callable[[torch.nn.Module], OutputLayer]] = {
    "llama": _linear,
    "qwen2": _linear,
    "gemma": _linear,
    "gemma2": _softcapped,
}


def _model_type(model: torch.nn.Module) -> str:
    return getattr(getattr(unwrap_peft(model), "config", None), "model_type", None) or type(model).__name__


def check_splittable(model: torch.nn.Module, key: str) -> None:
    """ConfigError naming `key` unless OUTPUT_LAYERS knows the model's output layer."""
    kind = _model_type(model)
    if kind not in OUTPUT_LAYERS:
        raise ConfigError(
            f"{key}: the log-probs cannot be chunked for model type {kind!r} (known: {sorted(OUTPUT_LAYERS)}, "
            "prefpipe/grpo/output_layer.py); set it to 0"
        )


def decoder(model: torch.nn.Module) -> torch.nn.Module:
    """The CausalLM's decoder (its final hidden states, final norm included), inside any peft wrapper."""
    return unwrap_peft(model).get_decoder()


def output_layer(model: torch.nn.Module) -> OutputLayer:
    """hidden states (..., H) -> the logits (..., V) the CausalLM's forward would return for them."""
    check_splittable(model, "output_layer")
    inner = unwrap_peft(model)
    return OUTPUT_LAYERS[_model_type(model)](inner)
