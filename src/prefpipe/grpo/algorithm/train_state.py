"""GRPO's part of a checkpoint: trainable weights, optimizer state, step, and every metric/sample row so far.

The folder layout, atomic write, fingerprint guard and cleanup are prefpipe.common.checkpoint's. Sampling is
seeded per step (not from a running RNG), so weights + optimizer + records restore a run exactly: a resumed run
draws the same prompts and completions as an uninterrupted one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from prefpipe.common import checkpoint as ckpt
from prefpipe.common.io import atomic_write_json, read_json
from prefpipe.common.optim.master_weights import MasterWeights

STATE_FILE = "state.pt"
RECORDS_FILE = "records.json"
# Run-config keys that never change what a run computes: a rerun may change them and still resume.
BOOKKEEPING_KEYS = (
    "torch_threads",
    "wandb",
    "eval",
    "checkpoint_every",
    "keep_checkpoint",
    "save_merged",
    "inspect_steps",
)


def run_fingerprint(config: dict[str, Any], inputs: dict[str, Any]) -> str:
    """Fingerprint of a run: its resolved config without bookkeeping keys, plus its inputs."""
    return ckpt.fingerprint(config, inputs, ignore=BOOKKEEPING_KEYS)


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def save_train_state(
    root: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | MasterWeights,
    step: int,
    run_fingerprint: str,
    records: dict[str, Any],
) -> Path:
    """Checkpoint `step` under root (state.pt + records.json); returns its folder."""

    def write(tmp: Path) -> None:
        state = {"model": trainable_state(model), "optimizer": optimizer.state_dict(), "step": step}
        torch.save({**state, "fingerprint": run_fingerprint}, tmp / STATE_FILE)
        atomic_write_json(tmp / RECORDS_FILE, records)

    return ckpt.save_checkpoint(root, step, run_fingerprint, write)


def load_train_state(
    root: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | MasterWeights,
    run_fingerprint: str,
) -> tuple[int, dict[str, Any]] | None:
    """Restore weights and optimizer in place from the newest checkpoint under root; return (step, records),
    None when there is none. CheckpointMismatch when it belongs to another run."""
    folder = ckpt.check_fingerprint(root, run_fingerprint)
    if folder is None:
        return None
    with ckpt.loading(folder):
        state = torch.load(folder / STATE_FILE, map_location="cpu", weights_only=True)
        params = dict(model.named_parameters())
        missing = sorted(set(state["model"]) - set(params))
        if missing:
            raise ValueError(f"{folder}/{STATE_FILE}: parameters not in the model: {missing[:5]}")
        with torch.no_grad():
            for name, value in state["model"].items():
                params[name].copy_(value)
        optimizer.load_state_dict(state["optimizer"])
        return int(state["step"]), read_json(folder / RECORDS_FILE)
