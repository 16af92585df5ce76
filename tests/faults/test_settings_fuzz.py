"""Faults, second round: a small fuzz test of the settings layer (issue 35). Random values go into every key of
the default config (mostly of the type the schema declares for the key, with edge values; sometimes of any
type, or the key removed), one to three keys at a time, and each config either builds (schema, settings layer and the registry
checks, as the workflow builds it) or ends in one ConfigError of one line naming a key it changed; never
another exception. Seeded (PREFPIPE_FUZZ_SEED) and bounded in time (PREFPIPE_FUZZ_SECONDS, default 15)."""

from __future__ import annotations

import copy
import os
import random
import time
from typing import Any

from prefpipe.common.config import ConfigError
from prefpipe.config_checks import checked_pipeline
from prefpipe.settings import schema
from prefpipe.settings.pipeline import load_config

SECONDS = float(os.environ.get("PREFPIPE_FUZZ_SECONDS", "15"))
SEED = int(os.environ.get("PREFPIPE_FUZZ_SEED", "35"))
EDGE_INTS = [0, 1, -1, 2, 3, 7, 100, 2**31, 2**32 - 1, 2**32, 10**12]
EDGE_FLOATS = [0.0, -0.0, 1.0, 0.5, 4.0, -1.5, 1e-12, 1e300, float("inf"), float("nan")]
EDGE_STRINGS = ["", " ", "..", "a/b", "bt", "x" * 300, "hf_FaKeT0kenF0rTestsOnly0123456789", "tëst", "null"]


def _resolve(node: Any, name: str) -> dict[str, Any]:
    """`node` with its $ref followed (into another schema file or its own $defs) and an allOf merged."""
    while isinstance(node, dict) and "$ref" in node:
        file, _, pointer = node["$ref"].partition("#")
        target = schema._load(file or name)
        name = file or name
        for part in filter(None, pointer.split("/")):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    if isinstance(node, dict) and "allOf" in node:
        merged = {k: v for k, v in node.items() if k != "allOf"}
        for part in node["allOf"]:
            merged.update(_resolve(part, name))
        node = merged
    return {**node, "__file": name} if isinstance(node, dict) else {}


def _child(node: dict[str, Any], key: str | int) -> dict[str, Any]:
    name = node.get("__file", schema.ROOT_SCHEMA)
    for option in node.get("anyOf", []) + node.get("oneOf", []):
        option = _resolve(option, name)
        if "properties" in option or "additionalProperties" in option or "items" in option:
            node = option
            break
    if isinstance(key, int):
        return _resolve(node.get("items", {}), name)
    sub = node.get("properties", {}).get(key, node.get("additionalProperties", {}))
    return _resolve(sub if isinstance(sub, dict) else {}, name)


def _leaves(value: Any, node: dict[str, Any], path: tuple = ()) -> list[tuple[tuple, dict[str, Any]]]:
    """(path, schema node) of every value in the config, mappings and lists included."""
    found = [(path, node)] if path else []
    if isinstance(value, dict):
        for key, sub in value.items():
            found += _leaves(sub, _child(node, key), (*path, key))
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            found += _leaves(sub, _child(node, index), (*path, index))
    return found


def _typed(rng: random.Random, kind: str, node: dict[str, Any]) -> Any:
    if "enum" in node and rng.random() < 0.5:
        return rng.choice(node["enum"])
    if kind == "integer":
        return rng.choice(EDGE_INTS + [rng.randint(-5, 5000)])
    if kind == "number":
        return rng.choice(EDGE_FLOATS + EDGE_INTS[:4] + [rng.uniform(-2, 2)])
    if kind == "string":
        return rng.choice(EDGE_STRINGS)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [
            _typed(rng, rng.choice(["integer", "number", "string"]), {}) for _ in range(rng.randint(0, 3))
        ]
    if kind == "object":
        return rng.choice([{}, {"x": 1}, {"bt": None}, {"..": {}}])
    return None


def _value(rng: random.Random, node: dict[str, Any], current: Any) -> Any:
    """A value of the schema's type for the key (most times), else of any type, or DELETE."""
    if rng.random() < 0.1:
        return DELETE
    kinds = node.get("type") or [type_name(current)]
    kinds = [kinds] if isinstance(kinds, str) else kinds
    if rng.random() < 0.2:
        kinds = ["integer", "number", "string", "boolean", "array", "object", "null"]
    return _typed(rng, rng.choice(kinds), node)


def type_name(value: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    return names.get(type(value), "null")


DELETE = object()  # one change in ten removes the key instead


def _set(config: dict[str, Any], path: tuple, value: Any) -> None:
    target: Any = config
    for part in path[:-1]:
        target = target[part]
    if value is DELETE and isinstance(target, dict):
        del target[path[-1]]
    else:
        target[path[-1]] = None if value is DELETE else value


def test_random_values_in_every_key_validate_or_name_the_key_in_one_line():
    base = load_config()
    leaves = _leaves(base, _resolve({"$ref": schema.ROOT_SCHEMA}, schema.ROOT_SCHEMA))
    assert len(leaves) > 450  # every key of the default config, list items included (475 at this writing)
    rng = random.Random(SEED)
    tried = valid = 0
    failures: list[str] = []
    deadline = time.monotonic() + SECONDS
    while time.monotonic() < deadline:
        config = copy.deepcopy(base)
        changed = []
        for path, node in rng.sample(leaves, rng.randint(1, 3)):
            try:
                _set(config, path, _value(rng, node, _get(base, path)))
                changed.append(path)
            except (KeyError, IndexError, TypeError):  # an earlier change replaced the parent
                continue
        tried += 1
        try:
            checked_pipeline(config)
            valid += 1
        except ConfigError as err:
            message = str(err)
            named = any(str(p) in message for path in changed for p in path if isinstance(p, str))
            if "\n" in message or not named:
                failures.append(f"{changed}: {message}")
        except Exception as err:  # noqa: BLE001 - the point: any other exception is a failure
            failures.append(f"{changed}: {type(err).__name__}: {err}")
    print(f"settings fuzz: {tried} configs in {SECONDS:.0f} s, {valid} valid, {len(failures)} failures")
    assert tried >= 20 and failures == [], failures[:10]


def _get(config: Any, path: tuple) -> Any:
    for part in path:
        config = config[part]
    return config
