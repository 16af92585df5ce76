"""Names kept in two places agree: every schema enum (or a free-string field's listed names) that a registry in
the code also holds is the registry's set, so adding a loss, an engine, a head or a strategy to its registry
and forgetting the schema (or the other way round) fails here, naming both.

The registries are the one home of each name (the code dispatches on them); the schema repeats them so that a
wrong name is refused with the list before any stage runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from prefpipe.active import kl_weight
from prefpipe.active.select import ACQUISITIONS
from prefpipe.grpo.algorithm.advantages import SCALE_MODES
from prefpipe.grpo.algorithm.losses import AGGREGATORS
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
    ("grpo.schema.yaml", "loss_type", AGGREGATORS),
    ("grpo.schema.yaml", "engine", ENGINES),
    ("grpo.schema.yaml", "importance_correction", CORRECTIONS),
    ("grpo.schema.yaml", "kl_estimator", ESTIMATORS),
    ("grpo.schema.yaml", "scale_rewards", SCALE_MODES),
    ("grpo.schema.yaml", "mask_mode", MASK_MODES),
    ("grpo.schema.yaml", "reference_mode", REFERENCE_MODES),
    ("grpo.schema.yaml", "reward_fn.type", REWARD_SOURCES),
    ("grpo.schema.yaml", "reward_fn.risk_measure", RISK_MEASURES),
    ("reward.schema.yaml", "head.type", HEADS),
    ("reward.schema.yaml", "follow", FOLLOW_FORMS),
    ("reward.schema.yaml", "decorrelation", DECORRELATIONS),
    ("reward.schema.yaml", "length_scale", LENGTH_SCALES),
    ("active_learning.schema.yaml", "strategies", ACQUISITIONS),
    ("active_learning.schema.yaml", "kl_weight", kl_weight.MODES),
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


def test_the_reader_takes_enums_items_and_description_lists():
    assert schema_names({"type": "string", "enum": ["a", "b", None]}) == {"a", "b"}
    assert schema_names({"type": "array", "items": {"enum": ["x"]}}) == {"x"}
    assert schema_names({"type": "string", "description": "a head (pkg.mod): bt | gpm"}) == {"bt", "gpm"}
    assert schema_names({"type": "string", "description": "none listed"}) == set()
