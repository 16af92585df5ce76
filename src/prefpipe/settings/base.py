"""Settings of the build_base rule (`base`): the base policy, built from scratch or loaded pretrained, then SFT."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from prefpipe.common.config import require
from prefpipe.settings.run import RunSettings


@dataclass
class TokenizerSettings:
    vocab_size: int


@dataclass
class TinyLlamaSettings:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int | None  # null = num_attention_heads
    max_position_embeddings: int
    tie_word_embeddings: bool

    def check(self) -> None:
        """The attention shapes a Llama needs: heads split the hidden size, and key-value heads are shared by
        equal groups of attention heads (grouped-query attention repeats each one heads / kv_heads times)."""
        heads, kv_heads = self.num_attention_heads, self.num_key_value_heads
        require(
            self.hidden_size % heads == 0,
            "model.hidden_size",
            f"{self.hidden_size} is not divisible by model.num_attention_heads ({heads})",
        )
        if kv_heads is not None:
            require(
                heads % kv_heads == 0,
                "model.num_key_value_heads",
                f"{kv_heads} does not divide model.num_attention_heads ({heads}); null means as many as those",
            )


@dataclass
class SFTSettings:
    enabled: bool
    steps: int
    batch_size: int
    learning_rate: float
    warmup_steps: int
    min_lr_ratio: float
    weight_decay: float
    grad_clip: float
    max_length: int
    chosen_from_pairs: bool  # also train on the chosen replies of the training preference pairs


@dataclass
class HeldoutEvalSettings:
    max_new_tokens: int
    temperature: float
    top_p: float
    batch_size: int


@dataclass
class BaseSettings(RunSettings):
    stage_schema: ClassVar[str] = "base.schema.yaml"

    source: str  # scratch | pretrained
    pretrained: str | None
    trust_remote_code: bool
    device: str  # auto | cpu | cuda | cuda:N
    tokenizer: TokenizerSettings
    model: TinyLlamaSettings
    sft: SFTSettings
    heldout_eval: HeldoutEvalSettings

    def check(self) -> None:
        self.model.check()
