"""The settings layer: config/config.yaml (and its schema) is the only owner of defaults, every config file
loads through one typed layer, and the merge rules are the ones Snakemake applies."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import math
import pkgutil
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config

import prefpipe.settings
from prefpipe.common.config import ConfigError, read_config_file
from prefpipe.settings.ablation_variants import derived_variants, fix_variant_names
from prefpipe.settings.build import to_mapping
from prefpipe.settings.merge import deep_merge
from prefpipe.settings.pipeline import PipelineSettings, load_config
from prefpipe.settings.run import RUN_WIDE_KEYS

REPO = Path(__file__).resolve().parents[1]
CONFIG_FILES = sorted((REPO / "config").rglob("*.yaml"))
OVERLAYS = sorted((REPO / "config" / "experiments").glob("*.yaml")) + sorted(
    (REPO / "tests" / "configs").glob("*.yaml")
)
STAGE_CONFIGS = [p for p in CONFIG_FILES if p.parent.name in ("config", "experiments")]


def settings_dataclasses() -> list[type]:
    found = []
    for info in pkgutil.iter_modules(prefpipe.settings.__path__):
        module = importlib.import_module(f"prefpipe.settings.{info.name}")
        for value in vars(module).values():
            if dataclasses.is_dataclass(value) and value.__module__ == module.__name__:
                found.append(value)
    return found


def test_settings_dataclasses_declare_no_defaults():
    """A default written in code would be a second owner beside config.yaml (the two used to disagree)."""
    classes = [c for c in settings_dataclasses() if c.__name__ != "PipelineSettings"]
    assert len(classes) >= 20
    with_defaults = [
        f"{cls.__name__}.{f.name}"
        for cls in classes
        for f in dataclasses.fields(cls)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    ]
    assert with_defaults == []


@pytest.mark.parametrize("path", STAGE_CONFIGS, ids=lambda p: p.name)
def test_every_config_file_loads_through_the_settings_layer(path):
    overlays = [] if path.name == "config.yaml" else [path]
    settings = PipelineSettings.from_config(load_config(*overlays))
    # something to train (config/experiments/multihop.yaml trains no reward model) and a benchmark
    assert (settings.reward or settings.grpo) and settings.eval.eval.benchmarks


def _without_run_keys(mapping: dict, *names: str) -> dict:
    return {k: v for k, v in mapping.items() if k not in RUN_WIDE_KEYS and k not in names}


def test_each_stage_setting_is_the_value_in_config_yaml():
    """Every field of every stage's settings comes from config.yaml, and every key there reaches a stage."""
    raw = read_config_file(REPO / "config" / "config.yaml")
    settings = PipelineSettings.from_config(copy.deepcopy(raw))
    # demonstrations_needed (base.sft.enabled) and multihop_alongside (a run's prompts) are derived, not keys
    derived = ("demonstrations_needed", "multihop_alongside")
    assert _without_run_keys(to_mapping(settings.data), *derived) == raw["data"]
    assert _without_run_keys(to_mapping(settings.base)) == raw["base"]
    report = {k: v for k, v in raw["report"].items() if k != "enabled"}
    # the report's ablation reference and broken variant are derived from their one owner, `ablation`
    assert "reference" not in raw["report"]["ablation"] and "broken" not in raw["report"]["ablation"]
    owned = {k: raw["ablation"][k] for k in ("reference", "broken")}
    report["ablation"] = {**report["ablation"], **owned}
    assert _without_run_keys(to_mapping(settings.report)) == report
    assert to_mapping(settings.eval)["eval"] == raw["eval"]
    ablation = {k: v for k, v in raw["ablation"].items() if k not in ("enabled", "head", "fixes")}
    got = _without_run_keys(to_mapping(settings.ablation), "variants")
    # the fixes reach the stage as the variant pairs derived from them, and reward.variants as those variants
    # (their resolved values: tests/test_ablation_variants.py)
    assert got.pop("fixes") == fix_variant_names(raw["ablation"]["head"], raw["ablation"]["fixes"])
    assert got == ablation
    variants = {**derived_variants(raw["ablation"], raw["ablation"]["head"]), **raw["reward"]["variants"]}
    for name, variant in settings.reward.items():
        expected = deep_merge(raw["reward"]["defaults"], variants[name])
        assert _without_run_keys(to_mapping(variant), "variant") == expected, name
    for name, run in settings.grpo.items():
        expected = deep_merge(raw["grpo"]["defaults"], raw["grpo"]["runs"][name])
        got = _without_run_keys(to_mapping(run), "run")
        # a run's own `seed` (null: the experiment's) becomes the run-wide seed of its settings
        own_seed = expected.pop("seed")
        assert run.seed == (raw["seed"] if own_seed is None else own_seed), name
        # the schema fills each reward source's defaults (weight, opponent, ...): compare the given keys
        for spec, given in zip(got.pop("rewards"), expected.pop("rewards"), strict=True):
            assert {k: spec[k] for k in given} == given
        assert got == expected, name
    assert (settings.data.seed, settings.data.experiment) == (raw["seed"], raw["experiment"])
    assert settings.results_dir == raw["results_dir"].replace("{experiment}", raw["experiment"])


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_merge_rules_agree_with_snakemake(overlay):
    """Snakemake merges --configfile with update_config; prefpipe's deep_merge must give the same config."""
    base = read_config_file(REPO / "config" / "config.yaml")
    theirs = copy.deepcopy(base)
    update_config(theirs, read_config_file(overlay))
    assert deep_merge(base, read_config_file(overlay)) == theirs


def test_merge_replaces_lists_and_merges_mappings():
    base = {"a": {"x": 1, "y": [1, 2]}, "b": [1]}
    merged = deep_merge(base, {"a": {"y": [3]}, "b": None})
    assert merged == {"a": {"x": 1, "y": [3]}, "b": None}
    assert base == {"a": {"x": 1, "y": [1, 2]}, "b": [1]}  # inputs untouched


def test_reward_only_that_drops_a_needed_variant_fails_naming_both():
    with pytest.raises(ConfigError) as err:
        PipelineSettings.from_config(load_config({"reward": {"only": ["bt", "gpm"]}}))
    message = str(err.value)
    assert "grpo.runs.bgpm_risk.reward_model = 'bgpm'" in message
    assert "reward.only" in message


def test_grpo_only_enabled_and_report_switch():
    only = PipelineSettings.from_config(load_config({"grpo": {"only": ["verifier"]}}))
    assert list(only.grpo) == ["verifier"]
    off = PipelineSettings.from_config(
        load_config({"grpo": {"enabled": False}, "report": {"enabled": False}, "reward": {"only": ["bt"]}})
    )
    assert off.grpo == {} and off.report is None and list(off.reward) == ["bt"]
    with pytest.raises(ConfigError, match=r"grpo.only names \['nope'\]"):
        PipelineSettings.from_config(load_config({"grpo": {"only": ["nope"]}}))


@pytest.mark.parametrize(
    ("overlay", "key"),
    [
        ({"reward": {"defaults": {"train": {"stepz": 1}}}}, "config.reward.defaults.train: Additional"),
        ({"grpo": {"defaults": {"beta": "high"}}}, "config.grpo.defaults.beta: 'high' is not of type"),
        ({"reward": {"variants": {"gpm": {"head": {"tau": math.inf}}}}}, "reward.variants.gpm.head.tau"),
        (
            {"grpo": {"defaults": {"temperature": math.nan}}},
            "config.grpo.defaults.temperature: must be finite",
        ),
        ({"eval": {"benchmarks": {"synthetic": None}}}, "eval.benchmarks: every benchmark is null"),
    ],
)
def test_bad_values_name_the_key(overlay, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.").replace("[", r"\[")):
        PipelineSettings.from_config(load_config(overlay))


def test_a_stage_mapping_with_a_missing_or_unknown_key_is_refused():
    from prefpipe.settings.pipeline import load_stage
    from prefpipe.settings.reward import RewardSettings

    good = to_mapping(PipelineSettings.from_config(load_config()).reward["gpm"])
    missing = copy.deepcopy(good)
    del missing["train"]["steps"]
    with pytest.raises(ConfigError, match=r"config.train: missing key\(s\) steps"):
        load_stage(RewardSettings, missing, "config")
    extra = copy.deepcopy(good) | {"colour": "red"}
    with pytest.raises(ConfigError, match="colour"):
        load_stage(RewardSettings, extra, "config")


def test_malformed_yaml_names_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("reward:\n  only: [bt\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.yaml:3:1: not valid YAML: .*started at line 2"):
        load_config(bad)


def test_stage_json_round_trips_through_the_stage_builder():
    from prefpipe.settings.pipeline import load_stage

    settings = PipelineSettings.from_config(load_config())
    for stage in [
        settings.data,
        settings.base,
        settings.eval,
        settings.report,
        settings.ablation,
        *settings.reward.values(),
        *settings.grpo.values(),
    ]:
        rebuilt = load_stage(type(stage), yaml.safe_load(settings.stage_json(stage, 2)), "config")
        assert rebuilt == dataclasses.replace(stage, torch_threads=2)


# Parameters whose names collide with a config key but are not read from the config: the model loaders' weight
# dtype and device for inference (the API CONTRACTS.md documents), and the report's "not recorded" marker for
# configs an older results tree lacks.
NOT_CONFIG_DEFAULTS = {
    ("reward/backbone.py", "load_backbone", "dtype"),
    ("reward/model.py", "load_reward_model", "device"),
    ("reward/model.py", "load_reward_model", "dtype"),
    ("reward/network.py", "train", "mode"),  # torch's nn.Module.train(mode=True) signature, not a setting
    ("report/run_tables.py", ".get", "experiment"),
    ("report/run_tables.py", ".get", "seed"),
    # the exported loader runs without prefpipe (no config to read): its own call defaults are its API
    ("export/reward_loader.py", "__init__", "device"),
    ("export/reward_loader.py", "__init__", "dtype"),
    ("export/reward_loader.py", "encode", "batch_size"),
    ("export/card.py", ".get", "backbone"),  # an old run's config.json without the section: the card says so
    # head_config.json / reward_head.json saved before data.keep_response: those models kept each response's start
    ("export/card.py", ".get", "keep_response"),
    ("export/reward_loader.py", ".get", "keep_response"),
    # the eval summary's prompt-overlap count (a figure, shown as "n/a" when absent), not reward.eval.train_pairs
    ("report/sections/prompt_overlap.py", ".get", "train_pairs"),
    # the active-learning summary's full-data block (its per-strategy figures), not active_learning.strategies
    ("report/scoreboard/uses_seeds.py", ".get", "strategies"),
    # the prompt loader's report of the held-out file (its overlap count), not data.multihop.heldout
    ("data/prepare.py", ".get", "heldout"),
}


def _config_keys() -> set[str]:
    keys: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                keys.add(key)
                walk(value)

    walk(read_config_file(REPO / "config" / "config.yaml"))
    # structural names that are not settings of their own
    return keys - {
        "type",
        "name",
        "path",
        "source",
        "data",
        "eval",
        "train",
        "model",
        "head",
        "defaults",
        "runs",
        "variants",
        "enabled",
        "only",
    }


def test_no_literal_default_for_a_config_key_outside_the_settings_layer():
    """A function parameter named after a config key with a literal default, or a `.get(key, literal)`, would be a
    second owner of that default (they used to disagree with config.yaml)."""
    import ast

    keys, found = _config_keys(), []
    package = REPO / "src" / "prefpipe"
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.startswith("settings/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args
                positional = args.posonlyargs + args.args
                defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
                pairs = list(zip(positional, defaults, strict=True)) + list(
                    zip(args.kwonlyargs, args.kw_defaults, strict=True)
                )
                for arg, default in pairs:
                    literal_none = isinstance(default, ast.Constant) and default.value is None
                    if default is not None and not literal_none and arg.arg in keys:
                        found.append((rel, node.name, arg.arg))
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
            ) and (
                len(node.args) == 2 and isinstance(node.args[0], ast.Constant) and node.args[0].value in keys
            ):
                found.append((rel, ".get", node.args[0].value))
    assert set(found) - NOT_CONFIG_DEFAULTS == set(), sorted(set(found) - NOT_CONFIG_DEFAULTS)


def test_the_workflow_settings_carry_complete_reward_specs():
    """The schema's list-item defaults are filled in the whole config too, not only in a stage process: the
    schema files are reached through `$ref`, where a file's own `$schema` used to switch validators."""
    from support.settings import reward_spec

    for run in PipelineSettings.from_config(load_config()).grpo.values():
        for spec in run.rewards:
            assert set(spec) == set(reward_spec(spec["type"])), (run.run, spec)
