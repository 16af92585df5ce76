"""Faults: a checkpoint write that fails (a file-size limit, as a full disk does) and corrupt checkpoints.

- A real train_reward process under RLIMIT_FSIZE (set in the child only) cannot write its first checkpoint:
  it exits 2 with one line naming the step folder and the cause; no temporary folder and no step folder stay.
- A corrupt checkpoint (a truncated or garbled file of the reward or GRPO stage, garbled checkpoint.json)
  stops the rerun with exit 2 and one line naming the file and how to start afresh; no traceback; the
  checkpoint folder is left as it was (the user decides what to delete).
"""

from __future__ import annotations

import hashlib
import json
import resource
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from support.interrupts import run_stage_process, stage_command
from support.models import save_tiny_base, save_tiny_policy
from support.rows import rl_rows, write_reward_data
from support.settings import grpo_settings, reward_settings, stage_json
from support.stages import stage_env

from prefpipe.common.io import write_jsonl
from prefpipe.grpo.algorithm.train_state import save_train_state

REWARD = {
    "head": {"dim": 4},
    "data": {"max_length": 48},
    "train": {"steps": 4, "batch_size": 4, "micro_batch_size": 4, "checkpoint_every": 2, "keep_checkpoints": True},
    "eval": {"batch_size": 8, "train_pairs": 0},
}  # fmt: skip
GRPO = {"steps": 3, "prompts_per_step": 2, "num_generations": 2, "max_new_tokens": 4, "micro_batch_size": 4,
        "checkpoint_every": 2, "keep_checkpoint": True, "sample_every": 0,
        "rewards": [{"type": "format", "weight": 1.0, "pattern": "[0-9]"}]}  # fmt: skip


def _tree_hash(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if " ERROR " in line]


# ------------------------------------------------------------------------------------------ failed writes
def test_a_file_size_limit_during_a_checkpoint_leaves_no_temp_folder_and_one_clear_line(tmp_path):
    base, data = save_tiny_base(tmp_path / "base"), write_reward_data(tmp_path / "data")
    config = stage_json(
        reward_settings({**REWARD, "train": {**REWARD["train"], "checkpoint_every": 1}}, seed=1)
    )
    out = tmp_path / "out"
    cmd = stage_command("prefpipe.train_reward", config, out, data=data, base=base)
    # Larger than config.json / versions.json / a metrics row, smaller than the checkpoint's weights.
    weights = sum(p.stat().st_size for p in base.glob("*.safetensors"))
    limit = 64 * 1024
    assert weights > limit, weights

    def limit_file_size() -> None:  # in the child only
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = subprocess.run(
        cmd, env=stage_env(), capture_output=True, text=True, timeout=300, preexec_fn=limit_file_size
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    [line] = _error_lines(result.stderr)
    step = out / "checkpoints" / "step-00000001"
    assert f"could not write checkpoint {step}" in line and "File too large" in line, line
    assert "no earlier checkpoint exists" in line and "make room and rerun" in line, line
    assert list((out / "checkpoints").iterdir()) == []  # neither the temporary folder nor a step folder
    rows = (out / "metrics.jsonl").read_text()
    assert rows.endswith("\n") and [json.loads(r)["step"] for r in rows.splitlines()] == [1]
    assert not (out / "model").exists() and not (out / "summary.json").exists()


def test_a_failed_write_keeps_the_previous_checkpoint_whole(tmp_path):
    """Unit level, same cause: a GRPO checkpoint at step 2 over one at step 1 under a size limit (child)."""
    root = tmp_path / "checkpoint"
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.AdamW(model.parameters())
    save_train_state(root, model, opt, 1, "fp", {"metrics": []})
    before = _tree_hash(root)
    script = f"""
import resource, sys, torch
sys.path.insert(0, {str(Path(__file__).resolve().parents[2] / "src")!r})
from prefpipe.common.checkpoint import CheckpointWriteError
from prefpipe.grpo.algorithm.train_state import save_train_state
resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))
model = torch.nn.Linear(64, 64)
try:
    save_train_state({str(root)!r}, model, torch.optim.AdamW(model.parameters()), 2, "fp", {{"metrics": []}})
except CheckpointWriteError as err:
    print(err)
"""
    done = subprocess.run(
        ["python", "-c", script], env=stage_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"could not write checkpoint {root / 'step-00000002'}" in done.stdout, done.stdout
    assert f"the previous checkpoint {root / 'step-00000001'} is intact" in done.stdout, done.stdout
    assert _tree_hash(root) == before and not list(root.glob(".*"))


# ------------------------------------------------------------------------------------------ corrupt checkpoints
@pytest.fixture(scope="module")
def reward_run(tmp_path_factory):
    """A finished reward run that kept its step-2 checkpoint (keep_checkpoints), and its command."""
    root = tmp_path_factory.mktemp("reward")
    base, data = save_tiny_base(root / "base"), write_reward_data(root / "data")
    config = stage_json(reward_settings(REWARD, seed=1))
    out = root / "out"
    done = run_stage_process(stage_command("prefpipe.train_reward", config, out, data=data, base=base))
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "checkpoints" / "step-00000002").is_dir()
    return out, lambda o: stage_command("prefpipe.train_reward", config, o, data=data, base=base)


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpo")
    policy = save_tiny_policy(root / "policy", seed=2)
    data = root / "data"
    write_jsonl(data / "rl_prompts_train.jsonl", rl_rows())
    write_jsonl(
        data / "rl_prompts_heldout.jsonl", rl_rows()
    )  # the learning curve reads it, as prep_data writes it
    config = stage_json(grpo_settings(GRPO, run="corrupt", seed=4))
    out = root / "out"
    done = run_stage_process(stage_command("prefpipe.train_grpo", config, out, data=data, policy=policy))
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "checkpoint" / "step-00000002").is_dir()
    return out, lambda o: stage_command("prefpipe.train_grpo", config, o, data=data, policy=policy)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garble(path: Path) -> None:
    """Same size, bytes overwritten from the start (a safetensors header, a zip directory...)."""
    data = bytearray(path.read_bytes())
    data[8:40] = b"\xff" * 32
    path.write_bytes(bytes(data))


def _garble_json(path: Path) -> None:
    path.write_text(path.read_text()[:-10] + "}}}garbage")


SLOW = pytest.mark.slow  # the same check as a fast case on the other stage or the other damage
CASES = [
    pytest.param("reward", "model.safetensors", _truncate, "has ", id="reward-truncated-weights"),
    pytest.param(
        "reward", "model.safetensors", _garble, "could not be loaded", id="reward-garbled-weights", marks=SLOW
    ),
    pytest.param(
        "reward", "checkpoint.json", _garble_json, "is corrupt", id="reward-garbled-checkpoint-json"
    ),
    pytest.param("grpo", "state.pt", _truncate, "has ", id="grpo-truncated-state", marks=SLOW),
    pytest.param("grpo", "state.pt", _garble, "not a readable torch file", id="grpo-garbled-state"),
]


@pytest.mark.parametrize(("kind", "name", "damage", "says"), CASES)
def test_a_corrupt_checkpoint_names_the_file_and_how_to_start_afresh(
    request, tmp_path, kind, name, damage, says
):
    finished, command = request.getfixturevalue(f"{kind}_run")
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    root = out / ("checkpoints" if kind == "reward" else "checkpoint")
    target = next(root.glob(f"step-*/**/{name}"))
    damage(target)
    before = _tree_hash(root)

    result = run_stage_process(command(out))
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    [line] = _error_lines(result.stderr)
    assert str(target) in line and says in line, line
    fresh = f"delete {root} to start afresh" + (", or set train.resume: never" if kind == "reward" else "")
    assert fresh in line, line
    assert _tree_hash(root) == before  # nothing deleted or rewritten behind the user's back
    print(line.split(" ERROR ", 1)[1])
