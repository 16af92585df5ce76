"""Names that become folders (reward variants, GRPO runs, `models` entries, `report.compare` names, the
experiment): one rule, checked before anything else so a bad name is refused naming its key.

A name starts with a letter or digit and holds only letters, digits, `_`, `.` and `-`, and never `..`: a
variant called `..` would write `results/reward/../model`, over another stage's outputs. The schema files carry
the same pattern (NAME_SCHEMA_PATTERN) for a stage checked on its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from prefpipe.common.config import ConfigError

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
NAME_SCHEMA_PATTERN = r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_.-]*$"  # the same rule as one regex (schema files)
# (section, key) mappings whose keys are names; `experiment` is a name itself.
NAMED_MAPPINGS = (("reward", "variants"), ("grpo", "runs"), ("report", "compare"))


def check_name(name: Any, key: str) -> None:
    """Raise ConfigError naming `key` unless `name` is a usable folder name."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or ".." in name:
        raise ConfigError(
            f"{key}: {name!r} is not a valid name (letters, digits, '_', '.', '-', starting with a letter or "
            "digit, without '..'); it becomes a folder under results/"
        )


def check_names(config: Mapping[str, Any]) -> None:
    """Every name in a merged config (before schema validation, so the error is this one's)."""
    if "experiment" in config:
        check_name(config["experiment"], "experiment")
    for section, key in NAMED_MAPPINGS:
        entries = (config.get(section) or {}).get(key) if isinstance(config.get(section), Mapping) else None
        for name in entries if isinstance(entries, Mapping) else {}:  # a non-mapping: the schema's to name
            check_name(name, f"{section}.{key}")
    models = config.get("models")
    for name in models if isinstance(models, Mapping) else {}:
        check_name(name, "models")
