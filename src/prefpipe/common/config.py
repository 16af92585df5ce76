"""Stage configuration: every stage module receives its resolved config as JSON from the Snakemake rule.

The rule passes `--config '<json>'` (or a path to a JSON/YAML file); the stage writes it back next to its
outputs as `config.json`, so each output folder says exactly how it was produced.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml


class UserError(ValueError):
    """Something the user can fix (a config value, a path, a data file, a model folder): a stage reports it
    in one line naming the cause and exits 2, without a traceback (prefpipe.common.stage)."""


class ConfigError(UserError):
    """A config value is missing or wrong; the message names the key."""


class DataError(UserError):
    """An input data file cannot be used; the message names the file (and row where there is one)."""


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """A config file (.json, else YAML) as a mapping; a missing file, a parse error or a non-mapping is a
    ConfigError naming the file (and, for YAML, the line)."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as handle:
            loaded = json.load(handle) if path.suffix == ".json" else yaml.safe_load(handle)
    except FileNotFoundError as err:
        raise ConfigError(f"config file {path} does not exist") from err
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise ConfigError(f"config file {path}: not valid {kind}: {err}") from err
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file {path} must hold a mapping, got {type(loaded).__name__}")
    return loaded


def load_config_arg(value: str) -> dict[str, Any]:
    """Parse a `--config` argument: inline JSON, or a path to a .json/.yaml file."""
    text = value.strip()
    if not text.startswith("{"):
        if not Path(value).is_file():
            raise ConfigError(f"--config: {value!r} is neither inline JSON nor an existing file")
        return read_config_file(value)
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"--config (inline JSON) does not parse: {err}") from err
    if not isinstance(loaded, dict):
        raise ConfigError("--config must hold a mapping")
    return loaded


def resolve_path(value: str | os.PathLike, root: str | os.PathLike | None = None) -> Path:
    """Resolve a config path relative to the workflow root (the current directory under Snakemake)."""
    path = Path(os.path.expanduser(str(value)))
    if not path.is_absolute() and root is not None:
        path = Path(root) / path
    return path
