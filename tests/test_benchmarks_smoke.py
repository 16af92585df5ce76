"""Every script in benchmarks/ runs as a CPU smoke (issue 47 item 4): a real subprocess at its smallest size,
which must exit 0 and write its JSON with finite figures and no recorded error. Ratios are not asserted (a
smoke's figures mean nothing); that the call still works is. A benchmark whose call rots (e.g. a constructor
gains an argument) fails here, the failure naming the script and its stderr's tail.

The peer side (TRL, the `bench` extra, which scripts/test.sh installs) runs too; without it these tests skip
naming why, except under CI=true, where a missing peer fails. rollout_vllm.py runs its plain engine only unless
vLLM is importable (the vLLM tier, PREFPIPE_VLLM=1, has its own virtualenv). The shell scripts (setup.sh,
gpu_wheels.sh: they download wheels) are checked with `bash -n` only.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.tiers import need

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
SHARED_PAIRS = ROOT.parent / "shared" / "data" / "hh_rlhf_helpful_train.jsonl"
# script -> (arguments, JSON it writes relative to the output folder, the optional packages it needs).
# "{out}" is the temporary output folder (also PREFPIPE_BENCH_OUT, where common.write puts its JSON).
SMOKE = {
    "dag_build.py": (["--runs", "1", "--variants", "16"], "dag_build.json", ()),
    "reward_train.py": (["--smoke"], "reward_train.json", ("trl",)),
    "grpo_step.py": (["--smoke"], "grpo_step_smoke.json", ("trl",)),
    "scoring.py": (["--smoke", "--only", "synthetic"], "scoring.json", ()),
    "grpo_memory.py": (["--smoke", "--out", "{out}/grpo_memory.json"], "grpo_memory.json", ()),
    "rollout_vllm.py": (
        [
            "--prompts",
            "2",
            "--generations",
            "2",
            "--new-tokens",
            "4",
            "--repeats",
            "1",
            "--out",
            "{out}/rollout.json",
        ],
        "rollout.json",
        (),
    ),  # fmt: skip
    "gpu.py": (
        ["--device", "cpu", "--size", "tiny", "--quick", "--out", "{out}/gpu.json"],
        "gpu.json",
        ("trl",),
    ),
    "gpu_paper.py": (["--device", "cpu", "--size", "tiny", "--out", "{out}/paper.json"], "paper.json", ()),
    "gpu_buckets.py": (
        ["--device", "cpu", "--steps", "1", "--models", "llama", "--out", "{out}/b.json"],
        "b.json",
        (),
    ),  # fmt: skip
    "multihop_search.py": (
        ["--steps", "2", "--demos", "8", "--heldout", "2", "--batch", "4", "--out", "{out}/multihop.json"],
        "multihop.json",
        (),
    ),
    "device_check.py": (
        ["--device", "cpu", "--size", "tiny", "--rounds", "1", "--out", "{out}"],
        "device_check.json",
        ("trl",),
    ),
}
# The scripts that start a child per side and case (device_check.py 10 at one round, gpu.py 9, gpu_paper.py 4,
# reward_train.py 3, grpo_step.py 2) run their workers in their own process (common.in_process: the same
# `--worker JSON` command line through the script's main()), so the smoke imports torch, transformers and TRL
# once per script, not once per child. scoring.py and grpo_memory.py keep real children (common.run_worker's
# subprocess path and child_env stay covered).
IN_PROCESS = {"device_check.py", "gpu.py", "gpu_paper.py", "grpo_step.py", "reward_train.py"}
NOT_SCRIPTS = {"common.py"}  # imported by the scripts, run through them
SHELL = (
    "setup.sh",
    "gpu_wheels.sh",
    "gpu_workflow_wheels.sh",
    "gpu_workflow.sh",
    "gpu_paper_chunk.sh",
    "device_window.sh",
)
# run by another script's smoke (test_gpu_workflow_script_smoke), or by a smoke of its own that first builds
# what the script reads (test_multihop_real_base_smoke: a policy folder), not through SMOKE
RUN_BY = {"workflow_record.py": "gpu_workflow.sh", "multihop_real_base.py": "test_multihop_real_base_smoke"}


def test_every_benchmark_script_has_a_smoke() -> None:
    """A new script in benchmarks/ must be added to SMOKE (or it would rot unseen)."""
    scripts = {p.name for p in BENCH.glob("*.py")} - NOT_SCRIPTS - set(RUN_BY)
    assert scripts == set(SMOKE), f"benchmarks/ scripts without a smoke entry: {scripts - set(SMOKE)}"
    assert {p.name for p in BENCH.glob("*.sh")} == set(SHELL)


def _needs(packages: tuple[str, ...]) -> None:
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    if not SHARED_PAIRS.exists():
        missing.append(str(SHARED_PAIRS))
    if not missing:
        return
    need(f"not installed/present: {', '.join(missing)} (scripts/test.sh installs the bench extra)")


def numbers(value, where: str = "") -> list[tuple[str, float]]:
    """Every number in a JSON value with its path; raises on a recorded error."""
    if isinstance(value, dict):
        for key in ("error", "errors", "fatal", "traceback", "skipped"):
            assert not value.get(key), f"{where}.{key}: {str(value[key])[-1500:]}"
        assert value.get("status") not in ("error", "partial"), f"{where}.status: {value.get('status')}"
        return [n for k, v in value.items() for n in numbers(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [n for i, v in enumerate(value) for n in numbers(v, f"{where}[{i}]")]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return []
    return [(where, float(value))]


def run_smoke(script: str, out: Path) -> dict:
    args, written, needs = SMOKE[script]
    _needs(needs)
    if script == "rollout_vllm.py" and importlib.util.find_spec("vllm") is None:
        args = [*args, "--engines", "plain"]  # stated in the module docstring: vLLM's side is its own tier
    env = {**os.environ, "PREFPIPE_BENCH_OUT": str(out), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
           "PREFPIPE_BENCH_IN_PROCESS": "1" if script in IN_PROCESS else "0",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}  # fmt: skip
    cmd = [sys.executable, str(BENCH / script), *(a.format(out=out) for a in args)]
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, f"benchmarks/{script} failed (rc {res.returncode}):\n{res.stderr[-3000:]}"
    path = out / written
    assert path.exists(), f"benchmarks/{script} wrote no {written}; stdout:\n{res.stdout[-2000:]}"
    return json.loads(path.read_text())


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_benchmark_smoke(script: str, tmp_path: Path) -> None:
    if script == "device_check.py" and not (BENCH / script).exists():
        pytest.fail("benchmarks/device_check.py is listed but missing")
    payload = run_smoke(script, tmp_path)
    found = numbers(payload, script)
    bad = [(w, v) for w, v in found if not math.isfinite(v)]
    assert found and not bad, f"benchmarks/{script}: non-finite figures {bad[:10]}"


@pytest.mark.parametrize("script", SHELL)
def test_benchmark_shell_scripts_parse(script: str) -> None:
    res = subprocess.run(["bash", "-n", str(BENCH / script)], capture_output=True, text=True)
    assert res.returncode == 0, f"benchmarks/{script}: {res.stderr}"


def test_smoke_names_a_broken_script(tmp_path: Path) -> None:
    """The smoke fails naming the script when its call breaks: a copy of dag_build.py (the quickest) with
    a call that no longer exists."""
    broken = BENCH / "_broken_smoke_probe.py"
    broken.write_text(
        (BENCH / "dag_build.py")
        .read_text()
        .replace("def main() -> None:", "def main() -> None:\n    common.nope()")
    )
    SMOKE["_broken_smoke_probe.py"] = SMOKE["dag_build.py"]
    try:
        with pytest.raises(AssertionError, match=r"benchmarks/_broken_smoke_probe.py failed \(rc 1\)"):
            run_smoke("_broken_smoke_probe.py", tmp_path)
    finally:
        broken.unlink()
        del SMOKE["_broken_smoke_probe.py"]


def test_gpu_workflow_script_smoke(tmp_path: Path) -> None:
    """benchmarks/gpu_workflow.sh (the workflow's GPU run) on the CPU: gpu_smoke.yaml with the tiny overlay, up to
    the base only, into a temporary results folder. Its record (workflow_record.py) has the rc, the jobs and each
    stage's device; --require-cuda then refuses the run, naming the GPU stage that ran on the CPU."""
    where = tmp_path / "where.yaml"
    where.write_text(f"results_dir: {tmp_path}/results\n")
    configs = f"config/experiments/gpu_smoke.yaml .test/config/tiny.yaml {where}"
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PREFPIPE_WORKFLOW_PYTHON": sys.executable,
           "PREFPIPE_REQUIRE_CUDA": "0", "PREFPIPE_GPU_CONFIGS": configs, "OMP_NUM_THREADS": "1",
           "PREFPIPE_WORKFLOW_TARGETS": f"{tmp_path}/results/base/summary.json"}  # fmt: skip
    res = subprocess.run(["bash", str(BENCH / "gpu_workflow.sh")], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=900)  # fmt: skip
    assert res.returncode == 0, (
        f"benchmarks/gpu_workflow.sh failed (rc {res.returncode}):\n{res.stdout[-3000:]}"
    )
    record = json.loads((tmp_path / "out" / "workflow.json").read_text())
    assert record["rc"] == 0 and record["jobs"] == {"done": 2, "total": 2}
    stages = {s["stage"]: s for s in record["stages"]}
    assert set(stages) == {"prep_data", "build_base"}
    assert stages["build_base"]["device"] == "cpu" and stages["build_base"]["stage_seconds"] > 0
    assert set(record["job_seconds"]) == {"prep_data", "build_base"}
    assert record["off_cuda"] == ["base"]  # the GPU stage that ran on the CPU; prep_data is no GPU stage
    check = subprocess.run(
        [sys.executable, str(BENCH / "workflow_record.py"), "--results", f"{tmp_path}/results", "--log",
         str(tmp_path / "out" / "snakemake.log"), "--rc", "0", "--wall", "1", "--out", str(tmp_path / "again.json"),
         "--require-cuda"], capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 1 and "stages not on CUDA: ['base']" in check.stderr


def test_multihop_real_base_smoke(tmp_path: Path) -> None:
    """benchmarks/multihop_real_base.py on a tiny random policy folder (it needs a saved model) and the real
    multi-hop files its experiment config names: 2 questions x 2 episodes, finite figures."""
    from support.models import save_tiny_policy

    if not SHARED_PAIRS.parent.joinpath("multihop_2wiki_train.jsonl").exists():
        need(f"not present: {SHARED_PAIRS.parent} (the real multi-hop files)")
    policy = save_tiny_policy(tmp_path / "policy")
    out = tmp_path / "multihop_real.json"
    config = ROOT / "config" / "experiments" / "multihop_real.yaml"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}  # fmt: skip
    cmd = [sys.executable, str(BENCH / "multihop_real_base.py"), str(policy), str(config), "--questions", "2",
           "--group", "2", "--out", str(out)]  # fmt: skip
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, f"benchmarks/multihop_real_base.py failed:\n{res.stderr[-3000:]}"
    found = numbers(json.loads(out.read_text()), "multihop_real_base.py")
    assert found and all(math.isfinite(v) for _, v in found), found
