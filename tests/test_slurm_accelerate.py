"""The accelerate configs in config/accelerate/ as `accelerate launch` reads them.

Multi-GPU and DeepSpeed runs need GPUs (and the deepspeed package), so here the configs go through accelerate's
own launch-time code: the config loader (unknown keys fail), the launch-argument resolution, and, for DeepSpeed,
the plugin the launched process builds from the environment the launcher sets. The single-process config is
launched for real on a tiny model.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from accelerate.utils import DeepSpeedPlugin
from accelerate.utils.launch import prepare_deepspeed_cmd_env

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "config" / "accelerate"


def _launch_args(config: Path, *extra: str):
    """What `accelerate launch --config_file CONFIG ... -m prefpipe.train_reward` resolves to."""
    args = launch_command_parser().parse_args(
        ["--config_file", str(config), *extra, "-m", "prefpipe.train_reward"]
    )
    return _validate_launch_command(args)


def _deepspeed_plugin(config: Path, monkeypatch) -> DeepSpeedPlugin:
    """The DeepSpeedPlugin a process started by `accelerate launch` would build (from the launcher's env)."""
    monkeypatch.chdir(REPO)  # deepspeed_config_file paths are relative to the launch directory
    args, defaults, mp_from_config = _launch_args(config, "--num_processes", "2")
    assert args.use_deepspeed
    fields = list(defaults.deepspeed_config) + (["mixed_precision"] if mp_from_config else [])
    args.deepspeed_fields_from_accelerate_config = ",".join(fields)  # as launch_command() sets it
    _, env = prepare_deepspeed_cmd_env(args)
    for key, value in env.items():
        if key.startswith("ACCELERATE_"):
            monkeypatch.setenv(key, value)
    return DeepSpeedPlugin()


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("single_process.yaml", "NO"),
        ("multi_gpu.yaml", "MULTI_GPU"),
        ("deepspeed_zero2.yaml", "DEEPSPEED"),
        ("deepspeed_zero3.yaml", "DEEPSPEED"),
    ],
)
def test_config_loads_with_accelerate(name, kind):
    config = load_config_from_file(str(CONFIGS / name))  # raises on unknown keys
    assert config.distributed_type.value == kind
    assert config.num_machines == 1 and config.machine_rank == 0


def test_multi_gpu_takes_the_process_count_from_the_launch_line():
    args, _, _ = _launch_args(CONFIGS / "multi_gpu.yaml", "--num_processes", "8")
    assert args.multi_gpu and not args.use_deepspeed
    assert args.num_processes == 8 and args.mixed_precision == "bf16"


@pytest.mark.parametrize(("name", "stage"), [("deepspeed_zero2.yaml", 2), ("deepspeed_zero3.yaml", 3)])
def test_deepspeed_plugin_builds_the_stage(name, stage, monkeypatch):
    plugin = _deepspeed_plugin(CONFIGS / name, monkeypatch)
    assert plugin.zero_stage == stage
    assert plugin.hf_ds_config.is_zero3() == (stage == 3)
    assert plugin.zero3_init_flag == (stage == 3)  # ZeRO-3 builds models already sharded
    # Left "auto" for accelerate to fill from the dataloader and Accelerator at prepare() time; precision from
    # the Accelerator's mixed_precision, which make_accelerator takes from backbone.precision (one owner).
    assert plugin.deepspeed_config["train_micro_batch_size_per_gpu"] == "auto"
    assert plugin.deepspeed_config["bf16"] == {"enabled": "auto"}


@pytest.mark.parametrize(("mixed", "bf16"), [("bf16", True), ("no", False)])
def test_deepspeed_precision_follows_the_accelerator(mixed, bf16, monkeypatch):
    """What AcceleratorState does with the Accelerator's mixed_precision under DeepSpeed: fills bf16."""
    plugin = _deepspeed_plugin(CONFIGS / "deepspeed_zero3.yaml", monkeypatch)
    plugin.set_mixed_precision(mixed)
    assert plugin.deepspeed_config["bf16"]["enabled"] is bf16


def test_deepspeed_yaml_must_leave_precision_to_the_json(tmp_path, monkeypatch):
    """The check the configs are written around is live: precision in the YAML next to a JSON is refused."""
    config = yaml.safe_load((CONFIGS / "deepspeed_zero2.yaml").read_text())
    config["mixed_precision"] = "bf16"
    config["deepspeed_config"]["deepspeed_config_file"] = str(CONFIGS / "ds_zero2.json")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    with pytest.raises(ValueError, match="deepspeed_config_file"):
        _deepspeed_plugin(bad, monkeypatch)


LAUNCHED = """
import torch
from accelerate import Accelerator

accelerator = Accelerator()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
x = torch.randn(32, 8, device=accelerator.device)
y = x.sum(dim=1, keepdim=True)
losses = []
for _ in range(20):
    loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
state = accelerator.state
print("STATE", state.distributed_type.value, state.num_processes, state.mixed_precision, losses[0], losses[-1])
"""


def test_single_process_config_launches_a_training_step(tmp_path):
    script = tmp_path / "step.py"
    script.write_text(LAUNCHED)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
         str(CONFIGS / "single_process.yaml"), str(script)],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("STATE"))
    _, kind, processes, precision, first, last = line.split()
    assert (kind, processes, precision) == ("NO", "1", "no")
    assert float(last) < 0.5 * float(first)  # the prepared model and optimizer really train
