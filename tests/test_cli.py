"""The `prefpipe` command (src/prefpipe/cli.py, [project.scripts]): run as the console script runs it, in a
subprocess on this checkout's src. `report` builds the comparison report from finished results folders with
the settings and inputs the workflow's report recorded; `inspect` and `export` are the owning modules' own
commands (their arguments, their errors)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

from support.results_tree import manifest, write_results_tree
from support.settings import report_settings, stage_json
from support.stages import run_main, stage_env

from prefpipe.report.__main__ import main as report_stage

ROOT = Path(__file__).resolve().parents[1]


def prefpipe(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "prefpipe.cli", *args],
        capture_output=True,
        text=True,
        env=stage_env(),
        cwd=cwd or ROOT,
        timeout=300,
    )


def test_console_script_is_declared():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"prefpipe": "prefpipe.cli:main"}


def test_help_names_each_command_and_each_delegate_shows_its_module_arguments():
    top = prefpipe("--help")
    assert top.returncode == 0
    for command in ("report", "inspect", "export"):
        assert command in top.stdout
    inspect = prefpipe("inspect", "--help")
    assert inspect.returncode == 0 and "usage: prefpipe inspect" in inspect.stdout
    assert "--step" in inspect.stdout and "--fresh" in inspect.stdout
    export = prefpipe("export", "--help")
    assert export.returncode == 0 and "usage: prefpipe export" in export.stdout
    assert "sequence-classification" in export.stdout
    report = prefpipe("report", "--help")
    assert report.returncode == 0 and "--compare NAME=DIR" in report.stdout


def test_report_rebuilds_from_the_recorded_settings_and_compares_another_folder(tmp_path):
    results, other = tmp_path / "results", tmp_path / "results_seed1"
    write_results_tree(results, reward_steps=3, grpo_steps=3)
    write_results_tree(other, seed=1, reward_steps=3, grpo_steps=3)
    config = report_settings({"figure_dpi": 40}, experiment="synthetic-default", seed=0)
    code, _ = run_main(  # what the workflow's report rule leaves under results/report
        report_stage, stage_json(config), results=str(results), inputs=manifest().to_json(),
        out=str(results / "report"),
    )  # fmt: skip
    assert code == 0
    assert json.loads((results / "report" / "inputs.json").read_text()) == manifest().files
    out = tmp_path / "compared"
    done = prefpipe("report", str(results), "--compare", f"seed1={other}", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(out / "report.html")
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "compared with seed1" in html
    used = json.loads((out / "config.json").read_text())["config"]
    assert used["compare"] == {"seed1": str(other)} and used["figure_dpi"] == 40
    assert json.loads((out / "inputs.json").read_text()) == manifest().files
    # results recorded by an older prefpipe, before a report key existed: the current default fills it, said once
    recorded = results / "report" / "config.json"
    old = json.loads(recorded.read_text())
    del old["config"]["policy_comparison"]
    recorded.write_text(json.dumps(old))
    again = prefpipe("report", str(results), "--out", str(tmp_path / "older"))
    assert again.returncode == 0, again.stderr[-2000:]
    assert "recorded before report key(s) policy_comparison: the current defaults are used" in again.stderr
    # the workflow's compare check (issue 50): the run itself, or one folder under two names, is refused
    itself = prefpipe("report", str(results), "--compare", f"self={results}", "--out", str(tmp_path / "self"))
    assert itself.returncode == 2 and not (tmp_path / "self").exists()
    assert f"report.compare.self: {results} is this run's own results folder" in itself.stderr
    twice = [f"a={other}", "--compare", f"b={other}"]
    doubled = prefpipe("report", str(results), "--compare", *twice, "--out", str(tmp_path / "twice"))
    assert (
        doubled.returncode == 2
        and "report.compare.b" in doubled.stderr
        and "report.compare.a" in doubled.stderr
    )


def test_report_errors_are_one_line(tmp_path):
    results = tmp_path / "results"
    write_results_tree(results, reward_steps=3, grpo_steps=3)
    unrecorded = prefpipe("report", str(results), "--out", str(tmp_path / "out"))
    assert unrecorded.returncode == 2
    assert unrecorded.stderr.strip().splitlines() == [
        f"prefpipe report: {results / 'report' / 'config.json'}: not found "
        "(run the workflow's report once, or pass --config FILE)"
    ]
    bad = prefpipe("report", str(results), "--compare", "seed1")
    assert bad.returncode == 2 and "expected NAME=DIR" in bad.stderr
    assert not (tmp_path / "out").exists()


def test_inspect_and_export_run_their_modules(tmp_path):
    inspect = prefpipe("inspect", str(tmp_path / "no-run"), "--step", "0", "--out", str(tmp_path / "page"))
    assert inspect.returncode == 2
    assert f"{tmp_path / 'no-run'}: this is a folder that does not exist, not a GRPO run" in inspect.stderr
    export = prefpipe("export", str(tmp_path / "no-run"), str(tmp_path / "out"))
    assert export.returncode == 2 and export.stderr.startswith("export_reward: ")
    assert not (tmp_path / "out").exists() and not (tmp_path / "page").exists()


def test_each_command_says_what_kind_of_folder_it_was_given(tmp_path):
    results = tmp_path / "results"
    write_results_tree(results, reward_steps=3, grpo_steps=3)
    reward, grpo = results / "reward" / "bt", results / "grpo" / "gpm-verifier"
    inspect = prefpipe("inspect", str(reward), "--step", "0", "--out", str(tmp_path / "page"))
    assert inspect.returncode == 2
    assert f"{reward}: this is a reward run (train_reward), not a GRPO run" in inspect.stderr
    export = prefpipe("export", str(grpo), str(tmp_path / "out"))
    assert export.returncode == 2
    assert f"{grpo}: this is a GRPO run (train_grpo), not a reward run" in export.stderr
    report = prefpipe("report", str(reward), "--out", str(tmp_path / "report"))
    assert report.returncode == 2
    assert f"{reward}: this is a reward run (train_reward), not a workflow results folder" in report.stderr
    assert not any((tmp_path / name).exists() for name in ("page", "out", "report"))
