"""Stage configuration: every stage module receives its resolved config as JSON from the Snakemake rule.

The rule passes `--config '<json>'` (or a path to a JSON/YAML file); the stage writes it back next to its
outputs as `config.json`, so each output folder says exactly how it was produced.
"""

from __future__ import annotations

import json
import os
import sys
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


def require(condition: bool, key: str, message: str) -> None:
    """A check the schema cannot express (e.g. a reward head's `check_settings`): ConfigError naming the
    dotted key when `condition` is false."""
    if not condition:
        raise ConfigError(f"{key}: {message}")


class _StrictLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key written twice in one mapping (PyYAML, and Snakemake's loader with it,
    keeps the last one silently, so a setting edited in one place can be undone by a forgotten copy below) and
    any alias (`*name`): nested aliases load as shared objects but expand exponentially in every copy or walk
    (a "billion laughs" file), and no prefpipe config needs one. The alias is refused while parsing, before any
    value exists."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None,
                None,
                f"alias *{event.anchor} refused: config files may not use YAML anchors and aliases (nested "
                "aliases expand exponentially); write the value out",
                event.start_mark,
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {seen[key]})",
                    key_node.start_mark,
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _yaml_error(path: Path, err: yaml.YAMLError) -> str:
    """One line: the file, the line and column, and what is wrong there."""
    mark = getattr(err, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(err, "problem", None) or str(err)
    if "could not determine a constructor for the tag" in problem:
        problem += " (a config file is plain data: tags that build Python objects are refused)"
    context = getattr(err, "context", None)
    what = f"{context}, {problem}" if context and "duplicate key" not in problem else problem
    start = getattr(err, "context_mark", None)
    if start is not None and mark is not None and start.line != mark.line:
        what += f" (started at line {start.line + 1})"
    return f"{where}: not valid YAML: {' '.join(str(what).split())}"


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """A config file (.json, else YAML) as a mapping; a missing file, a parse error, a key written twice or a
    non-mapping is a ConfigError naming the file (and, for YAML, the line)."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8-sig") as handle:
            loaded = (
                json.load(handle, object_pairs_hook=_unique_json_keys(path))
                if path.suffix == ".json"
                else yaml.load(handle, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
            )
    except FileNotFoundError as err:
        raise ConfigError(f"config file {path} does not exist") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"config file {path}: not UTF-8 text (byte {err.start})") from err
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}:{err.lineno}:{err.colno}: not valid JSON: {err.msg}") from err
    except yaml.YAMLError as err:
        raise ConfigError(_yaml_error(path, err)) from err
    except RecursionError as err:
        raise ConfigError(f"config file {path}: nested too deeply to be a config") from err
    except OSError as err:  # a folder, a FIFO that cannot be opened, permissions, an I/O error
        raise ConfigError(f"config file {path}: cannot be read ({err.strerror or err})") from err
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file {path} must hold a mapping, got {type(loaded).__name__}")
    check_plain_tree(loaded, str(path))
    return loaded


MAX_CONFIG_DEPTH = 32  # the schema's deepest key is 6 levels down
MAX_CONFIG_VALUES = 200_000  # the default config holds about 1,500 values


def check_plain_tree(value: Any, where: str) -> None:
    """A config is a tree: no mapping or list may appear twice (a shared object comes from a YAML alias, or a
    caller's dict, and expands exponentially in every copy), none nests deeper than MAX_CONFIG_DEPTH and the
    whole holds at most MAX_CONFIG_VALUES values. Checked in time linear in the distinct objects, before any
    copy or walk that would expand a shared one; ConfigError naming the key."""
    seen: dict[int, str] = {}
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    count = 0
    while stack:
        item, key, depth = stack.pop()
        count += 1
        if count > MAX_CONFIG_VALUES:
            raise ConfigError(f"{where}: more than {MAX_CONFIG_VALUES} values, too large to be a config")
        if not isinstance(item, dict | list):
            continue
        if id(item) in seen:
            raise ConfigError(
                f"{where}: {key or '<top level>'} is the same object as {seen[id(item)] or '<top level>'} "
                "(a YAML alias?): a config must be a plain tree"
            )
        seen[id(item)] = key
        if depth >= MAX_CONFIG_DEPTH:
            raise ConfigError(f"{where}: {key} is nested more than {MAX_CONFIG_DEPTH} levels deep")
        children = item.items() if isinstance(item, dict) else enumerate(item)
        for name, child in children:
            child_key = f"{key}[{name}]" if isinstance(item, list) else f"{key}.{name}" if key else str(name)
            stack.append((child, child_key, depth + 1))


def _unique_json_keys(path: Path):
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        if repeated:
            raise ConfigError(f"{path}: duplicate key {repeated[0]!r} in one object")
        return dict(pairs)

    return hook


def check_config_files(paths: list[str | os.PathLike]) -> None:
    """Read each config file strictly (read_config_file): the workflow calls this on config/config.yaml and
    every --configfile before Snakemake's own loader, which names neither file nor line and merges duplicate
    keys silently."""
    for path in paths:
        read_config_file(path)


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


def main(argv: list[str]) -> int:
    """`python -m prefpipe.common.config FILE...`: scripts/run.sh checks each --configfile with it before
    Snakemake, whose own loader reads them first and names neither the file nor the line of a YAML error."""
    try:
        check_config_files(argv)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
