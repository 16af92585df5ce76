"""Each name has one home. A name a user adds (a loss aggregation, a rollout engine, a reward head, a reward
source) lives in its registry only: the schema takes a free string that lists no names, and the config checks
(prefpipe.config_checks) refuse an unregistered one naming the key and the registered names, before any stage
runs. The closed sets the schema does spell out as enums (estimators, modes, strategies) must equal their
registry, so changing one side alone fails here, naming both.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.settings import pipeline

from prefpipe.active import kl_weight
from prefpipe.active.select import ACQUISITIONS
from prefpipe.common.config import ConfigError
from prefpipe.grpo.algorithm.advantages import SCALE_MODES
from prefpipe.grpo.algorithm.losses import AGGREGATORS
from prefpipe.grpo.algorithm.objectives import OBJECTIVES
from prefpipe.grpo.algorithm.reference import REFERENCE_MODES
from prefpipe.grpo.algorithm.spans import MASK_MODES
from prefpipe.grpo.kl import ESTIMATORS
from prefpipe.grpo.rewards import REWARD_SOURCES
from prefpipe.grpo.risk_measures import RISK_MEASURES
from prefpipe.grpo.rollout.engines import ENGINES
from prefpipe.grpo.rollout.engines.correction import CORRECTIONS
from prefpipe.reward.heads.disentangle import DECORRELATIONS, FOLLOW_FORMS, LENGTH_SCALES
from prefpipe.reward.heads.registry import HEADS

SCHEMAS = Path(__file__).resolve().parents[1] / "workflow" / "schemas"
NAME_LIST = re.compile(r"\b\w+(?:\s*[|,]\s*\w+)+")  # "bt | gpm | bgpm", "verifier, exact_match, ..."

# (schema file, property path below `properties`/`$defs` as dotted keys, registry)
PAIRS = [
    ("grpo.schema.yaml", "importance_correction", CORRECTIONS),
    ("grpo.schema.yaml", "policy_objective", OBJECTIVES),
    ("grpo.schema.yaml", "kl_estimator", ESTIMATORS),
    ("grpo.schema.yaml", "scale_rewards", SCALE_MODES),
    ("grpo.schema.yaml", "mask_mode", MASK_MODES),
    ("grpo.schema.yaml", "reference_mode", REFERENCE_MODES),
    ("grpo.schema.yaml", "reward_fn.risk_measure", RISK_MEASURES),
    ("reward.schema.yaml", "follow", FOLLOW_FORMS),
    ("reward.schema.yaml", "decorrelation", DECORRELATIONS),
    ("reward.schema.yaml", "length_scale", LENGTH_SCALES),
    ("active_learning.schema.yaml", "strategies", ACQUISITIONS),
    ("active_learning.schema.yaml", "kl_weight", kl_weight.MODES),
]

# Free strings a registry checks: (schema file, property path, registry, an overlay naming `{name}` there, the key
# the config checks name).
REGISTRY_CHECKED = [
    (
        "grpo.schema.yaml",
        "loss_type",
        AGGREGATORS,
        {"grpo": {"runs": {"verifier": {"loss_type": "{name}"}}}},
        "grpo.runs.verifier.loss_type",
    ),
    (
        "grpo.schema.yaml",
        "engine",
        ENGINES,
        {"grpo": {"runs": {"verifier": {"rollout": {"engine": "{name}"}}}}},
        "grpo.runs.verifier.rollout.engine",
    ),
    (
        "grpo.schema.yaml",
        "reward_fn.type",
        REWARD_SOURCES,
        {"grpo": {"runs": {"verifier": {"rewards": [{"type": "{name}"}]}}}},
        "grpo.runs.verifier.rewards[0].type",
    ),
    (
        "reward.schema.yaml",
        "head.type",
        HEADS,
        {"reward": {"variants": {"gpm": {"head": {"type": "{name}"}}}}},
        "reward.variants.gpm.head.type",
    ),
]


def _fields(node, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], dict]]:
    """Every named property of a schema with its path of property names (`properties`/`$defs` levels skipped)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
                for name, sub in value.items():
                    yield (*path, name), sub
                    yield from _fields(sub, (*path, name))
            elif isinstance(value, dict | list):
                yield from _fields(value, path)
    elif isinstance(node, list):
        for item in node:
            yield from _fields(item, path)


def schema_names(field: dict) -> set[str]:
    """The names a field allows: its enum (of the items, for an array), else the list its description gives."""
    target = field.get("items", field) if field.get("type") == "array" else field
    if "enum" in target:
        return {str(v) for v in target["enum"] if v is not None}
    found = NAME_LIST.search(field.get("description", ""))
    return {n.strip() for n in re.split(r"[|,]", found.group(0))} if found else set()


def find(schema_file: str, dotted: str) -> list[dict]:
    schema = yaml.safe_load((SCHEMAS / schema_file).read_text())
    want = tuple(dotted.split("."))
    return [field for path, field in _fields(schema) if path[-len(want) :] == want]


@pytest.mark.parametrize(("schema_file", "dotted", "registry"), PAIRS, ids=[f"{f}:{d}" for f, d, _ in PAIRS])
def test_schema_names_equal_the_registry(schema_file, dotted, registry):
    fields = find(schema_file, dotted)
    assert len(fields) == 1, f"{schema_file}: expected one field {dotted!r}, found {len(fields)}"
    names = schema_names(fields[0])
    assert names, f"{schema_file} {dotted}: neither an enum nor a description listing the names"
    assert names == set(registry), (
        f"{schema_file} {dotted} allows {sorted(names)} but the registry holds {sorted(registry)}: "
        "add or remove the name in both"
    )


def _named(overlay, name: str):
    """The overlay with `{name}` replaced by `name` wherever it stands as a value."""
    if isinstance(overlay, dict):
        return {k: _named(v, name) for k, v in overlay.items()}
    if isinstance(overlay, list):
        return [_named(v, name) for v in overlay]
    return name if overlay == "{name}" else overlay


@pytest.mark.parametrize(
    ("schema_file", "dotted", "registry", "overlay", "key"),
    REGISTRY_CHECKED,
    ids=[f"{f}:{d}" for f, d, *_ in REGISTRY_CHECKED],
)
def test_a_registry_name_is_a_free_string_the_config_checks_refuse(
    schema_file, dotted, registry, overlay, key
):
    (field,) = find(schema_file, dotted)
    assert field.get("type") == "string" and "enum" not in field, f"{schema_file} {dotted}: not a free string"
    assert not schema_names(field), f"{schema_file} {dotted} lists names; the registry is their one home"
    with pytest.raises(ConfigError) as refused:
        pipeline(_named(overlay, "unregistered_name"))
    message = str(refused.value)
    assert message.startswith(key) and "'unregistered_name'" in message, message
    assert all(name in message for name in registry), f"the error lists the registered names: {message}"


def test_the_reader_takes_enums_items_and_description_lists():
    assert schema_names({"type": "string", "enum": ["a", "b", None]}) == {"a", "b"}
    assert schema_names({"type": "array", "items": {"enum": ["x"]}}) == {"x"}
    assert schema_names({"type": "string", "description": "a head (pkg.mod): bt | gpm"}) == {"bt", "gpm"}
    assert schema_names({"type": "string", "description": "none listed"}) == set()
