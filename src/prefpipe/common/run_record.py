"""What every stage leaves next to its outputs: resolved config, package versions, metrics JSONL.

Optional wandb logging mirrors the metrics; it is off unless the config enables it and offline by default,
so nothing leaves the machine unless a user asks for it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from prefpipe.common.io import atomic_write_json, to_jsonable, writing
from prefpipe.common.secrets import redact, redact_argv, redact_values
from prefpipe.common.torch_runtime.determinism import cpu_kernel_facts
from prefpipe.common.tracking import WandbIdentity, wandb_identity

log = logging.getLogger(__name__)

TRACKED_PACKAGES = (
    "prefpipe",
    "torch",
    "transformers",
    "tokenizers",
    "peft",
    "accelerate",
    "datasets",
    "safetensors",
    "numpy",
    "pandas",
    "snakemake",
    "deepspeed",
    "wandb",
)


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


@functools.cache
def code_revision() -> dict[str, Any]:
    """The code that ran: a sha256 over the package's source files, and the git commit with a dirty flag
    (tracked files changed since it) when the imported package lives in a git checkout, so a result can be
    traced to the code even between releases (the package version alone says 0.1.0 for every commit)."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    record: dict[str, Any] = {"source_sha256": digest.hexdigest()}

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(package), *args], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit:
        record["git_commit"] = commit
        record["git_dirty"] = bool(git("status", "--porcelain", "--untracked-files=no"))
    return record


def device_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {"platform": platform.platform(), "cpu_count": os.cpu_count()}
    try:
        import torch

        facts["torch_threads"] = torch.get_num_threads()
        facts["cpu_kernels"] = cpu_kernel_facts()
        facts["cuda"] = torch.cuda.is_available()
        if facts["cuda"]:
            facts["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except ImportError:  # torch-free stages (data prep, report) still record the rest
        pass
    return facts


def append_line(path: Path, line: str) -> None:
    """Append `line` (ending in a newline) with O_APPEND; on any failure the file is truncated back to its
    size before the call, so it only ever holds whole lines."""
    data = line.encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except BaseException:
            os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


class RunRecord:
    """Writes config.json and versions.json at start, metrics.jsonl as the stage runs, summary at the end."""

    def __init__(
        self,
        out_dir: str | os.PathLike,
        stage: str,
        config: dict[str, Any],
        metrics_name: str = "metrics.jsonl",
    ) -> None:
        self.out_dir = Path(out_dir)
        self.stage = stage
        self.config = config
        self.start = time.time()
        self.metrics_path = self.out_dir / metrics_name
        with writing(self.metrics_path):
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self.metrics_path.write_text("", encoding="utf-8")  # a rerun starts a fresh metrics file
        atomic_write_json(self.out_dir / "config.json", {"stage": stage, "config": redact(config)})
        self.versions = {
            "packages": package_versions(),
            "code": code_revision(),
            "device": device_facts(),
            "argv": redact_argv(sys.argv),
        }
        atomic_write_json(self.out_dir / "versions.json", self.versions)
        self._wandb = self._init_wandb(config["wandb"]) if "wandb" in config else None

    def _init_wandb(self, wandb_settings: dict[str, Any]):
        """wandb as the run's settings say (settings.run.WandbSettings), with the identity of
        prefpipe.common.tracking: grouped by experiment and seed, a job type per stage, and an id that a
        restarted (requeued) stage resumes (resume="allow"). A second record in one process finishes the
        previous run first (reinit="finish_previous", what the deprecated reinit=True meant)."""
        if not wandb_settings["enabled"]:
            return None
        import wandb

        mode, who = wandb_settings["mode"], self.wandb_identity()
        run = wandb.init(
            project=wandb_settings["project"],
            id=who.id,
            resume="allow",
            name=who.name,
            group=who.group,
            job_type=who.job_type,
            tags=list(who.tags),
            dir=str(self.out_dir),
            mode=mode,
            config=redact(self.config),
            reinit="finish_previous",
        )
        log.info(
            "wandb run %s (%s, group %s, job %s) in %s mode", who.id, who.name, who.group, who.job_type, mode
        )
        return run

    def wandb_identity(self) -> WandbIdentity:
        return wandb_identity(self.stage, self.config, self.out_dir)

    def log(self, step: int | None = None, **metrics: Any) -> None:
        """Append one row to metrics.jsonl as ONE write of a whole line: a signal or a kill never leaves half a
        line, and a failed write (full disk) is cut back to the last whole line before the error propagates."""
        row = redact_values(
            {"step": step, "time": round(time.time() - self.start, 4), **to_jsonable(metrics)}
        )
        with writing(self.metrics_path):
            append_line(self.metrics_path, json.dumps(row) + "\n")
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in metrics.items() if isinstance(v, int | float)}, step=step)

    def _record_device(self) -> None:
        """versions.json gains `ran_on`: the device the stage's torch work used (`torch: false` when the stage
        never imported torch: data prep, the report), so a GPU run shows per stage that it ran on CUDA."""
        used: dict[str, Any] = {"device": "cpu", "torch": False}
        if "torch" in sys.modules:
            from prefpipe.common.torch_runtime.device import ran_on

            used = ran_on()
        atomic_write_json(self.out_dir / "versions.json", {**self.versions, "ran_on": used})

    def finish(
        self,
        summary: dict[str, Any] | None = None,
        name: str = "summary.json",
        timing: dict[str, Any] | None = None,
    ) -> None:
        """Write the summary. With `timing` (a dict, possibly empty), the wall time and those figures go to
        timing.json instead, so the summary holds only results and two runs give byte-identical files."""
        wall = {"wall_time_s": round(time.time() - self.start, 3)}
        if timing is None:
            payload = {"stage": self.stage, **wall, **(summary or {})}
        else:
            payload = {"stage": self.stage, **(summary or {})}
            atomic_write_json(self.out_dir / "timing.json", to_jsonable({**wall, **timing}))
        payload = redact_values(to_jsonable(payload))
        atomic_write_json(self.out_dir / name, payload)
        self._record_device()
        if self._wandb is not None:
            self._wandb.summary.update({k: v for k, v in payload.items() if isinstance(v, int | float)})
            self._wandb.finish()
