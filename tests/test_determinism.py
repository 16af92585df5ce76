"""Same seed, same bits: the stage frame pins the CPU kernels (unless the user set them), records what ran, and
two runs of a reward training stage give byte-identical weights; a different kernel choice is visible."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.models import save_tiny_base
from support.rows import write_reward_data
from support.settings import reward_settings, stage_json
from support.stages import stage_env

from prefpipe.common.torch_runtime.determinism import PINS, cpu_flags, pin_cpu_kernels

AVX2 = {"avx2", "fma"} <= cpu_flags()


def test_the_pin_sets_what_the_user_left_unset_and_only_where_the_cpu_has_it():
    env: dict[str, str] = {}
    assert pin_cpu_kernels(env, {"avx2", "fma", "sse4_2"}) == PINS and env == PINS
    mine = {"ATEN_CPU_CAPABILITY": "avx512"}
    assert pin_cpu_kernels(mine, {"avx2", "fma", "avx512f"}) == {"MKL_CBWR": "AVX2"}
    assert mine == {"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AVX2"}  # the user's choice kept
    bare: dict[str, str] = {}
    assert pin_cpu_kernels(bare, {"sse4_2"}) == {} and bare == {}  # no AVX2: nothing to pin to


def _train(tmp_path, name, **env):
    """The reward stage as the workflow runs it (a subprocess, one thread), on the tiny base."""
    base = tmp_path / "base"
    if not base.exists():
        save_tiny_base(base)
        write_reward_data(tmp_path / "data")
    config = stage_json(
        reward_settings(
            {
                "head": {"dim": 4},
                "data": {"max_length": 48},
                "train": {"steps": 6, "batch_size": 8, "micro_batch_size": 8, "warmup_steps": 0},
                "eval": {"batch_size": 8, "train_pairs": 0},
            }
        )
    )
    clean = {k: v for k, v in stage_env().items() if k not in PINS}
    out = tmp_path / name
    result = subprocess.run(
        [sys.executable, "-m", "prefpipe.train_reward", "--config", config, "--data", str(tmp_path / "data"),
         "--base", str(base), "--out", str(out)],
        env={**clean, **env}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    weights = b"".join((out / "model" / f).read_bytes() for f in ("model.safetensors", "head.safetensors"))
    kernels = json.loads((out / "versions.json").read_text())["device"]["cpu_kernels"]
    return weights, kernels


@pytest.mark.skipif(not AVX2, reason="the pin needs an x86-64 CPU with AVX2")
def test_two_runs_give_identical_weights_and_record_the_pinned_kernels(tmp_path):
    first, kernels = _train(tmp_path, "a")
    second, _ = _train(tmp_path, "b")
    assert first == second
    assert kernels["aten_cpu_capability"] == "AVX2" and kernels["pinned"] is True
    assert kernels["env"]["ATEN_CPU_CAPABILITY"] == "avx2" and kernels["env"]["MKL_CBWR"] == "AVX2"
    # a user-set capability is kept and recorded; the portable scalar kernels give other bits
    scalar, user = _train(tmp_path, "c", ATEN_CPU_CAPABILITY="default")
    assert user["aten_cpu_capability"] == "DEFAULT" and user["pinned"] is False
    assert scalar != first
