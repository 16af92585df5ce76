"""The paper-scale experiment (config/experiments/paper_gemma2b.yaml) as a SLURM user would start it, dry run:
`snakemake -n --profile slurm --configfile config/experiments/paper_gemma2b.yaml` from the repository root,
with the hub unreachable, must validate, plan every job with its GPUs, memory and runtime, and launch reward
training with `accelerate launch` and one process per GPU. The multi-node launcher is checked the same way:
the command each node would run, resolved by accelerate's own launch-argument code.

Fast tier: no cluster, no GPU, no network (tests/test_slurm_cluster.py runs jobs on a real SLURM).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from support.workflow import WITH_PROFILES, repo_copy

REPO = Path(__file__).resolve().parents[1]
PAPER = "config/experiments/paper_gemma2b.yaml"
MULTINODE = REPO / "scripts" / "slurm" / "accelerate_multinode.sh"
GPU_RULES = {"build_base", "train_reward_model", "eval_rewardbench", "train_grpo", "eval_policy"}
MODULES = {
    "prep_data": "prep_data",
    "build_base": "build_base",
    "train_reward_model": "train_reward",
    "eval_rewardbench": "eval_rewardbench",
    "train_grpo": "train_grpo",
    "eval_policy": "eval_policy",
    "report": "report",
}


def _jobs(stdout: str) -> list[dict]:
    """Every job of a `snakemake -n --printshellcmds` listing: rule, resources, wildcards, shell command."""
    jobs: list[dict] = []
    for line in stdout.splitlines():
        head = re.match(r"^(?:local)?rule (\w+):$", line)
        if head:
            jobs.append({"rule": head.group(1), "resources": {}, "wildcards": "", "shell": None})
        elif jobs and line.strip().startswith("resources:"):
            pairs = line.split("resources:", 1)[1].split(", ")
            jobs[-1]["resources"] = dict(p.strip().split("=", 1) for p in pairs)
        elif jobs and line.strip().startswith("wildcards:"):
            jobs[-1]["wildcards"] = line.split("wildcards:", 1)[1].strip()
        elif jobs and line.startswith("Shell command:"):
            jobs[-1]["shell"] = line.split("Shell command:", 1)[1].strip()
    return jobs


@pytest.fixture(scope="module")
def paper_dry_run(tmp_path_factory) -> tuple[list[dict], Path, Path]:
    """The exact README command in a copy of the repository (the `slurm` link kept), the hub unreachable."""
    workdir = repo_copy(tmp_path_factory.mktemp("paper") / "repo", *WITH_PROFILES)
    hf_home = workdir.parent / "hf_home"
    env = {k: v for k, v in os.environ.items() if k not in ("SNAKEMAKE_PROFILE", "HF_HUB_OFFLINE")}
    # Any hub access would fail (closed port) or leave files in HF_HOME: the dry run must do neither.
    env.update({"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(hf_home), "HF_DATASETS_OFFLINE": "0"})
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--profile", "slurm", "--configfile", PAPER],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return _jobs(result.stdout), workdir, hf_home


def test_paper_config_dry_runs_offline_with_every_job(paper_dry_run):
    jobs, _, hf_home = paper_dry_run
    assert not hf_home.exists(), "the dry run touched the Hugging Face cache"
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job["rule"]] = counts.get(job["rule"], 0) + 1
    # reward.only narrows the default's nine variants to three; three GRPO runs, each evaluated.
    assert counts == {
        "prep_data": 1,
        "build_base": 1,
        "train_reward_model": 3,
        "eval_rewardbench": 3,
        "train_grpo": 3,
        "eval_policy": 3,
        "report": 1,
        "all": 1,
    }, counts
    variants = {job["wildcards"] for job in jobs if job["rule"] == "train_reward_model"}
    assert variants == {"variant=bt", "variant=gpm", "variant=bgpm"}


def test_paper_gpu_rules_request_the_configured_resources(paper_dry_run):
    jobs, workdir, _ = paper_dry_run
    wanted = yaml.safe_load((workdir / PAPER).read_text())["resources"]
    for job in jobs:
        rule, res = job["rule"], job["resources"]
        if rule == "all":
            continue
        gpus = int(res.get("gpu", 0))
        assert (gpus > 0) == (rule in GPU_RULES), (rule, res)
        assert gpus == wanted[rule].get("gpu", 0), (rule, res)
        assert int(res["mem_mb"]) == wanted[rule]["mem_mb"] and int(res["runtime"]) == wanted[rule]["runtime"]
        assert "slurm_partition" not in res  # the profile's partitions.yaml picks by the GPU request


def test_paper_training_launches_one_process_per_gpu(paper_dry_run, monkeypatch):
    jobs, workdir, _ = paper_dry_run
    for job in jobs:
        rule, shell = job["rule"], job["shell"]
        if rule == "all":
            continue
        assert shell, job
        gpus = int(job["resources"].get("gpu", 0))
        if rule != "train_reward_model":  # one process, at most one GPU
            assert f"python -m prefpipe.{MODULES[rule]} " in shell and "accelerate" not in shell, shell
            continue
        launch = re.search(r"accelerate launch (.*?) -m prefpipe\.train_reward ", shell)
        assert launch, shell
        argv = shlex.split(launch.group(1))
        # The launch line resolved by accelerate itself, from the repository root as the job runs it.
        monkeypatch.chdir(workdir)
        args, _, _ = _validate_launch_command(launch_command_parser().parse_args([*argv, "-m", "x"]))
        assert args.num_processes == gpus == 4
        assert args.use_deepspeed and not args.multi_gpu
        config = load_config_from_file(argv[argv.index("--config_file") + 1])
        assert config.distributed_type.value == "DEEPSPEED"
        assert config.deepspeed_config["deepspeed_config_file"].endswith("ds_zero2.json")


# ------------------------------------------------------------------------------------------ several nodes
def _node_command(node_id: int, nodes: int = 2, **env: str) -> list[str]:
    """What scripts/slurm/accelerate_multinode.sh would exec on one node of an allocation (dry-run mode)."""
    slurm = {"SLURM_NNODES": str(nodes), "SLURM_NODEID": str(node_id), "PREFPIPE_DRY_RUN": "1", **env}
    result = subprocess.run(
        ["bash", str(MULTINODE), "--config_file", "config/accelerate/deepspeed_zero3.yaml",
         "-m", "prefpipe.train_reward", "--config", '{"seed": 0}', "--out", "results/reward/big"],
        env={**os.environ, **slurm}, capture_output=True, text=True, timeout=30, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return shlex.split(result.stdout)


@pytest.mark.parametrize("node_id", [0, 1])
def test_multinode_launch_resolves_rank_and_world(node_id, monkeypatch):
    words = _node_command(node_id, GPUS_PER_NODE="4", MAIN_PROCESS_IP="gpu-node-01")
    assert words[:2] == ["accelerate", "launch"]
    monkeypatch.chdir(REPO)  # the DeepSpeed JSON path in the accelerate config is relative to the root
    args, defaults, _ = _validate_launch_command(launch_command_parser().parse_args(words[2:]))
    assert (args.num_machines, args.num_processes, args.machine_rank) == (2, 8, node_id)
    assert (args.main_process_ip, args.main_process_port) == ("gpu-node-01", 29500)
    assert args.use_deepspeed and args.deepspeed_multinode_launcher == "standard"  # torchrun per node, no ssh
    assert args.module and args.training_script == "prefpipe.train_reward"
    assert args.training_script_args == ["--config", '{"seed": 0}', "--out", "results/reward/big"]


def test_multinode_launch_takes_gpus_from_slurm_and_refuses_outside_an_allocation():
    words = _node_command(0, nodes=3, SLURM_GPUS_ON_NODE="2", MAIN_PROCESS_IP="n0")
    assert words[words.index("--num_processes") + 1] == "6"
    outside = subprocess.run(
        ["bash", str(MULTINODE), "-m", "prefpipe.train_reward"],
        env={k: v for k, v in os.environ.items() if not k.startswith("SLURM_")},
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert outside.returncode == 2 and "inside a SLURM allocation" in outside.stderr
