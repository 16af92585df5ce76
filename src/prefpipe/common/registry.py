"""Name registries: where behaviour varies by a config name (a loss aggregation, a rollout engine, ...), a
dict from the name to what it builds, filled by a decorator where each entry is defined, and one check that a
config names a registered entry. The table is the one home of the names: the schema takes a free string and
the config checks (prefpipe.config_checks) ask the table, so adding an entry is its definition alone."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from prefpipe.common.config import ConfigError

T = TypeVar("T")


def registrar(table: dict[str, T], what: str) -> Callable[[str], Callable[[T], T]]:
    """A decorator factory: `@register("name")` puts the decorated object in `table` under `name`; a second,
    different object under a taken name is a ValueError naming `what` and the name."""

    def register(name: str) -> Callable[[T], T]:
        def decorate(entry: T) -> T:
            if name in table and table[name] is not entry:
                held = getattr(table[name], "__name__", repr(table[name]))
                raise ValueError(f"{what} {name!r} is already registered ({held})")
            table[name] = entry
            return entry

        return decorate

    return register


def require_registered(table: Mapping[str, Any], name: str, key: str, what: str) -> None:
    """ConfigError naming the config `key` when `name` is not in `table`, with the registered names."""
    if name not in table:
        raise ConfigError(
            f"{key}: {name!r} is not a registered {what}; registered: {', '.join(sorted(table))}"
        )
