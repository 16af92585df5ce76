"""Atomic outputs, JSONL reading errors, run records and config merging."""

from __future__ import annotations

import json
import os
import stat

import pytest

from prefpipe.common.config import ConfigError, DataError, UserError, load_config_arg
from prefpipe.common.io import atomic_dir, atomic_write_json, read_jsonl, write_jsonl
from prefpipe.common.run_record import RunRecord, redact
from prefpipe.settings.merge import deep_merge


def test_jsonl_round_trip_keeps_unicode(tmp_path):
    rows = [{"id": "a", "text": "café ✓"}, {"id": "b", "n": 2}]
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    assert read_jsonl(path) == rows
    assert "café ✓" in path.read_text(encoding="utf-8")


def test_read_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n{"a": \n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not valid JSON"):
        read_jsonl(path)


def test_failed_atomic_dir_leaves_previous_output_untouched(tmp_path):
    target = tmp_path / "model"
    with atomic_dir(target) as tmp:
        (tmp / "weights.txt").write_text("v1")
    with pytest.raises(RuntimeError), atomic_dir(target) as tmp:
        (tmp / "weights.txt").write_text("half-written v2")
        raise RuntimeError("crash mid-save")
    assert (target / "weights.txt").read_text() == "v1"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temp folder left behind


def test_atomic_write_json_replaces_whole_file(tmp_path):
    path = tmp_path / "x.json"
    atomic_write_json(path, {"a": 1})
    atomic_write_json(path, {"b": [1, 2]})
    assert json.loads(path.read_text()) == {"b": [1, 2]}


def test_run_record_writes_config_versions_metrics_summary(tmp_path):
    record = RunRecord(tmp_path, "unit", {"seed": 3, "hub_token": "hf_secret", "nested": {"api_key": "k"}})
    record.log(step=1, loss=0.5)
    record.log(step=2, loss=0.25)
    record.finish({"accuracy": 0.9})
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["config"]["seed"] == 3
    assert "hf_secret" not in (tmp_path / "config.json").read_text()
    assert config["config"]["nested"]["api_key"] == "<redacted>"
    versions = json.loads((tmp_path / "versions.json").read_text())
    assert versions["packages"]["torch"] is not None
    metrics = read_jsonl(tmp_path / "metrics.jsonl")
    assert [m["loss"] for m in metrics] == [0.5, 0.25]
    assert json.loads((tmp_path / "summary.json").read_text())["accuracy"] == 0.9


def test_redact_leaves_ordinary_keys():
    assert redact({"tokenizer": {"vocab_size": 3}, "max_new_tokens": 4}) == {
        "tokenizer": {"vocab_size": 3},
        "max_new_tokens": 4,
    }
    assert redact({"HF_TOKEN": "x", "wandb_api_key": "y"}) == {
        "HF_TOKEN": "<redacted>",
        "wandb_api_key": "<redacted>",
    }
    assert redact({"lr": 1.0, "items": [{"password": "x"}]}) == {
        "lr": 1.0,
        "items": [{"password": "<redacted>"}],
    }


def test_config_helpers(tmp_path):
    assert deep_merge({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}}) == {"a": {"b": 1, "c": 3}}
    assert load_config_arg('{"x": 1}') == {"x": 1}
    path = tmp_path / "c.yaml"
    path.write_text("x: 2\n")
    assert load_config_arg(str(path)) == {"x": 2}
    with pytest.raises(ConfigError, match="neither inline JSON"):
        load_config_arg(str(tmp_path / "missing.yaml"))
    # a user error of either kind is a ValueError (callers that caught ValueError still do)
    assert issubclass(ConfigError, UserError) and issubclass(DataError, UserError)
    assert issubclass(UserError, ValueError)


def test_atomic_outputs_get_umask_mode_not_private(tmp_path):
    old = os.umask(0o022)
    try:
        path = atomic_write_json(tmp_path / "a.json", {})
        with atomic_dir(tmp_path / "folder") as tmp:
            (tmp / "f").write_text("x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "folder").stat().st_mode) == 0o755
