"""Settings of the build_base rule (`base`): the base policy, built from scratch or loaded pretrained, then SFT."""

from __future__ import annotations

from dataclasses import dataclass

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
    source: str  # scratch | pretrained
    pretrained: str | None
    trust_remote_code: bool
    tokenizer: TokenizerSettings
    model: TinyLlamaSettings
    sft: SFTSettings
    heldout_eval: HeldoutEvalSettings
