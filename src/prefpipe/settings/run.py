"""The run-wide keys every stage receives beside its own section, and how a stage's settings are built from
its --config (`RunSettings.from_stage_config`; the pipeline builds every stage's settings with `build_stage`)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

from prefpipe.common import secrets
from prefpipe.common.config import ConfigError
from prefpipe.settings import schema
from prefpipe.settings.build import from_mapping
from prefpipe.settings.cross_keys import check_cross_keys
from prefpipe.settings.names import check_name

S = TypeVar("S", bound="RunSettings")


@dataclass
class WandbSettings:
    enabled: bool
    mode: str  # offline | online | disabled
    project: str


@dataclass
class RunSettings:
    """Base of every stage's settings: the experiment's name and seed, tracking, the speed-path switch and the
    rule's threads.

    `torch_threads` is the Snakemake rule's `threads` (null in the provenance copy, which must not change
    when only the thread count does)."""

    experiment: str
    seed: int
    wandb: WandbSettings
    fast_paths: bool  # False: every optimised path takes its plain reference path instead (same decisions)
    torch_threads: int | None

    # Each stage's settings class names the schema part its own keys follow (a stage process checks its
    # --config against it, so a stage started by hand with a hand-written config gets the same checks as one
    # started by the workflow) and the keys it carries that are not config keys of that section (names and
    # values the pipeline derives; dotted for nested ones).
    stage_schema: ClassVar[str] = ""
    derived_keys: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_stage_config(cls: type[S], values: dict[str, Any], key: str) -> S:
        """This stage's settings from a mapping that has not been through the config schema (a stage's
        --config; what prefpipe.common.stage calls): its own keys schema-checked, then built by `build_stage`."""
        secrets.check_config(values, key)
        for name_key in ("experiment", "variant", "run", "name"):
            if isinstance(values, dict) and isinstance(values.get(name_key), str):
                check_name(values[name_key], f"{key}.{name_key}")
        return build_stage(cls, cls.validate_stage(values, key), key)

    @classmethod
    def validate_stage(cls, values: dict[str, Any], key: str) -> dict[str, Any]:
        """Schema-check a stage's --config (its `stage_schema` part); returns the mapping to build from."""
        if not cls.stage_schema:
            raise TypeError(f"{cls.__name__} names no stage_schema: it cannot be built from a stage config")
        schema.validate(without_keys(values, (*RUN_WIDE_KEYS, *cls.derived_keys)), cls.stage_schema, key)
        return values


# experiment, seed, wandb, fast_paths, torch_threads
RUN_WIDE_KEYS = tuple(f.name for f in fields(RunSettings))


def without_keys(values: Any, keys: tuple[str, ...]) -> Any:
    """`values` without the given keys (dotted for nested ones): what a stage's --config carries beyond its
    schema part (run-wide keys, names, values the pipeline derives)."""
    if not isinstance(values, dict):
        return values
    top = {k for k in keys if "." not in k}
    nested: dict[str, list[str]] = {}
    for dotted in (k for k in keys if "." in k):
        head, rest = dotted.split(".", 1)
        nested.setdefault(head, []).append(rest)
    return {
        k: without_keys(v, tuple(nested[k])) if k in nested else v for k, v in values.items() if k not in top
    }


def build_stage(cls: type[S], values: dict[str, Any], key: str) -> S:
    """A stage's typed settings from a schema-valid mapping (every key present, none unknown); runs the
    checks the schema cannot express."""
    settings = from_mapping(cls, values, key)
    check = getattr(settings, "check", None)
    try:
        if check is not None:
            check()
        check_cross_keys(settings)
    except ConfigError as err:
        raise ConfigError(f"{key}.{err}") from err
    return settings
