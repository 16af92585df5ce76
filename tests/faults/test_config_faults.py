"""Faults in the configuration: each is refused before anything runs, in one line naming the key (and, for a
file that does not parse, the file and line). Numbers are finite in the schema and in the settings layer; names
that become folders match ^[A-Za-z0-9][A-Za-z0-9_.-]*$ without '..'; the test part is never the training part;
a key written twice is an error, also under a real Snakemake parse."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from support.settings import pipeline, reward_settings
from support.stages import SRC
from support.workflow import REPO, repo_copy

from prefpipe.common.config import ConfigError, read_config_file
from prefpipe.settings import schema
from prefpipe.settings.build import to_mapping
from prefpipe.settings.pipeline import build_stage, load_config, load_stage
from prefpipe.settings.reward import RewardSettings


def _refused(overlay, match: str) -> str:
    with pytest.raises(ConfigError, match=match) as info:
        pipeline(overlay)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
def test_non_finite_number_in_yaml_is_refused_by_the_schema(tmp_path, value):
    overlay = tmp_path / "over.yaml"
    overlay.write_text(
        f"reward:\n  variants:\n    bt:\n      head:\n        tau: {value}\n", encoding="utf-8"
    )
    config = load_config(overlay)
    with pytest.raises(ConfigError, match=r"^config\.reward\.variants\.bt\.head\.tau: must be finite"):
        schema.validate(config)


def test_non_finite_number_is_refused_by_the_settings_layer():
    values = to_mapping(reward_settings(variant="bt"))
    values["head"]["tau"] = float("inf")
    with pytest.raises(ConfigError, match=r"^reward\.variants\.bt\.head\.tau: must be a finite number"):
        build_stage(RewardSettings, values, "reward.variants.bt")
    # a stage's --config JSON may spell it Infinity: refused the same way by the stage's own check
    values["head"]["tau"] = float("nan")
    with pytest.raises(ConfigError, match=r"config\.head\.tau: must be finite"):
        load_stage(RewardSettings, values, "config")


@pytest.mark.parametrize(
    ("overlay", "key"),
    [
        ({"reward": {"variants": {"..": {"head": {"type": "bt"}}}}}, "reward.variants"),
        ({"reward": {"variants": {"a..b": None}}}, "reward.variants"),
        ({"reward": {"variants": {".hidden": None}}}, "reward.variants"),
        ({"grpo": {"runs": {"..": None}}}, "grpo.runs"),
        ({"models": {"..": {"gguf": "x.gguf"}}}, "models"),
        ({"report": {"compare": {"..": "elsewhere"}}}, "report.compare"),
        ({"experiment": ".."}, "experiment"),
        ({"experiment": "a/b"}, "experiment"),
    ],
)
def test_name_that_would_escape_results_is_refused(overlay, key):
    message = _refused(overlay, "^" + re.escape(key) + ": '[^']*' is not a valid name")
    assert "without '..'" in message


def test_stage_schema_refuses_dotdot_names_too():
    with pytest.raises(ConfigError, match=r"reward\.variants"):
        schema.validate({"defaults": {}, "variants": {"..": None}}, "reward.schema.yaml", "reward")
    with pytest.raises(ConfigError, match=r"^config\.variant: '\.\.' is not a valid name"):
        load_stage(RewardSettings, {**to_mapping(reward_settings(variant="bt")), "variant": ".."}, "config")


@pytest.mark.parametrize(
    ("overlay", "match"),
    [
        (
            {"data": {"source": "jsonl", "external": {"path": "pairs.jsonl", "test_split": "./pairs.jsonl"}}},
            r"^data\.external\.test_split 'pairs\.jsonl'|^data\.external\.test_split '\./pairs\.jsonl' is "
            r"data\.external\.path 'pairs\.jsonl'",
        ),
        (
            {
                "data": {
                    "source": "hf",
                    "external": {"path": "org/set", "split": "train", "test_split": "train"},
                }
            },
            r"^data\.external\.test_split and data\.external\.split are both 'train'",
        ),
        (
            {"data": {"prompts": {"source": "jsonl", "path": "p.jsonl", "test_path": "p.jsonl"}}},
            r"^data\.prompts\.path and prompts\.test_path are the same file",
        ),
        (
            {"data": {"prompts": {"source": "hf", "path": "org/p", "split": "train", "test_split": "train"}}},
            r"^data\.prompts\.split and prompts\.test_split are both 'train'",
        ),
    ],
)
def test_test_part_equal_to_training_part_is_refused_naming_both(overlay, match):
    _refused(overlay, match)


@pytest.mark.parametrize(
    ("overlay", "match"),
    [
        ({"reward": {"defaults": {"train": {"stepz": 1}}}}, r"^config\.reward\.defaults\.train: .*'stepz'"),
        ({"grpo": {"defaults": {"beta": "high"}}}, r"^config\.grpo\.defaults\.beta: 'high' is not of type"),
        (
            {"reward": {"defaults": {"backbone": {"model": ""}}}},
            r"^config\.reward\.defaults\.backbone\.model: ''",
        ),
        ({"report": {"compare": {"seed1": ""}}}, r"^config\.report\.compare\.seed1: '' should be non-empty"),
        (
            {"data": {"source": "jsonl", "external": {"path": " "}}},
            r"^data\.external\.path: data\.source jsonl",
        ),
        # anyOf / oneOf alternatives: the error still names the key
        ({"eval": {"benchmarks": {"mine": 5}}}, r"^config\.eval\.benchmarks\.mine: 5 is not of type"),
        (
            {"eval": {"benchmarks": {"mine": {"source": "x.jsonl", "sections": 5}}}},
            r"^config\.eval\.benchmarks\.mine\.sections: 5 is not valid",
        ),
    ],
)
def test_unknown_key_wrong_type_empty_string_and_any_of_name_the_key(overlay, match):
    _refused(overlay, match)


def test_malformed_yaml_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("reward:\n  only: [bt\n  x: 1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{bad}:3:4: not valid YAML: .*\(started at line 2\)$"):
        read_config_file(bad)


def test_duplicate_key_names_key_file_and_line(tmp_path):
    dup = tmp_path / "dup.yaml"
    dup.write_text("reward:\n  only: [bt]\n  only: [gpm]\n", encoding="utf-8")
    with pytest.raises(
        ConfigError, match=rf"^{dup}:3:3: not valid YAML: duplicate key 'only' \(first at line 2\)"
    ):
        read_config_file(dup)
    as_json = tmp_path / "dup.json"
    as_json.write_text('{"seed": 1, "seed": 2}', encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{as_json}: duplicate key 'seed'"):
        read_config_file(as_json)


def test_snakemake_parse_refuses_duplicate_key_and_malformed_default(tmp_path):
    """A real `snakemake -n`: a --configfile with a key written twice, and a broken config/config.yaml, stop
    the parse with the file, line and key; nothing is run and no results folder appears."""
    work = repo_copy(tmp_path / "wf", link_src=True)
    dup = tmp_path / "dup.yaml"
    dup.write_text("seed: 1\nseed: 2\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "snakemake", "-n", "--quiet", "rules", "--cores", "1"]
    run = subprocess.run(
        [*cmd, "--configfile", str(dup)], cwd=work, capture_output=True, text=True, timeout=120
    )
    assert run.returncode != 0
    assert f"{dup}:2:1: not valid YAML: duplicate key 'seed' (first at line 1)" in run.stdout + run.stderr
    default = work / "config" / "config.yaml"
    default.write_text(default.read_text(encoding="utf-8") + "\nseed: [0\n", encoding="utf-8")
    run = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "config/config.yaml:" in run.stdout + run.stderr and "not valid YAML" in run.stdout + run.stderr
    assert not (work / "results").exists()


def test_malformed_configfile_is_named_before_snakemake_reads_it(tmp_path):
    """Snakemake's CLI reads --configfile files before the Snakefile and names neither file nor line, so
    scripts/run.sh first runs `python -m prefpipe.common.config` on them: one line, file and line, exit 2."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("grpo:\n  runs: {a: 1\n", encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "prefpipe.common.config", str(bad)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=60,
    )
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith(f"config error: {bad}:3:1: not valid YAML") and run.stderr.count("\n") == 1
    assert "prefpipe.common.config" in (REPO / "scripts" / "run.sh").read_text(encoding="utf-8")
