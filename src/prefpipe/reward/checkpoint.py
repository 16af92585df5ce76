"""Training checkpoints: model/head, optimizer, scheduler, RNG (via accelerate) + step and data position.

Written atomically: every process saves into a hidden temp folder, then the main process renames it to
step-NNNNNNNN and updates latest.json, so a kill mid-save never leaves a checkpoint that looks complete.
accelerate's save_state/load_state also cover DDP and DeepSpeed ZeRO shards.

A checkpoint stores a fingerprint of the settings that shape the trajectory and of the inputs (base model,
training pairs). A rerun whose fingerprint differs stops with CheckpointMismatch naming the folder instead of
silently continuing someone else's run (SLURM requeues and Snakemake retries rerun the same command, so a
mismatch always means the config or the data changed since the checkpoint was written).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from prefpipe.common.config import ConfigError
from prefpipe.common.io import atomic_write_json, read_json

LATEST = "latest.json"
TRAINER_STATE = "trainer_state.json"


class CheckpointMismatch(ConfigError):
    """A checkpoint folder holds a run with another config or other inputs; resuming it would mix two runs."""


def config_fingerprint(settings_dict: dict[str, Any], inputs: dict[str, Any] | None = None) -> str:
    """Hash of the settings that change the training trajectory (not checkpoint/eval bookkeeping) and of the
    run's inputs (e.g. base model and a digest of the training pairs)."""
    relevant = {k: v for k, v in settings_dict.items() if k not in ("eval", "wandb", "torch_threads")}
    train = dict(relevant.get("train", {}))
    for key in ("checkpoint_every", "keep_checkpoints", "resume"):
        train.pop(key, None)
    relevant["train"] = train
    if inputs:
        relevant["inputs"] = inputs
    return hashlib.sha256(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()[:16]


def check_fingerprint(root: Path, fingerprint: str) -> Path | None:
    """The newest complete checkpoint under root if it was written with this fingerprint, None if there is
    none; CheckpointMismatch (naming the folder) if it belongs to a run with another config or inputs."""
    latest = find_latest(root)
    if latest is None:
        return None
    stored = read_json(latest / TRAINER_STATE).get("fingerprint")
    if stored != fingerprint:
        raise CheckpointMismatch(
            f"checkpoint {latest} was written with a different config or inputs (config hash {stored} != "
            f"{fingerprint} of this run); not resuming it. Delete {root} to start afresh, or set "
            "train.resume: never"
        )
    return latest


def save_checkpoint(accelerator: Any, root: Path, step: int, trainer_state: dict[str, Any]) -> Path:
    """Collective: every process must call it. Returns the final checkpoint folder."""
    name = f"step-{step:08d}"
    final, tmp = root / name, root / f".{name}.tmp"
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        atomic_write_json(tmp / TRAINER_STATE, trainer_state)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        atomic_write_json(root / LATEST, {"step": step, "path": name})
        for old in root.glob("step-*"):
            if old.name != name:
                shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def find_latest(root: Path) -> Path | None:
    pointer = root / LATEST
    if not pointer.exists():
        return None
    path = root / read_json(pointer)["path"]
    return path if (path / TRAINER_STATE).exists() else None


def load_checkpoint(accelerator: Any, path: Path) -> dict[str, Any]:
    """Restore model, optimizer, scheduler and RNG states in place; return the trainer state."""
    accelerator.load_state(str(path))
    return read_json(path / TRAINER_STATE)


def remove_checkpoints(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
