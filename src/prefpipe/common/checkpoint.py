"""Resumable training checkpoints, one layout for every trainer (reward model and GRPO).

    <root>/step-00000040/   one complete checkpoint: the trainer's own files + checkpoint.json (step, fingerprint)
    <root>/latest.json      {"step", "path"} of the newest one (informational; resume scans the step folders)

A checkpoint is written into a temporary sibling folder `<root>/.step-NNNNNNNN.tmp` and renamed into place only
when complete, so a step folder is always whole. Any failure during the write (an exception, Ctrl-C, or SIGTERM
while no trainer handler is installed) removes the temporary folder and leaves the previous checkpoint as it
was. Older step folders are pruned after a successful write.

What goes into a checkpoint is the trainer's business (`write(tmp_folder)`: accelerate's save_state for the
reward model, trainable tensors + optimizer + records for GRPO); the folder, atomicity, fingerprint guard and
cleanup logic lives here once.

The fingerprint hashes the resolved settings that shape the training trajectory (bookkeeping keys such as
threads, logging, evaluation and checkpoint cadence left out) together with digests of the run's inputs. A
rerun whose fingerprint differs stops with CheckpointMismatch naming the folder instead of silently continuing
another run (SLURM requeues and Snakemake retries rerun the same command, so a mismatch always means the config
or the data changed since the checkpoint was written).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from prefpipe.common.config import ConfigError
from prefpipe.common.io import atomic_write_json, read_json

META = "checkpoint.json"
LATEST = "latest.json"
# Reward checkpoints written before META existed carry their step and fingerprint here.
LEGACY_META = "trainer_state.json"
PREFIX = "step-"


class CheckpointMismatch(ConfigError):
    """A checkpoint folder holds a run with another config or other inputs; resuming it would mix two runs."""


def _without(mapping: dict[str, Any], dotted: str) -> dict[str, Any]:
    head, _, rest = dotted.partition(".")
    if head not in mapping:
        return mapping
    out = dict(mapping)
    if not rest:
        del out[head]
    elif isinstance(out[head], dict):
        out[head] = _without(out[head], rest)
    return out


def fingerprint(
    settings: dict[str, Any], inputs: dict[str, Any] | None = None, ignore: Iterable[str] = ()
) -> str:
    """16-hex hash of the resolved settings without the `ignore` keys (dotted paths such as
    "train.checkpoint_every") plus the run's inputs (e.g. base model and a content digest of the training rows)."""
    relevant = settings
    for key in ignore:
        relevant = _without(relevant, key)
    payload = {**relevant, "inputs": inputs} if inputs else dict(relevant)
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def content_digest(items: Iterable[Any]) -> str:
    """Order-sensitive 16-hex hash of JSON-able items (training pairs, RL prompt rows) for the fingerprint."""
    h = hashlib.sha256()
    for item in items:
        h.update(json.dumps(item, sort_keys=True, ensure_ascii=False, default=str).encode())
    return h.hexdigest()[:16]


def step_folder(root: str | Path, step: int) -> Path:
    return Path(root) / f"{PREFIX}{step:08d}"


def read_meta(folder: str | Path) -> dict[str, Any] | None:
    """{"step", "fingerprint", ...} of a complete checkpoint folder; None when the folder is not one."""
    for name in (META, LEGACY_META):
        path = Path(folder) / name
        if path.is_file():
            return read_json(path)
    return None


def find_latest(root: str | Path) -> Path | None:
    """The newest complete checkpoint under root (None: nothing to resume). Temporary folders never count."""
    root = Path(root)
    if not root.is_dir():
        return None
    complete = [(meta["step"], p) for p in root.glob(f"{PREFIX}*") if p.is_dir() and (meta := read_meta(p))]
    if complete:
        return max(complete)[1]
    # GRPO checkpoints written before step folders lay flat in root: report it (its fingerprint, of the older
    # form, makes check_fingerprint refuse it by name) rather than silently starting over beside it.
    return root if (root / META).is_file() else None


def check_fingerprint(root: str | Path, run_fingerprint: str, hint: str = "") -> Path | None:
    """The newest complete checkpoint under root if this run wrote it, None if there is none; CheckpointMismatch
    (naming the folder) if it belongs to a run with another config or other inputs."""
    latest = find_latest(root)
    if latest is None:
        return None
    stored = read_meta(latest).get("fingerprint")
    if stored != run_fingerprint:
        raise CheckpointMismatch(
            f"checkpoint {latest} was written with a different config or inputs (config hash {stored} != "
            f"{run_fingerprint} of this run); not resuming it. Delete {Path(root)} to start afresh{hint}"
        )
    return latest


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While writing: a SIGTERM that would kill the process outright (default handler) raises SystemExit(143)
    instead, so the cleanup below runs. A trainer's own handler (checkpoint-then-stop) is left in place."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL
    ):
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def save_checkpoint(
    root: str | Path,
    step: int,
    run_fingerprint: str,
    write: Callable[[Path], None],
    is_main: bool = True,
    barrier: Callable[[], None] = lambda: None,
) -> Path:
    """Write checkpoint `step` under root atomically and return its folder. `write(tmp)` puts the trainer's
    files into the temporary folder. Multi-process: every process calls this (write may be collective, e.g.
    accelerate's save_state); only the main process creates, renames, prunes and cleans up."""
    root = Path(root)
    final = step_folder(root, step)
    tmp = root / f".{final.name}.tmp"  # a fixed name: every process must write into the same folder
    with _sigterm_raises():
        try:
            if is_main:
                root.mkdir(parents=True, exist_ok=True)
                shutil.rmtree(
                    tmp, ignore_errors=True
                )  # left by a process killed outright (SIGKILL) mid-write
                tmp.mkdir()
            barrier()
            write(tmp)
            barrier()
            if is_main:
                atomic_write_json(tmp / META, {"step": step, "fingerprint": run_fingerprint})
                shutil.rmtree(final, ignore_errors=True)
                os.replace(tmp, final)
        except BaseException:
            if is_main:
                shutil.rmtree(tmp, ignore_errors=True)
            raise
    if is_main:
        atomic_write_json(root / LATEST, {"step": step, "path": final.name})
        for old in root.glob(f"{PREFIX}*"):
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
    barrier()
    return final


def remove_checkpoints(root: str | Path) -> None:
    """Delete every checkpoint under root (once the final model is safely saved)."""
    shutil.rmtree(root, ignore_errors=True)
