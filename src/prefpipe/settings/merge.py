"""How configs combine — written down once, used by the workflow, the stages and the tests.

1. `config/config.yaml` is the base; every `--configfile` is merged over it in order (Snakemake's own
   `update_config` follows the same rules; tests/test_settings_merge.py checks that the two agree).
2. Mappings deep-merge key by key; any other value (a list, a string, null) replaces the old value whole.
3. A reward variant is `reward.defaults` deep-merged with `reward.variants.<name>`; a GRPO run is
   `grpo.defaults` deep-merged with `grpo.runs.<name>`; a rule's resources are `resources.default` updated by
   `resources.<rule>`.
4. Merging can add or change variants and runs but never delete one: `reward.only` / `grpo.only` (a list of
   names, null = all) narrow what is built; `grpo.enabled: false` / `report.enabled: false` leave a stage out;
   an `eval.benchmarks.<name>: null` removes that benchmark.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from prefpipe.common.config import ConfigError

# Rule 4's collections: an empty mapping there merges to nothing, so `reward.variants: {}` would silently
# train every variant of the base config. Each with what does what the empty mapping seemed to ask.
COLLECTIONS = {
    ("reward", "variants"): "train only some with reward.only: [names]",
    ("grpo", "runs"): "train only some with grpo.only: [names], or none with grpo.enabled: false",
    ("eval", "benchmarks"): "remove one with eval.benchmarks.<name>: null",
}


def check_overlay(overlay: Mapping[str, Any], where: str) -> None:
    """Refuse an empty mapping at a collection of rule 4 in a config merged over another (`where` names the
    file): it deletes nothing, and running everything without a word would be the wrong answer."""
    for path, fix in COLLECTIONS.items():
        value: Any = overlay
        for part in path:
            value = value.get(part) if isinstance(value, Mapping) else None
        if isinstance(value, Mapping) and not value:
            raise ConfigError(
                f"{where}: {'.'.join(path)}: {{}} removes nothing (config files merge: they add or change "
                f"members, never delete them); {fix}"
            )


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any] | None) -> dict[str, Any]:
    """Return base updated recursively by override (rule 2); neither input is modified."""
    merged = copy.deepcopy(dict(base))
    for key, value in (override or {}).items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
