"""The config schema (workflow/schemas/*.schema.yaml): validation with errors that name the key, and the
defaults the schema declares for list items (e.g. each GRPO reward source), filled in while validating."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from prefpipe.common.config import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[3]
# The workflow's schemas: PREFPIPE_SCHEMA_DIR when set (the Snakefile sets it to its own workflow/schemas, so a
# deployed workflow and its jobs use the schemas it ships, whatever prefpipe is installed), else the checkout's.
SCHEMA_DIR_ENV = "PREFPIPE_SCHEMA_DIR"
ROOT_SCHEMA = "config.schema.yaml"


def schema_dir() -> Path:
    return Path(os.environ.get(SCHEMA_DIR_ENV) or REPO_ROOT / "workflow" / "schemas")


def use_workflow(workflow_dir: str | Path) -> None:
    """Called by the Snakefile: this process and the jobs it starts (which inherit the environment) read the
    schemas of the workflow being run, and its conda post-deploy script installs prefpipe from the checkout
    that holds it (PREFPIPE_SOURCE)."""
    os.environ[SCHEMA_DIR_ENV] = str(Path(workflow_dir) / "schemas")
    os.environ["PREFPIPE_SOURCE"] = str(Path(workflow_dir).parent)
    _load.cache_clear()


@functools.cache
def _load(name: str) -> dict[str, Any]:
    path = schema_dir() / name
    if not path.is_file():
        raise ConfigError(
            f"schema file {path} is missing (set {SCHEMA_DIR_ENV} to the workflow's workflow/schemas folder)"
        )
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _retrieve(uri: str) -> Resource:
    """A schema file as a 2020-12 resource, without its `$schema` key: jsonschema picks the validator class of a
    subschema that names a `$schema`, so descending into one of our files would drop the default-filling
    validator below and leave list-item defaults unfilled wherever a file is reached through a `$ref`."""
    contents = {key: value for key, value in _load(uri.split("#")[0]).items() if key != "$schema"}
    return DRAFT202012.create_resource(contents)


def _set_defaults(validator_class: type) -> type:
    """A validator that also writes each property's `default` into the instance when the key is absent
    (jsonschema's documented extension pattern; the schema is the owner of those defaults)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def properties(validator, props, instance, schema):
        if isinstance(instance, dict):
            for name, sub in props.items():
                if isinstance(sub, Mapping) and "default" in sub and name not in instance:
                    instance[name] = sub["default"]
        yield from validate_properties(validator, props, instance, schema)

    return jsonschema.validators.extend(
        validator_class, {"properties": properties}, type_checker=_STRICT_TYPES
    )


def _is_integer(_checker: Any, instance: Any) -> bool:
    """An integer is written as one: JSON Schema counts 4.0 as an integer, but `steps: 4.0` would reach
    range() and tensor shapes as a float and fail there, naming no key."""
    return isinstance(instance, int) and not isinstance(instance, bool)


_STRICT_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer)
_Validator = _set_defaults(jsonschema.Draft202012Validator)


def check_finite(instance: Any, where: str) -> None:
    """JSON Schema's `number` admits inf and NaN (YAML `.inf`, `.nan`; JSON `Infinity`), which no config key
    means: refuse them naming the key, before the schema's own checks (a bound such as `exclusiveMinimum: 0`
    lets `.inf` through and NaN compares false to everything)."""
    if isinstance(instance, float) and not math.isfinite(instance):
        raise ConfigError(
            f"{where or '<top level>'}: must be finite (a number, not inf or NaN), got {instance!r}"
        )
    if isinstance(instance, Mapping):
        for key, value in instance.items():
            check_finite(value, f"{where}.{key}" if where else str(key))
    elif isinstance(instance, list | tuple):
        for index, value in enumerate(instance):
            check_finite(value, f"{where}[{index}]")


def validate(instance: dict[str, Any], ref: str = ROOT_SCHEMA, where: str = "config") -> None:
    """Validate `instance` (in place: schema defaults are filled) against the schema `ref`
    (`file.schema.yaml` or `file.schema.yaml#/$defs/name`); raise ConfigError naming the first bad key."""
    check_finite(instance, where)
    registry = Registry(retrieve=_retrieve)  # type: ignore[call-arg]
    validator = _Validator({"$ref": ref}, registry=registry)
    errors = sorted(validator.iter_errors(instance), key=lambda e: (len(e.path), list(map(str, e.path))))
    if errors:
        error = jsonschema.exceptions.best_match(errors)
        key = ".".join(part for part in (where, ".".join(map(str, error.absolute_path))) if part)
        raise ConfigError(f"{key or '<top level>'}: {error.message}")
