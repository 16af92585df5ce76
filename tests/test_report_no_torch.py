"""The report stage is CPU-only and reads files: it must run (import and a whole report on a fixture tree) in an
interpreter where torch, transformers, peft and accelerate cannot be imported at all. Its metric names come from
torch-free modules (grpo/metric_names.py, reward/metrics.py, evaluation/summary_keys.py); the run record's
device facts skip torch when it is missing (common/run_record.py). Run in a fresh interpreter, as the workflow
runs the stage, with an import hook that refuses those packages and counts each attempt."""

from __future__ import annotations

import json
import subprocess
import sys

from support.results_tree import manifest, write_results_tree
from support.settings import report_settings, stage_json
from support.stages import stage_argv, stage_env

HEAVY = ("torch", "transformers", "peft", "accelerate")
SCRIPT = """
import json, sys

tried = []


class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {heavy!r}:
            tried.append(name)
            raise ModuleNotFoundError(name)
        return None


sys.meta_path.insert(0, Refuse())
from prefpipe.report.__main__ import main

code = main(json.loads(sys.argv[1]))
print("EXIT", code, "LOADED", sorted(m for m in {heavy!r} if m in sys.modules), "TRIED", sorted(set(tried)))
"""


def test_the_report_stage_runs_without_torch(tmp_path):
    write_results_tree(tmp_path / "results", reward_steps=5, grpo_steps=5)
    settings = report_settings({"figure_dpi": 30}, experiment="synthetic-default", seed=0)
    argv = stage_argv(
        stage_json(settings),
        results=str(tmp_path / "results"),
        inputs=manifest().to_json(),
        out=str(tmp_path / "report"),
    )
    code = SCRIPT.format(heavy=HEAVY)
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(argv)],
        capture_output=True,
        text=True,
        timeout=300,
        env=stage_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "report" / "report.html").exists()
    # torch is tried once, by the run record's optional device facts, and nothing else asks for it
    assert "EXIT 0 LOADED [] TRIED ['torch']" in done.stdout, done.stdout + done.stderr[-3000:]
