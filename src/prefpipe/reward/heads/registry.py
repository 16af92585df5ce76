"""Reward heads behind a registry: `head.type` names a registered `RewardHead` class.

Every head module of this package registers its head when imported (`@register("name")`), and this module
imports them all, so adding a head is one new file (plus its test, and its line in facts.py for the report).
Callers build heads with `build_head` and then ask the head object (compare, preference_prob, loss,
scalar_reward, bayesian, ...); the interface is `prefpipe.reward.heads.base.RewardHead`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from prefpipe.common.config import ConfigError
from prefpipe.reward.heads.base import Encoding, RewardHead, Standardize
from prefpipe.reward.heads.disentangle import LengthHead
from prefpipe.reward.heads.facts import HEAD_FACTS

if TYPE_CHECKING:
    from prefpipe.settings.reward import HeadSettings

H = TypeVar("H", bound=type[RewardHead])
HEADS: dict[str, type[RewardHead]] = {}


def register(name: str) -> Callable[[H], H]:
    """Class decorator: make `head.type: <name>` build this head (the name is saved as head_type). A head
    described in facts.py takes its flags (scalar_reward, bayesian) from there; another keeps its own."""

    def decorate(cls: H) -> H:
        if name in HEADS and HEADS[name] is not cls:
            raise ValueError(f"reward head {name!r} is already registered ({HEADS[name].__qualname__})")
        cls.head_type = name
        facts = HEAD_FACTS.get(name)
        if facts is not None:
            cls.scalar_reward, cls.bayesian = facts.scalar_reward, facts.bayesian
        HEADS[name] = cls
        return cls

    return decorate


def get_head_class(name: str) -> type[RewardHead]:
    """The head class registered as `name`; ConfigError naming the config key and the known heads."""
    if name not in HEADS:
        raise ConfigError(f"head.type: unknown reward head {name!r}; known heads: {', '.join(sorted(HEADS))}")
    return HEADS[name]


def check_head_settings(settings: HeadSettings) -> None:
    """What the schema cannot say about `head.*`: the type is registered and the head accepts its keys
    (`RewardHead.check_settings`); ConfigError naming the key relative to the variant (`head.type`, ...)."""
    cls = get_head_class(settings.type)
    cls.check_settings(settings)
    length = settings.length_head
    if length is not None and length.enabled and cls.projection_rows is RewardHead.projection_rows:
        raise ConfigError(
            f"head.length_head.enabled: the {settings.type!r} head does not expose its projection rows "
            "(RewardHead.projection_rows), which the length head's orthogonality penalty needs"
        )


def build_head(settings: HeadSettings, input_size: int, prompt_size: int) -> RewardHead:
    """A fresh head of type `settings.type` reading features of width `input_size` and prompt states of width
    `prompt_size`; with head.standardize it carries the (identity until fitted) `input_norm` buffers, with
    head.length_head.enabled a `length_head` (prefpipe.reward.heads.disentangle)."""
    head = get_head_class(settings.type).from_settings(settings, input_size, prompt_size)
    head.settings = settings  # the head owns its settings: loss and preference_prob read them
    if settings.standardize:
        head.input_norm = Standardize(input_size)
    if settings.length_head is not None and settings.length_head.enabled:
        check_head_settings(settings)
        head.length_head = LengthHead(input_size)  # ODIN: trained beside the head, never scored
    return head


NOT_HEADS = ("base", "disentangle", "facts", "registry")  # the package's modules that define no head


def import_heads() -> None:
    """Import every module of the package's folders (its `__path__`), so each registers its head: a head is
    a file dropped into prefpipe/reward/heads/, which nothing else has to import."""
    package = __name__.rpartition(".")[0]
    for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
        if module.name not in NOT_HEADS:
            importlib.import_module(f"{package}.{module.name}")


import_heads()

__all__ = [
    "HEADS",
    "Encoding",
    "RewardHead",
    "build_head",
    "check_head_settings",
    "get_head_class",
    "register",
]
