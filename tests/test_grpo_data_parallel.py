"""Data-parallel GRPO: two gloo processes (launched like `accelerate launch` does, through torch.distributed.run)
take the same two steps as one process on the same batch: same weights, same losses and reward metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from support.torchrun import finish, start

WORKER = Path(__file__).parent / "support" / "grpo_dp_worker.py"


def _launch(out: Path, processes: int, overrides: dict) -> tuple[dict, list[dict]]:
    finish(start(WORKER, processes, out.with_suffix(".log"), str(out), json.dumps(overrides)))
    return load_file(out / "weights.safetensors"), json.loads((out / "metrics.json").read_text())


@pytest.mark.parametrize(
    "overrides",
    [
        {"beta": 0.0, "loss_type": "dapo"},
        {"beta": 0.04, "loss_type": "grpo", "scale_rewards": "batch", "num_iterations": 2},
    ],
)
def test_two_processes_take_the_one_process_steps(tmp_path, overrides):
    one_w, one_m = _launch(tmp_path / "one", 1, overrides)
    two_w, two_m = _launch(tmp_path / "two", 2, overrides)
    for name, value in one_w.items():
        # Adam turns float noise in a near-zero gradient entry into a step of up to lr (3e-2 here): a loose
        # absolute bound (the shared-prompt forward sums a prompt token's embedding gradient in another order;
        # one embedding entry of 10240 moved by 7.9e-5, every other parameter by < 1.2e-5)
        assert torch.allclose(value, two_w[name], atol=2e-4, rtol=1e-4), name
    for a, b in zip(one_m, two_m, strict=True):
        for key in (
            "loss",
            "policy_loss",
            "reward_mean",
            "reward_std",
            "grad_norm",
            "num_loss_tokens",
            "entropy",
            "completion_length_mean",
            "truncated_ratio",
        ):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key
        # KL diagnostics (a reference model only when beta > 0): over every process's tokens, not rank 0's
        kl_keys = ("kl_k3_mean", "kl_k1_mean", "kl_k3_max", "max_abs_log_ratio")
        assert all(key in a and key in b for key in kl_keys) == (overrides["beta"] > 0)
        for key in kl_keys if overrides["beta"] > 0 else ():
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-7), key
    assert one_m[-1]["grad_norm"] > 0
