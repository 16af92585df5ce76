"""Typed settings from plain mappings: every key present, no unknown key, finite numbers.

The settings dataclasses declare types but no defaults: the only defaults are in `config/config.yaml` (and,
for list items, the schema). Building a dataclass from a mapping that lacks a key is therefore an error that
names the key, never a silent fallback to a value written in code.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from prefpipe.common.config import ConfigError

T = TypeVar("T")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    """(the non-None type, whether None is allowed) for `X | None`; other types unchanged."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], len(args) < len(typing.get_args(tp))
    return tp, False


def _convert(tp: Any, value: Any, key: str) -> Any:
    tp, _ = _strip_optional(tp)
    if value is None:
        return None
    if dataclasses.is_dataclass(tp):
        return from_mapping(tp, value, key)
    origin = typing.get_origin(tp)
    if origin is dict and dataclasses.is_dataclass(typing.get_args(tp)[1]):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        item = typing.get_args(tp)[1]
        return {name: from_mapping(item, sub, f"{key}.{name}") for name, sub in value.items()}
    if origin is tuple:
        return tuple(_check_number(v, key) for v in value)
    if tp is int and (not isinstance(value, int) or isinstance(value, bool)):
        raise ConfigError(f"{key}: must be an integer, got {value!r}")
    return _check_number(value, key)


def _check_number(value: Any, key: str) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key}: must be a finite number, got {value!r}")
    if isinstance(value, list):
        return [_check_number(v, key) for v in value]
    if isinstance(value, dict):
        return {k: _check_number(v, f"{key}.{k}") for k, v in value.items()}
    return value


def from_mapping(cls: type[T], values: Any, key: str) -> T:
    """Build dataclass `cls` from `values`; `key` is the dotted config path used in error messages."""
    if not isinstance(values, Mapping):
        raise ConfigError(f"{key}: expected a mapping, got {values!r}")
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ConfigError(f"{key}: unknown key(s) {', '.join(unknown)} (known: {', '.join(names)})")
    missing = [name for name in names if name not in values]
    if missing:
        raise ConfigError(f"{key}: missing key(s) {', '.join(missing)}")
    hints = _hints(cls)
    return cls(**{name: _convert(hints[name], values[name], f"{key}.{name}") for name in names})


def to_mapping(settings: Any) -> dict[str, Any]:
    """The plain-JSON form of a settings dataclass (tuples become lists), the inverse of from_mapping."""
    return _plain(dataclasses.asdict(settings))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
