"""The reward-head interface: everything the model, trainer, evaluation and GRPO ask of a head.

A head is an nn.Module mapping (h_response (N, H), h_prompt (N, H)) to an encoding: a dict of float32
tensors, one row per response. Behaviour that depends on the kind of head lives on its class, so callers
ask the head (`head.compare(...)`, `head.scalar_reward`, `head.bayesian`) and never compare type names.

Scoring, the training loss and probabilities are classmethods: they need only encodings and the
`HeadSettings`, so they work on head outputs without a module (e.g. `pair_loss` in tests).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import nn

from prefpipe.reward.losses import LossParts, preference_nll

# The settings layer's check for the heads' check_settings: ConfigError naming the dotted key.
from prefpipe.settings.reward import require  # noqa: F401

if TYPE_CHECKING:
    from prefpipe.settings.reward import HeadSettings

Encoding = dict[str, torch.Tensor]


class RewardHead(nn.Module, ABC):
    """Base class of the registered heads (see prefpipe.reward.heads for the registry)."""

    head_type: ClassVar[str] = ""  # the registry name (head.type, saved as head_type); set by @register
    encoding_keys: ClassVar[tuple[str, ...]]  # what encode() keeps of forward()'s output (compare needs it)
    scalar_reward: ClassVar[bool] = False  # True: one reward r(x, y) per response, `rewards(enc)`
    bayesian: ClassVar[bool] = False  # True: compare() returns Var[s]; head.bayes options; risk aversion

    # ---------------------------------------------------------------- construction
    @classmethod
    def check_settings(cls, settings: HeadSettings) -> None:
        """Head-specific checks of the head settings; raise ConfigError naming the key. Default: none."""

    @classmethod
    @abstractmethod
    def from_settings(cls, settings: HeadSettings, hidden_size: int) -> RewardHead:
        """A freshly initialised head for backbone hidden size `hidden_size`."""

    @abstractmethod
    def forward(self, h: torch.Tensor, h_prompt: torch.Tensor) -> Encoding:
        """Encoding of each response (keys include `encoding_keys`; train mode may add e.g. samples)."""

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

    @classmethod
    def preference_prob(
        cls,
        settings: HeadSettings,
        enc_a: Encoding,
        enc_b: Encoding,
        n_samples: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """P(a > b) = sigmoid(s / tau) for a point head; a Bayesian head averages over its posterior."""
        score, _ = cls.compare(enc_a, enc_b)
        return torch.sigmoid(score / float(settings.tau))

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

    @classmethod
    def training_loss(cls, settings: HeadSettings, out_c: Encoding, out_r: Encoding, step: int) -> LossParts:
        """Loss of one micro-batch at optimizer step `step`: preference NLL, no regulariser by default."""
        score = cls.training_score(out_c, out_r)
        pref = preference_nll(score, settings.tau)
        zero = pref.new_zeros(())
        return LossParts(pref, pref, zero, 0.0, score.detach())
