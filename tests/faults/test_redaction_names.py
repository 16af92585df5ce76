"""Faults, second round: redaction by value and by the config keys that hold credentials, never by the names of
data (issue 35). A benchmark `secretbench`, subsets `api-key` / `password-reset` and an instruction about a
"token" pass through configs, summaries and metrics untouched; a credential-shaped value is still refused in a
config and redacted wherever it is written."""

from __future__ import annotations

import json

from support.faults import FAKE_TOKEN, files_containing
from support.settings import pipeline

from prefpipe.common.run_record import RunRecord
from prefpipe.common.secrets import redact, redact_text
from prefpipe.settings.build import to_mapping

NAMES = {"api-key": 0.75, "password-reset": 0.5, "token-budget": 0.25}
INSTRUCTION = "Answer with one token: the final number. Never ask for a password or secret key."


def test_data_named_like_credentials_passes_the_config_check_and_every_writer(tmp_path):
    settings = pipeline(
        {
            "eval": {
                "benchmarks": {
                    "secretbench": {"source": "secretbench.jsonl", "sections": {"chat": list(NAMES)}}
                }
            },
            "data": {"prompts": {"instruction": INSTRUCTION}},
        }
    )
    assert settings.data.prompts.instruction == INSTRUCTION
    assert settings.eval.eval.benchmarks["secretbench"].sections == {"chat": list(NAMES)}
    out = tmp_path / "eval"
    record = RunRecord(out, "eval_rewardbench", to_mapping(settings.eval) | {"hub_token": "abc123"})
    record.log(step=1, **{f"secretbench/{name}": value for name, value in NAMES.items()})
    record.finish({"benchmarks": {"secretbench": {"subsets": NAMES, "note": INSTRUCTION}}})
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["benchmarks"] == {"secretbench": {"subsets": NAMES, "note": INSTRUCTION}}
    metrics = json.loads((out / "metrics.jsonl").read_text(encoding="utf-8"))
    assert {k: v for k, v in metrics.items() if k.startswith("secretbench/")} == {
        f"secretbench/{name}": value for name, value in NAMES.items()
    }
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))["config"]
    assert config["eval"]["benchmarks"]["secretbench"]["sections"] == {"chat": list(NAMES)}
    assert config["hub_token"] == "<redacted>" and files_containing(out, "abc123") == []
    assert files_containing(out, "<redacted>") == [str(out / "config.json")]


def test_credentials_are_still_found_by_their_value():
    assert redact_text(f"api_key=AbCdEf0123456789xyz and {FAKE_TOKEN}") == "api_key=<redacted> and <redacted>"
    assert redact_text("token: the answer, password: reset it") == "token: the answer, password: reset it"
    assert redact({"wandb": {"api_key": "short"}, "subsets": {"api-key": {"n": 3}}}) == {
        "wandb": {"api_key": "<redacted>"},
        "subsets": {"api-key": {"n": 3}},
    }
