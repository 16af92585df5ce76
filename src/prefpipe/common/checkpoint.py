"""Resumable training checkpoints, one layout for every trainer (reward model and GRPO).

    <root>/step-00000040/   one complete checkpoint: the trainer's own files + checkpoint.json (step, fingerprint)
    <root>/latest.json      {"step", "path"} of the newest one (informational; resume scans the step folders)

A checkpoint is written into a temporary sibling folder `<root>/.step-NNNNNNNN.tmp` and renamed into place only
when complete, so a step folder is always whole. Any failure during the write (an exception, a full disk, Ctrl-C,
or SIGTERM while no trainer handler is installed) removes the temporary folder and leaves the previous checkpoint
as it was; an error of the write itself becomes CheckpointWriteError (one line: the step folder, the cause, the
free space). Older step folders are pruned after a successful write.

checkpoint.json also lists every file's size. Resuming checks them first (a truncated file is named before
anything is loaded), and any failure while loading one (`loading()`) becomes CheckpointCorrupt naming the file
that does not read back and how to start afresh, instead of a library traceback.

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
import pickle
import shutil
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from prefpipe.common.config import ConfigError, UserError
from prefpipe.common.interrupts import StageInterrupted
from prefpipe.common.io import atomic_write_json, output_mode, read_json

META = "checkpoint.json"
LATEST = "latest.json"
# Reward checkpoints written before META existed carry their step and fingerprint here.
LEGACY_META = "trainer_state.json"
PREFIX = "step-"


class CheckpointMismatch(ConfigError):
    """A checkpoint folder holds a run with another config or other inputs; resuming it would mix two runs."""


class CheckpointCorrupt(UserError):
    """A checkpoint file is truncated or garbled; the message names it and how to start afresh."""


class CheckpointWriteError(UserError):
    """Writing a checkpoint failed (full disk, file-size limit, permissions); nothing of it was kept."""


def fresh_hint(root: str | Path, hint: str = "") -> str:
    return f"delete {Path(root)} to start afresh{hint}"


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


def read_meta(folder: str | Path, hint: str = "") -> dict[str, Any] | None:
    """{"step", "fingerprint", ...} of a complete checkpoint folder; None when the folder is not one;
    CheckpointCorrupt when its metadata file does not parse."""
    for name in (META, LEGACY_META):
        path = Path(folder) / name
        if path.is_file():
            try:
                meta = read_json(path)
                int(meta["step"])
            except (ValueError, KeyError, TypeError) as err:
                raise CheckpointCorrupt(
                    f"checkpoint file {path} is corrupt ({type(err).__name__}: {err}); "
                    f"{fresh_hint(Path(folder).parent, hint)}"
                ) from err
            return meta
    return None


def file_sizes(folder: Path) -> dict[str, int]:
    """{relative path: size} of every file under folder (the manifest stored in checkpoint.json)."""
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


def _unreadable_file(folder: Path) -> tuple[Path, str] | None:
    """The first file under folder that does not read back as its kind (JSON, safetensors, torch), with
    the reason; None when each reads. Only run after a load failed, to name the culprit."""
    import torch
    from safetensors import safe_open

    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        try:
            if path.suffix == ".json":
                read_json(path)
            elif path.suffix == ".safetensors":
                with safe_open(str(path), framework="pt") as handle:
                    for key in handle.keys():  # noqa: SIM118 (safe_open has no __iter__)
                        handle.get_tensor(key)
            elif path.suffix in (".pt", ".bin", ".pth"):
                torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:  # torch's own text would suggest an unsafe load
            return path, "not a readable torch file (unpickling failed)"
        except Exception as err:  # any failure to read back is the answer we are looking for
            return path, f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"
    return None


def verify(folder: str | Path, hint: str = "") -> None:
    """Every file listed in checkpoint.json is there with its recorded size (CheckpointCorrupt if not)."""
    folder = Path(folder)
    listed = (read_meta(folder, hint) or {}).get("files") or {}
    for name, size in listed.items():
        path = folder / name
        actual = path.stat().st_size if path.is_file() else None
        if actual != size:
            state = "is missing" if actual is None else f"has {actual} bytes, {size} were written"
            raise CheckpointCorrupt(
                f"checkpoint file {path} {state} (truncated or changed since it was written); "
                f"{fresh_hint(folder.parent, hint)}"
            )


@contextlib.contextmanager
def loading(folder: str | Path, hint: str = "") -> Iterator[None]:
    """Around a trainer's load of checkpoint `folder`: sizes checked first, and any failure while loading
    becomes CheckpointCorrupt naming the file that does not read back (or the folder) and how to start afresh."""
    folder = Path(folder)
    verify(folder, hint)
    try:
        yield
    except (UserError, KeyboardInterrupt, SystemExit):
        raise
    except Exception as err:
        culprit = _unreadable_file(folder)
        where, why = (
            culprit if culprit else (folder, f"{type(err).__name__}: {' '.join(str(err).split())[:200]}")
        )
        raise CheckpointCorrupt(
            f"checkpoint {where} could not be loaded ({why}); {fresh_hint(folder.parent, hint)}"
        ) from err


def find_latest(root: str | Path, hint: str = "") -> Path | None:
    """The newest complete checkpoint under root (None: nothing to resume). Temporary folders never count."""
    root = Path(root)
    if not root.is_dir():
        return None
    complete = [
        (meta["step"], p) for p in root.glob(f"{PREFIX}*") if p.is_dir() and (meta := read_meta(p, hint))
    ]
    if complete:
        return max(complete)[1]
    # GRPO checkpoints written before step folders lay flat in root: report it (its fingerprint, of the older
    # form, makes check_fingerprint refuse it by name) rather than silently starting over beside it.
    return root if (root / META).is_file() else None


def check_fingerprint(root: str | Path, run_fingerprint: str, hint: str = "") -> Path | None:
    """The newest complete checkpoint under root if this run wrote it, None if there is none; CheckpointMismatch
    (naming the folder) if it belongs to a run with another config or other inputs; CheckpointCorrupt if one
    of its files is missing or has another size than was written."""
    latest = find_latest(root, hint)
    if latest is None:
        return None
    stored = read_meta(latest, hint).get("fingerprint")
    if stored != run_fingerprint:
        raise CheckpointMismatch(
            f"checkpoint {latest} was written with a different config or inputs (config hash {stored} != "
            f"{run_fingerprint} of this run); not resuming it. Delete {Path(root)} to start afresh{hint}"
        )
    verify(latest, hint)  # a truncated file stops the stage here, before it touches any output
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
                meta = {"step": step, "fingerprint": run_fingerprint, "files": file_sizes(tmp)}
                atomic_write_json(tmp / META, meta)
                output_mode(tmp)  # safetensors' save_file makes 0600 files; give them the umask's mode
                shutil.rmtree(final, ignore_errors=True)
                os.replace(tmp, final)
        except BaseException as err:
            if is_main:
                shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(err, Exception) and not isinstance(err, UserError | StageInterrupted):
                raise CheckpointWriteError(_write_failure(root, final, err)) from err
            raise
    if is_main:
        atomic_write_json(root / LATEST, {"step": step, "path": final.name})
        for old in root.glob(f"{PREFIX}*"):
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
    barrier()
    return final


def _write_failure(root: Path, final: Path, err: Exception) -> str:
    """One line: which checkpoint, why, the free space, and that the previous one is intact."""
    try:
        free = f"{shutil.disk_usage(root).free / 2**20:.0f} MiB free on its file system"
    except OSError:
        free = "free space unknown"
    try:
        previous = find_latest(root)
    except (OSError, UserError):
        previous = None
    kept = f"the previous checkpoint {previous} is intact" if previous else "no earlier checkpoint exists"
    cause = " ".join(f"{type(err).__name__}: {err}".split())[:300]
    return (
        f"could not write checkpoint {final} ({cause}; {free}); its temporary folder was removed and {kept}. "
        "A full disk or a file-size limit is the usual cause: make room and rerun to resume"
    )


def remove_checkpoints(root: str | Path) -> None:
    """Delete every checkpoint under root (once the final model is safely saved)."""
    shutil.rmtree(root, ignore_errors=True)
