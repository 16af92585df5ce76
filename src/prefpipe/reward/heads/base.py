"""The reward-head interface: everything the model, trainer, evaluation and GRPO ask of a head.

A head is an nn.Module mapping (h_response (N, F), h_prompt (N, H)) to an encoding: a dict of float32
tensors, one row per response. Behaviour that depends on the kind of head lives on its class, so callers
ask the head (`head.compare(...)`, `head.scalar_reward`, `head.bayesian`) and never compare type names.

A head is built with its settings (`build_head` sets `head.settings`), so the settings-dependent parts are
plain methods: `head.loss(out_c, out_r, step)` and `head.preference_prob(enc_a, enc_b)`. Scoring needs only
encodings (`score`, `compare`, `training_score`, `rewards` are classmethods).

Any head may carry a length head (`head.length_head.enabled`, ODIN; prefpipe.reward.heads.disentangle): `build_head`
attaches it, `encode_features` adds its `length_reward`, `loss` adds its term to the training score and its
penalties to the head's own `ranking_loss`; scoring never reads it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import nn

# The heads' check_settings raise through `require`: ConfigError naming the dotted key.
from prefpipe.common.config import require  # noqa: F401
from prefpipe.reward.heads import disentangle
from prefpipe.reward.losses import LossParts, preference_nll

if TYPE_CHECKING:
    from prefpipe.settings.reward import HeadSettings

Encoding = dict[str, torch.Tensor]


class Standardize(nn.Module):
    """(h - mean) / sd with mean and sd over the training responses' features, stored as buffers (saved with the
    head, so a loaded model scores exactly as the trained one). Starts as the identity until `fit`."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(size))
        self.register_buffer("inv_sd", torch.ones(size))

    @torch.no_grad()
    def fit(self, features: torch.Tensor) -> None:
        """Set mean and 1/sd from `features` (N, F); constant columns keep scale 1 instead of dividing by 0."""
        mean, sd = features.float().mean(0), features.float().std(0)
        self.mean.copy_(mean)
        self.inv_sd.copy_(torch.where(sd > 1e-6, 1.0 / sd.clamp(min=1e-6), torch.ones_like(sd)))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return (h - self.mean.to(h.dtype)) * self.inv_sd.to(h.dtype)


class RewardHead(nn.Module, ABC):
    """Base class of the registered heads (see prefpipe.reward.heads.registry)."""

    head_type: ClassVar[str] = ""  # the registry name (head.type, saved as head_type); set by @register
    settings: HeadSettings  # the head's own settings (tau, dim, bayes, ...); set by build_head
    encoding_keys: ClassVar[tuple[str, ...]]  # what encode() keeps of forward()'s output (compare needs it)
    # The flags below are set by @register from facts.py (their one home); a head without facts keeps its own.
    scalar_reward: ClassVar[bool] = False  # True: one reward r(x, y) per response, `rewards(enc)`
    bayesian: ClassVar[bool] = False  # True: compare() returns Var[s]; head.bayes options; risk aversion

    # ---------------------------------------------------------------- construction
    @classmethod
    def check_settings(cls, settings: HeadSettings) -> None:
        """Head-specific checks of the head settings; raise ConfigError naming the key. Default: none."""

    @classmethod
    @abstractmethod
    def from_settings(cls, settings: HeadSettings, input_size: int, prompt_size: int) -> RewardHead:
        """A freshly initialised head reading response features of width `input_size` (the pooled state, plus
        the embedding mean with backbone.embedding_features) and prompt states of width `prompt_size`."""

    def standardize(self, h: torch.Tensor) -> torch.Tensor:
        """The head's input standardised by its `input_norm` buffers (head.standardize), else unchanged."""
        norm = self._modules.get("input_norm")
        return h if norm is None else norm(h)

    @abstractmethod
    def forward(self, h: torch.Tensor, h_prompt: torch.Tensor) -> Encoding:
        """Encoding of each response (keys include `encoding_keys`; train mode may add e.g. samples)."""

    def encode_features(self, h: torch.Tensor, h_prompt: torch.Tensor) -> Encoding:
        """forward() of standardised features, plus the length head's `length_reward` when there is one."""
        out = self(h, h_prompt)
        length_head = self.length_head_module()
        if length_head is not None:
            out[disentangle.LENGTH_REWARD_KEY] = length_head(h)
        return out

    def length_head_module(self) -> disentangle.LengthHead | None:
        """The length head `build_head` attached (head.length_head.enabled), else None."""
        return self._modules.get("length_head")  # type: ignore[return-value]

    def projection_rows(self) -> torch.Tensor:
        """The rows of the linear map from features to what the head scores (the length head's orthogonality
        penalty reads them). A head without them cannot carry a length head (check_head_settings says so)."""
        raise NotImplementedError(f"the {self.head_type!r} head does not expose its projection rows")

    def linear_reward(self) -> tuple[torch.Tensor, float]:
        """(w, b) with w . h + b the head's scalar reward on the raw features h, its standardisation folded in
        (an export writes it as a plain linear score layer). A head whose reward is not one linear map of the
        features has none; the registry tells which heads override this."""
        raise NotImplementedError(
            f"the {self.head_type!r} head's reward is not one linear map of the features"
        )

    # ---------------------------------------------------------------- scoring
    @classmethod
    @abstractmethod
    def score(cls, enc_a: Encoding, enc_b: Encoding) -> tuple[torch.Tensor, torch.Tensor | None]:
        """s(a > b | x) per row and its variance (None for point heads), from checked encodings."""

    @classmethod
    def compare(cls, enc_a: Encoding, enc_b: Encoding) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`score` after checking both encodings carry this head's keys."""
        cls.check_encoding(enc_a, "enc_a")
        cls.check_encoding(enc_b, "enc_b")
        return cls.score(enc_a, enc_b)

    @classmethod
    def check_encoding(cls, enc: Encoding, name: str) -> None:
        missing = [k for k in cls.encoding_keys if k not in enc]
        if missing:
            raise ValueError(
                f"compare: {name} lacks {missing} (is it an encoding from a {cls.head_type!r} reward model?)"
            )

    @property
    def tau(self) -> float:
        """The preference temperature: P(a > b) = sigmoid(s / tau)."""
        return float(self.settings.tau)

    def preference_prob(self, enc_a: Encoding, enc_b: Encoding) -> torch.Tensor:
        """P(a > b) = sigmoid(s / tau) for a point head; a Bayesian head integrates over its score's posterior."""
        score, _ = self.compare(enc_a, enc_b)
        return torch.sigmoid(score / self.tau)

    @classmethod
    def rewards(cls, enc: Encoding) -> torch.Tensor:
        """The scalar reward r(x, y) per row; only for heads with `scalar_reward`."""
        raise TypeError(
            f"a {cls.head_type!r} head has no scalar per-response reward (scalar_reward is False)"
        )

    # ---------------------------------------------------------------- training
    @classmethod
    @abstractmethod
    def training_score(cls, out_c: Encoding, out_r: Encoding) -> torch.Tensor:
        """The s(c > r) the loss uses, from train-mode head outputs of the chosen and rejected halves."""

    def loss(self, out_c: Encoding, out_r: Encoding, step: int) -> LossParts:
        """Loss of one micro-batch at optimizer step `step`: the head's `ranking_loss`, plus the length head's
        penalties when it has one (their math: prefpipe.reward.heads.disentangle)."""
        parts = self.ranking_loss(out_c, out_r, step)
        if self.length_head_module() is None:
            return parts
        penalty = disentangle.length_penalty(self, out_c, out_r, self.settings.length_head, step)
        parts.loss = parts.loss + penalty
        return parts

    def pair_training_score(self, out_c: Encoding, out_r: Encoding) -> torch.Tensor:
        """`training_score` plus r_L(c) - r_L(r) when a length head is attached (trained, never scored)."""
        score = self.training_score(out_c, out_r)
        if disentangle.LENGTH_REWARD_KEY in out_c:
            key = disentangle.LENGTH_REWARD_KEY
            score = score + out_c[key] - out_r[key]
        return score

    def ranking_loss(self, out_c: Encoding, out_r: Encoding, step: int) -> LossParts:
        """The head's own loss: preference NLL of the pair training score, no regulariser by default."""
        score = self.pair_training_score(out_c, out_r)
        pref = preference_nll(score, self.settings.tau)
        zero = pref.new_zeros(())
        detached = score.detach()
        return LossParts(pref, pref, zero, 0.0, detached, self.training_prob(detached))

    def training_prob(self, score: torch.Tensor) -> torch.Tensor:
        """P(c > r) = sigmoid(s / tau) of a training score (the probability the trainer logs)."""
        return torch.sigmoid(score / self.settings.tau)
