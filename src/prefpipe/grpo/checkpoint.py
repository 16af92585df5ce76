"""Resumable training state, written atomically so a kill mid-write never leaves a half checkpoint.

A checkpoint holds the trainable weights, the optimizer state, the step, every metric/sample row so far and
a fingerprint of the run's config and inputs. Sampling is seeded per step (not from a running RNG), so a
resumed run draws exactly the same prompts and completions as an uninterrupted one.

A checkpoint whose fingerprint differs from the rerun's is never resumed: CheckpointMismatch names the folder
(the stage exits 2 before writing anything). The fingerprint leaves out settings that do not change the
trajectory (threads, logging, checkpoint cadence, evaluation), so changing those keeps a run resumable.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from prefpipe.common.config import ConfigError
from prefpipe.common.io import atomic_dir, atomic_write_json, read_json

STATE_FILE = "state.pt"
RECORDS_FILE = "records.json"
META_FILE = "checkpoint.json"  # step and fingerprint, readable without loading the weights
# Run-config keys that never change what a run computes: a rerun may change them and still resume.
BOOKKEEPING_KEYS = ("torch_threads", "wandb", "eval", "checkpoint_every", "keep_checkpoint", "save_merged")


class CheckpointMismatch(ConfigError):
    """The checkpoint folder holds a run with another config or other inputs."""


def fingerprint(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_fingerprint(config: dict[str, Any], inputs: dict[str, Any]) -> str:
    """Fingerprint of a run: its resolved config without bookkeeping keys, plus its inputs."""
    relevant = {k: v for k, v in config.items() if k not in BOOKKEEPING_KEYS}
    return fingerprint({"config": relevant, **inputs})


def rows_digest(rows: list[dict[str, Any]]) -> str:
    """Content hash of the RL prompt rows in order (same prompts, same answers) for the fingerprint."""
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps(row, sort_keys=True, ensure_ascii=False, default=str).encode())
    return h.hexdigest()[:16]


def stored_fingerprint(folder: str | Path) -> str | None:
    """The fingerprint a checkpoint folder was written with (None: no complete checkpoint there)."""
    folder = Path(folder)
    if not (folder / STATE_FILE).exists():
        return None
    if (folder / META_FILE).exists():
        return read_json(folder / META_FILE)["fingerprint"]
    return torch.load(folder / STATE_FILE, map_location="cpu", weights_only=True)["fingerprint"]


def check_fingerprint(folder: str | Path, run_fingerprint: str) -> bool:
    """True if folder holds a checkpoint of this run, False if none; CheckpointMismatch if another run's."""
    stored = stored_fingerprint(folder)
    if stored is None:
        return False
    if stored != run_fingerprint:
        raise CheckpointMismatch(
            f"checkpoint {folder} was written by a run with a different config or inputs (config hash "
            f"{stored} != {run_fingerprint} of this run); not resuming it. Delete {folder} to start this "
            "run from scratch"
        )
    return True


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def save_checkpoint(
    folder: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    step: int,
    run_fingerprint: str,
    records: dict[str, Any],
) -> Path:
    """Write <folder>/state.pt and records.json in one atomic directory swap."""
    folder = Path(folder)
    with atomic_dir(folder) as tmp:
        torch.save(
            {
                "model": trainable_state(model),
                "optimizer": optimizer.state_dict(),
                "step": step,
                "fingerprint": run_fingerprint,
            },
            tmp / STATE_FILE,
        )
        atomic_write_json(tmp / RECORDS_FILE, records)
        atomic_write_json(tmp / META_FILE, {"step": step, "fingerprint": run_fingerprint})
    return folder


def load_checkpoint(
    folder: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, run_fingerprint: str
) -> tuple[int, dict[str, Any]] | None:
    """Restore weights and optimizer in place; return (step, records), or None when there is no checkpoint."""
    folder = Path(folder)
    if not check_fingerprint(folder, run_fingerprint):
        return None
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
