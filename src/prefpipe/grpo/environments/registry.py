"""Environments by name: `@register_environment("name")` on a factory `(options) -> Environment`, and
`build_environment(spec)` for a spec `{"type": name, ...options}`. The built-in environments (search,
calculator) register when their modules are imported, which `build_environment` does first."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from prefpipe.common.config import ConfigError
from prefpipe.grpo.environments.base import Environment

EnvironmentFactory = Callable[[Mapping[str, Any]], Environment]
ENVIRONMENTS: dict[str, EnvironmentFactory] = {}
BUILT_IN = ("prefpipe.grpo.environments.search", "prefpipe.grpo.environments.calculator")


def register_environment(name: str) -> Callable[[EnvironmentFactory], EnvironmentFactory]:
    def decorate(factory: EnvironmentFactory) -> EnvironmentFactory:
        if name in ENVIRONMENTS and ENVIRONMENTS[name] is not factory:
            raise ValueError(
                f"environment {name!r} is already registered ({ENVIRONMENTS[name].__qualname__})"
            )
        ENVIRONMENTS[name] = factory
        return factory

    return decorate


def build_environment(spec: Mapping[str, Any]) -> Environment:
    """The environment a spec names (`type`) built with the spec's other keys; ConfigError naming the type."""
    for module in BUILT_IN:
        importlib.import_module(module)
    name = spec.get("type")
    if name not in ENVIRONMENTS:
        raise ConfigError(
            f"environment type: unknown environment {name!r}; known: {', '.join(sorted(ENVIRONMENTS))}"
        )
    env = ENVIRONMENTS[name]({k: v for k, v in spec.items() if k != "type"})
    if not isinstance(env, Environment):
        raise TypeError(
            f"environment {name!r}: the factory returned {type(env).__name__}, not an Environment"
        )
    return env
