"""Stopping a real stage process mid-run and comparing the resumed result with an uninterrupted run
(tests/test_stage_resume.py, tests/faults/test_interrupts.py)."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from prefpipe.grpo.metric_names import PHASE_KEYS
from support.stages import stage_env

TOL = 1e-6  # absolute and relative tolerance for every compared number (observed: exact equality)
# Wall-clock fields differ between any two runs; everything else must match (`seconds`, `feature_seconds`: the
# reward summary's head_fit records).
TIMING = {"time", "step_time", "tokens_per_second", "wall_time_s", "seconds_per_step", "resumed_from_step",
          "seconds", "feature_seconds", *PHASE_KEYS}  # fmt: skip


def stage_command(module: str, config: str, out: Path, **paths: Path) -> list[str]:
    """`python -m <module> --config ... --out ... --<path> ...` as the workflow runs a stage."""
    args = [sys.executable, "-m", module, "--config", config, "--out", str(out)]
    for flag, path in paths.items():
        args += [f"--{flag.replace('_', '-')}", str(path)]
    return args


def run_stage_process(cmd: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=stage_env(), capture_output=True, text=True, timeout=timeout)


def jsonl_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def signal_mid_run(
    cmd: list[str], metrics: Path, signum: int = signal.SIGTERM, after_rows: int = 2, timeout: float = 300
) -> str:
    """Start the stage, send `signum` as soon as `after_rows` steps are logged; assert it exits 128 + signum
    and return its output."""
    proc = subprocess.Popen(cmd, env=stage_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + timeout
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"stage ended ({proc.returncode}) before it could be interrupted:\n{proc.stdout.read()}"
                )
            if metrics.exists() and len(metrics.read_text().splitlines()) >= after_rows:
                proc.send_signal(signum)
                break
            if time.monotonic() > deadline:
                pytest.fail("no training step logged in time")
            time.sleep(0.01)
        output, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signum, output[-3000:]
    return output


def max_deviation(a, b, path: str = "") -> float:
    """Largest absolute difference between two JSON-like values; fails on any structural or non-numeric
    difference and on numeric differences beyond TOL. Keys in TIMING are skipped at every depth."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys_a, keys_b = set(a) - TIMING, set(b) - TIMING
        assert keys_a == keys_b, f"{path}: keys differ {sorted(keys_a ^ keys_b)}"
        return max([max_deviation(a[k], b[k], f"{path}.{k}") for k in keys_a], default=0.0)
    if isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{path}: {len(a)} != {len(b)} items"
        return max(
            [max_deviation(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(a, b, strict=True))],
            default=0.0,
        )
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, int | float):
        assert a == b, f"{path}: {a!r} != {b!r}"
        return 0.0
    if math.isnan(a) and math.isnan(b):
        return 0.0
    assert b == pytest.approx(a, rel=TOL, abs=TOL), f"{path}: {a} != {b}"
    return abs(a - b)


def weights_deviation(a: Path, b: Path) -> float:
    """Largest absolute difference between two safetensors files holding the same tensors (<= TOL)."""
    ta, tb = load_file(str(a)), load_file(str(b))
    assert set(ta) == set(tb)
    worst = max(float((ta[k].double() - tb[k].double()).abs().max()) for k in ta)
    assert worst <= TOL, worst
    return worst


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())
