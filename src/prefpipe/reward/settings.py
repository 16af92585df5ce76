"""Reward-stage config: defaults, validation and typed access.

The Snakemake rule passes one resolved mapping (reward defaults deep-merged with a variant's overrides). Every
value is checked here once, so a typo or an impossible combination fails before any model is loaded, with a
message naming the dotted config key. Defaults for the Bayesian head are the design-note "fixed" settings.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from prefpipe.common.config import ConfigError

KL_MEANS = ("normalized", "raw", "variance_only")
TOP_LEVEL_KEYS = {
    "experiment",
    "seed",
    "torch_threads",
    "wandb",
    "variant",
    "head",
    "backbone",
    "lora",
    "data",
    "train",
    "eval",
}


@dataclass
class BayesSettings:
    """Bayesian GPM options (valid only with head.type 'bgpm'); defaults are the design-note fixes."""

    kl_warmup_steps: int = 1000  # fix 1: linear KL warm-up (0 = full weight from step 0)
    max_kl_weight: float = 1e-4  # fix 2: about batch / dataset size
    kl_mean: str = "normalized"  # fix 3: mean used in the KL: normalized | raw | variance_only
    prior_variance: float = 10.0  # fix 4
    logvar_init_scale: float = 0.1  # fix 5a: multiplies the logvar half of the head weights at init
    logvar_init_variance: float | None = (
        0.1  # fix 5b: learnable logvar offset starting at log(this); None = none
    )
    logvar_clamp: tuple[float, float] = (-8.0, 2.0)
    mc_samples: int = 64  # Monte Carlo samples for P(c > r) in the sanity evaluation


@dataclass
class HeadSettings:
    type: str = "gpm"
    dim: int = 6  # embedding size 2k for gpm/bgpm (must be even)
    tau: float = 0.1
    normalize: bool = True
    gate: bool = True
    bayes: BayesSettings | None = None


@dataclass
class BackboneSettings:
    kind: str = "auto"  # auto | decoder | encoder
    pooling: str = "auto"  # auto (decoder: last, encoder: mean) | last | first | mean
    trust_remote_code: bool = False
    gradient_checkpointing: bool = False
    precision: str = "auto"  # auto (bf16 autocast on CUDA, fp32 on CPU) | fp32 | bf16
    pad_token_fix: str = "eos"  # tokenizer without pad token: eos (decoders only, logged) | error
    attn_implementation: str | None = None


@dataclass
class LoraSettings:
    enabled: bool = False
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: list[str] | None = None  # None = peft's defaults for the architecture


@dataclass
class DataSettings:
    max_length: int = 512
    padding_side: str = "right"  # right | left (pooling is mask-based, so both give the same scores)


@dataclass
class TrainSettings:
    steps: int | None = None  # optimizer steps; None = epochs * ceil(pairs / batch_size)
    epochs: float = 2.0
    batch_size: int = 32  # pairs per optimizer step (all processes, all accumulation steps)
    micro_batch_size: int = 32  # pairs per forward pass per process
    learning_rate: float = 1e-5
    head_learning_rate: float | None = None  # None = learning_rate
    weight_decay: float = 0.0
    warmup_steps: int = 0
    lr_schedule: str = "cosine"  # linear | cosine | constant
    max_grad_norm: float = 1.0
    checkpoint_every: int = 0  # optimizer steps between checkpoints (0 = only on SIGTERM)
    keep_checkpoints: bool = False
    resume: str = "auto"  # auto: continue from <out>/checkpoints if present | never


@dataclass
class EvalSettings:
    batch_size: int = 32
    train_pairs: int = 512  # pairs of pairs_train scored for the train-accuracy sanity figure (0 = skip)


@dataclass
class RewardSettings:
    seed: int = 0
    torch_threads: int = 0
    wandb: dict[str, Any] = field(default_factory=dict)
    head: HeadSettings = field(default_factory=HeadSettings)
    backbone: BackboneSettings = field(default_factory=BackboneSettings)
    lora: LoraSettings = field(default_factory=LoraSettings)
    data: DataSettings = field(default_factory=DataSettings)
    train: TrainSettings = field(default_factory=TrainSettings)
    eval: EvalSettings = field(default_factory=EvalSettings)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fill(cls: type, values: dict[str, Any] | None, prefix: str) -> Any:
    """Build dataclass `cls` from a mapping, rejecting unknown keys (a typo must not fall back to a default)."""
    values = dict(values or {})
    if not isinstance(values, dict):
        raise ConfigError(f"{prefix} must be a mapping")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown config key(s) {', '.join(prefix + '.' + k for k in unknown)}")
    return cls(**values)


def _check(condition: bool, key: str, message: str) -> None:
    if not condition:
        raise ConfigError(f"{key}: {message}")


def _positive_int(value: Any, key: str, allow_zero: bool = False) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and (value >= 0 if allow_zero else value > 0)
    _check(ok, key, f"expected a {'non-negative' if allow_zero else 'positive'} integer, got {value!r}")


def _head_class(name: str) -> type:
    from prefpipe.reward.heads import get_head_class  # heads import torch and this module: import on use

    return get_head_class(name)


def _validate_head(head: HeadSettings) -> None:
    head_class = _head_class(head.type)  # unknown type: ConfigError naming head.type and the known heads
    _check(isinstance(head.tau, int | float) and head.tau > 0, "head.tau", f"must be > 0, got {head.tau!r}")
    head_class.check_settings(head)  # dim, bayes options, ...: each head checks its own keys


def parse_settings(cfg: dict[str, Any]) -> RewardSettings:
    """Validate the stage config and return typed settings; raises ConfigError naming the bad key."""
    if not isinstance(cfg, dict):
        raise ConfigError("reward config must be a mapping")
    if "reward" in cfg:  # nested form {"seed": .., "reward": {...}}: same keys, one level down
        section = cfg["reward"]
        if not isinstance(section, dict) or "variants" in section or "defaults" in section:
            raise ConfigError(
                "reward: pass one variant's resolved settings (defaults merged with the variant)"
            )
        cfg = {**{k: v for k, v in cfg.items() if k != "reward"}, **section}
    unknown = sorted(set(cfg) - TOP_LEVEL_KEYS)
    if unknown:
        raise ConfigError(f"unknown top-level reward config key(s): {', '.join(unknown)}")
    head_raw = dict(cfg.get("head") or {})
    raw_bayes = head_raw.pop("bayes", None)
    head = _fill(HeadSettings, head_raw, "head")
    bayesian = _head_class(head.type).bayesian
    if raw_bayes is not None and not bayesian:
        raise ConfigError(
            f"head.bayes (KL / prior / logvar options) is only valid with head.type 'bgpm', got {head.type!r}"
        )
    if bayesian:
        bayes = _fill(BayesSettings, raw_bayes, "head.bayes")
        clamp = bayes.logvar_clamp
        _check(
            isinstance(clamp, list | tuple) and len(clamp) == 2,
            "head.bayes.logvar_clamp",
            "expected [low, high]",
        )
        bayes.logvar_clamp = (float(clamp[0]), float(clamp[1]))
        head.bayes = bayes
    _validate_head(head)

    settings = RewardSettings(
        seed=cfg.get("seed", 0),
        torch_threads=cfg.get("torch_threads", 0),
        wandb=dict(cfg.get("wandb") or {}),
        head=head,
        backbone=_fill(BackboneSettings, cfg.get("backbone"), "backbone"),
        lora=_fill(LoraSettings, cfg.get("lora"), "lora"),
        data=_fill(DataSettings, cfg.get("data"), "data"),
        train=_fill(TrainSettings, cfg.get("train"), "train"),
        eval=_fill(EvalSettings, cfg.get("eval"), "eval"),
    )
    _validate_rest(settings)
    return settings


def _validate_rest(s: RewardSettings) -> None:
    _positive_int(s.seed, "seed", allow_zero=True)
    _positive_int(s.torch_threads, "torch_threads", allow_zero=True)
    bb = s.backbone
    _check(bb.kind in ("auto", "decoder", "encoder"), "backbone.kind", f"got {bb.kind!r}")
    _check(bb.pooling in ("auto", "last", "first", "mean"), "backbone.pooling", f"got {bb.pooling!r}")
    _check(bb.precision in ("auto", "fp32", "bf16"), "backbone.precision", f"got {bb.precision!r}")
    _check(bb.pad_token_fix in ("eos", "error"), "backbone.pad_token_fix", f"got {bb.pad_token_fix!r}")
    if s.lora.enabled:
        _positive_int(s.lora.r, "lora.r")
        _check(0 <= s.lora.dropout < 1, "lora.dropout", "must be in [0, 1)")
    _positive_int(s.data.max_length, "data.max_length")
    _check(s.data.max_length >= 8, "data.max_length", "must be >= 8 tokens")
    _check(s.data.padding_side in ("left", "right"), "data.padding_side", f"got {s.data.padding_side!r}")
    t = s.train
    if t.steps is not None:
        _positive_int(t.steps, "train.steps")
    else:
        _check(t.epochs > 0, "train.epochs", "must be > 0 when train.steps is null")
    _positive_int(t.batch_size, "train.batch_size")
    _positive_int(t.micro_batch_size, "train.micro_batch_size")
    _check(t.learning_rate > 0, "train.learning_rate", "must be > 0")
    if t.head_learning_rate is not None:
        _check(t.head_learning_rate > 0, "train.head_learning_rate", "must be > 0 or null")
    _positive_int(t.warmup_steps, "train.warmup_steps", allow_zero=True)
    _check(t.lr_schedule in ("linear", "cosine", "constant"), "train.lr_schedule", f"got {t.lr_schedule!r}")
    _check(t.max_grad_norm > 0 and math.isfinite(t.max_grad_norm), "train.max_grad_norm", "must be > 0")
    _positive_int(t.checkpoint_every, "train.checkpoint_every", allow_zero=True)
    _check(t.resume in ("auto", "never"), "train.resume", f"got {t.resume!r}")
    _positive_int(s.eval.batch_size, "eval.batch_size")
    _positive_int(s.eval.train_pairs, "eval.train_pairs", allow_zero=True)


def accumulation_steps(train: TrainSettings, num_processes: int) -> int:
    """Micro-batches per process per optimizer step; the global batch must split evenly."""
    per_step = train.micro_batch_size * num_processes
    if train.batch_size % per_step:
        raise ConfigError(
            f"train.batch_size ({train.batch_size}) must be a multiple of train.micro_batch_size "
            f"({train.micro_batch_size}) x processes ({num_processes})"
        )
    return train.batch_size // per_step
