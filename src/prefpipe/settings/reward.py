"""Settings of the train_reward_model rule (`reward`): one variant's resolved settings, `reward.defaults`
merged with the variant.

Types only; the values and their defaults come from config/config.yaml, their ranges from the schema. What
the schema cannot say depends on the head type, which the reward layer's head registry owns: those checks
are `prefpipe.reward.heads.registry.check_head_settings`, run on the whole config by prefpipe.config_checks
and again when a model is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from prefpipe.common.config import ConfigError
from prefpipe.settings.build import to_mapping
from prefpipe.settings.run import RunSettings


@dataclass
class BayesSettings:
    """Bayesian GPM options (read by the bgpm head only); config.yaml's defaults switch on the five
    fixes the ablation turns off one at a time (`ablation.fixes`: warmup, klweight, klmean, prior, logvar)."""

    kl_warmup_steps: int  # warmup fix: linear KL warm-up (0 = full weight from step 0)
    max_kl_weight: float  # klweight fix: about batch / dataset size
    kl_mean: str  # klmean fix: mean used in the KL: normalized | raw | variance_only
    prior_variance: float  # prior fix: the N(0, prior_variance I) prior
    logvar_init_scale: float  # logvar fix (weights): multiplies the logvar half of the head weights at init
    logvar_init_variance: (
        float | None
    )  # logvar fix (offset): learnable logvar offset starting at log(this); None = none
    logvar_clamp: tuple[float, float]


@dataclass
class LengthHeadSettings:
    """A length head beside the head (ODIN, prefpipe.reward.heads.disentangle): trained, never scored."""

    enabled: bool
    length_weight: float  # lambda_L on 1 - rho(r_L, length): the length head follows length
    decorrelation_weight: float  # weight on |rho(quality, length)|: the scored head does not
    orthogonal_weight: float  # lambda_O on mean |cos(w_i, w_L)| over the head's projection rows
    follow: str  # pearson (ODIN: 1 - rho(r_L, L)) | residual (Var r_L (1 - rho^2): r_L's non-length variance)
    decorrelation: str  # abs (ODIN: |rho|) | squared (rho^2) | covariance (cov(x, z)^2 = rho^2 var x)
    warmup_steps: int  # the three weights ramp linearly from 0 at step 0 to full at this step (0: no ramp)
    length_scale: str  # chars | log (log(1 + chars)): the length L every correlation reads


@dataclass
class HeadSettings:
    type: str
    dim: int  # embedding size 2k for gpm/bgpm (must be even)
    tau: float
    normalize: bool
    gate: bool
    standardize: bool  # standardise the head's input with mean/sd over the training responses (head buffers)
    bayes: BayesSettings | None  # null only in model folders saved before every head carried it
    length_head: LengthHeadSettings | None  # null only in model folders saved before length heads existed


@dataclass
class BackboneSettings:
    model: str  # base | a local folder | a hub id | pkg:<module>/<folder> | import:<name> (common.model_ref)
    kind: str  # auto | decoder | encoder
    pooling: str  # auto (decoder: last, encoder: mean) | last | first | mean | response_mean
    embedding_features: bool  # head input = [pooled state ; response-token mean of the input embeddings]
    # auto | True | False: append the mean and min response-token log-prob under the frozen tied LM head
    likelihood_features: bool | str
    trust_remote_code: bool
    gradient_checkpointing: bool
    precision: (
        str  # auto (bf16 autocast on CUDA, fp32 on CPU) | fp32 | bf16 | bf16_master (fp32 master copies)
    )
    pad_token_fix: str  # tokenizer without pad token: eos (decoders only, logged) | error
    attn_implementation: str | None
    kernels: str  # none | liger (common/torch_runtime/kernels.py: fused Triton kernels, CUDA only)
    compile: str  # none | default | reduce-overhead | max-autotune (torch.compile of the backbone, in place)


@dataclass
class LoraSettings:
    enabled: bool
    r: int
    alpha: int
    dropout: float
    target_modules: list[str] | None  # None = peft's defaults for the architecture


@dataclass
class PairDataSettings:
    max_length: int
    keep_response: str  # start | end: the part of a too-long response that truncation keeps (collate.py)
    padding_side: str  # right | left (pooling is mask-based, so both give the same scores)


@dataclass
class HeadFitSettings:
    """Full-batch Adam on the head alone over cached features of every training pair (reward.head_fit)."""

    before_steps: int  # head steps before fine-tuning (0 = none)
    after_steps: int  # head steps on the final backbone's features (0 = none)
    learning_rate: float
    schedule: str  # constant | cosine (decays to 0 over the steps)


@dataclass
class TrainSettings:
    steps: int | None  # optimizer steps; None = epochs * ceil(pairs / batch_size)
    epochs: float
    batch_size: int  # pairs per optimizer step (all processes, all accumulation steps)
    micro_batch_size: int  # pairs per forward pass per process
    length_buckets: int  # at most this many backbone passes per micro-batch over length-sorted rows
    bucket_pass_cost: int  # padded tokens one extra pass costs; chunk cuts minimise tokens + this x passes
    cuda_length_buckets: int  # length_buckets on a CUDA device, where a pass costs far more than padding
    share_prompt: bool  # chosen and rejected behind one copy of their prompt where the model allows it
    packing: bool  # rows end to end without padding (reward/fast/packed.py) where the model allows it
    packing_row_tokens: int  # at most this many tokens per packed row (0: one row per micro-batch)
    learning_rate: float
    head_learning_rate: float | None  # None = learning_rate
    weight_decay: float
    warmup_steps: int
    lr_schedule: str  # linear | cosine | constant
    length_balance: bool  # subsample to equal chosen-longer / chosen-shorter groups
    max_grad_norm: float
    checkpoint_every: int  # optimizer steps between checkpoints (0 = only on SIGTERM)
    metrics_every: int  # optimizer steps between host reads of the metrics (device tensors in between)
    cuda_metrics_every: int  # metrics_every on a CUDA device
    keep_checkpoints: bool
    resume: str  # auto: continue from <out>/checkpoints if present | never
    head_fit: HeadFitSettings


@dataclass
class SanityEvalSettings:
    batch_size: int
    train_pairs: int  # pairs of pairs_train scored for the train-accuracy sanity figure (0 = skip)
    test_pairs: bool  # score pairs_test too (the eval stage scores the same pairs officially)


@dataclass
class RewardSettings(RunSettings):
    stage_schema: ClassVar[str] = "reward.schema.yaml#/$defs/settings"
    derived_keys: ClassVar[tuple[str, ...]] = ("variant",)

    variant: str
    head: HeadSettings
    backbone: BackboneSettings
    lora: LoraSettings
    data: PairDataSettings
    train: TrainSettings
    eval: SanityEvalSettings

    def to_dict(self) -> dict[str, Any]:
        return to_mapping(self)


def accumulation_steps(train: TrainSettings, num_processes: int) -> int:
    """Micro-batches per process per optimizer step; the global batch must split evenly."""
    per_step = train.micro_batch_size * num_processes
    if train.batch_size % per_step:
        raise ConfigError(
            f"train.batch_size ({train.batch_size}) must be a multiple of train.micro_batch_size "
            f"({train.micro_batch_size}) x processes ({num_processes})"
        )
    return train.batch_size // per_step
