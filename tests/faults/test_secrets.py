"""Fault: a credential leaking into what prefpipe or Snakemake writes. A credential-shaped config value is
refused at parse time naming its key (so it never becomes a rule param, a `--config` argument or
`.snakemake/` metadata); tokens come from the environment; and one redaction covers everything a stage writes
(config.json, the argv in versions.json, metrics, summaries, log lines)."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys

import pytest
from support.faults import FAKE_TOKEN, files_containing
from support.settings import data_settings, pipeline
from support.workflow import repo_copy

from prefpipe.common.config import ConfigError
from prefpipe.common.logs import setup_logging
from prefpipe.common.run_record import RunRecord
from prefpipe.prep_data import main as prep_data
from prefpipe.settings.build import to_mapping

OPENAI_STYLE = "sk-FaKeKeyForTests0123456789abcdef"


@pytest.mark.parametrize(
    ("overlay", "key"),
    [
        ({"wandb": {"project": FAKE_TOKEN}}, "wandb.project"),
        ({"report": {"title": f"run with {OPENAI_STYLE}"}}, "report.title"),
        ({"data": {"prompts": {"instruction": f"api_key={FAKE_TOKEN}"}}}, "data.prompts.instruction"),
        # user-given names (issue 50): refused at parse time, before they become rule wildcards and log lines
        ({"eval": {"benchmarks": {FAKE_TOKEN: "synthetic"}}}, "eval.benchmarks (a name in it)"),
        ({"reward": {"variants": {FAKE_TOKEN: {}}}}, "reward.variants (a name in it)"),
        ({"report": {"compare": {FAKE_TOKEN: "results_seed1"}}}, "report.compare (a name in it)"),
    ],
)
def test_credential_in_config_is_refused_naming_the_key_never_the_value(overlay, key):
    escaped = re.escape(key)
    with pytest.raises(ConfigError, match=rf"^{escaped}: looks like a credential") as info:
        pipeline(overlay)
    assert FAKE_TOKEN not in str(info.value) and OPENAI_STYLE not in str(info.value)
    assert "HF_TOKEN" in str(info.value)


def test_stage_started_by_hand_with_a_token_in_its_config_refuses_it(tmp_path, caplog):
    values = to_mapping(data_settings()) | {
        "wandb": {"enabled": False, "mode": "offline", "project": FAKE_TOKEN}
    }
    with caplog.at_level(logging.ERROR):
        code = prep_data(["--config", json.dumps(values), "--out", str(tmp_path / "data")])
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert code == 2 and len(errors) == 1 and "config.wandb.project: looks like a credential" in errors[0]
    assert FAKE_TOKEN not in caplog.text and not (tmp_path / "data").exists()


def test_everything_a_run_record_and_the_logs_write_is_redacted(tmp_path, monkeypatch, capsys):
    """The real writers with a planted token in argv (a secret flag's value and an inline JSON config), the
    config (a secret-named key and a value), metrics, the summary and a log line: none reaches a file or stderr."""
    inline = json.dumps({"hub_token": FAKE_TOKEN, "note": f"token={FAKE_TOKEN}"})
    monkeypatch.setattr(sys, "argv", ["prep_data", "--config", inline, "--hub-token", "abc123", OPENAI_STYLE])
    setup_logging()
    out = tmp_path / "out"
    record = RunRecord(out, "prep_data", {"hub_token": "abc123", "path": f"/data/{FAKE_TOKEN}/x", "seed": 0})
    record.log(step=1, loss=0.5, message=f"used {FAKE_TOKEN}")
    logging.getLogger("prefpipe.test").warning("loading with %s and %s", FAKE_TOKEN, OPENAI_STYLE)
    record.finish({"source": f"org/set?token={FAKE_TOKEN}", "n": 3})
    stderr = capsys.readouterr().err
    assert "loading with <redacted> and <redacted>" in stderr
    for secret in (FAKE_TOKEN, OPENAI_STYLE, "abc123"):
        assert files_containing(out, secret) == [] and secret not in stderr
    versions = json.loads((out / "versions.json").read_text(encoding="utf-8"))
    assert versions["argv"][3:] == ["--hub-token", "<redacted>", "<redacted>"]
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))["config"]
    assert config == {"hub_token": "<redacted>", "path": "/data/<redacted>/x", "seed": 0}
    assert json.loads((out / "summary.json").read_text(encoding="utf-8"))["n"] == 3


def test_snakemake_never_records_a_planted_token(tmp_path):
    """A real `snakemake -n`: a --configfile holding a token stops the parse naming the key, and no file in the
    workflow folder (.snakemake/ included) holds the token; a token in the environment (HF_TOKEN, where the hub
    client reads it) passes and is recorded nowhere either."""
    work = repo_copy(tmp_path / "wf", link_src=True)
    planted = tmp_path / "planted.yaml"
    planted.write_text(f"wandb:\n  project: {FAKE_TOKEN}\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "snakemake", "-n", "--quiet", "rules", "--cores", "1"]
    run = subprocess.run(
        [*cmd, "--configfile", str(planted)], cwd=work, capture_output=True, text=True, timeout=120
    )
    assert run.returncode != 0 and "wandb.project: looks like a credential" in run.stdout + run.stderr
    assert FAKE_TOKEN not in run.stdout + run.stderr
    named = tmp_path / "named.yaml"  # a benchmark named like a token (issue 50): refused at the same parse
    named.write_text(f"eval:\n  benchmarks:\n    {FAKE_TOKEN}: synthetic\n", encoding="utf-8")
    run = subprocess.run(
        [*cmd, "--configfile", str(named)], cwd=work, capture_output=True, text=True, timeout=120
    )
    assert (
        run.returncode != 0
        and "eval.benchmarks (a name in it): looks like a credential" in run.stdout + run.stderr
    )
    assert FAKE_TOKEN not in run.stdout + run.stderr and files_containing(work, FAKE_TOKEN) == []
    env = {**os.environ, "HF_TOKEN": FAKE_TOKEN}
    run = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert files_containing(work, FAKE_TOKEN) == []
