"""The frame every stage entry point runs in: arguments, settings, logging, offline environment, exit codes.

    def main(argv=None) -> int:
        return run_stage("train_reward", RewardSettings, run, PATHS, argv)

- `--config`: the stage's settings as inline JSON or a .json/.yaml file (what the Snakemake rule passes),
  rebuilt into the stage's typed settings (`settings_cls.from_stage_config`) and checked before anything is loaded.
- Path arguments are declared with what they must be (`PathArg(kind=...)`); a missing folder, a missing file or a
  folder that is not a model stops the stage before it starts.
- The hub and wandb are offline unless the environment says otherwise (HF_HUB_OFFLINE, WANDB_MODE).
- The CPU kernels are pinned (ATEN_CPU_CAPABILITY, MKL_CBWR; prefpipe.common.torch_runtime.determinism) unless the
  environment sets them, so one seed gives the same bits on every x86-64 CPU with AVX2.
- Exit codes: 0 done; 2 a user error (bad config value, path, data or model folder) reported in one line
  naming it; 143 / 130 stopped by SIGTERM / SIGINT (Ctrl-C), after a checkpoint when training was under way
  (rerun to resume); 1 a bug (traceback).
- Signals (prefpipe.common.interrupts): SIGTERM and SIGINT never kill a stage mid-write; run from the command
  line, a stage also gets SIGTERM when the process that started it (Snakemake) dies.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from prefpipe.common.config import UserError, load_config_arg
from prefpipe.common.interrupts import (
    STOP_SIGNALS,
    StageInterrupted,
    die_with_parent,
    raise_on_stop_signals,
)
from prefpipe.common.logs import setup_logging
from prefpipe.common.torch_runtime.determinism import pin_cpu_kernels


class StageSettings(Protocol):
    """What the frame asks of a stage's settings class (prefpipe.settings.run.RunSettings provides it): its
    settings rebuilt and checked from a stage's --config mapping. The settings layer sits above this one,
    so the frame receives the class and never imports the layer."""

    @classmethod
    def from_stage_config(cls, values: dict[str, Any], key: str) -> Any: ...


T = TypeVar("T", bound=StageSettings)
EXIT_USER_ERROR = 2
MODEL_MARKERS = ("config.json", "adapter_config.json", "head_config.json")

__all__ = ["StageInterrupted", "PathArg", "run_stage", "check_path", "parse_stage_args"]


@dataclass(frozen=True)
class PathArg:
    """One path argument: `dir`, `file`, `model` (a model folder, or a hub id where no such path exists),
    or `out` (created by the stage); or a value beside the paths: `int` (a non-negative integer, such as a
    round taken from a rule's wildcard) or `name` (a name the stage checks itself). `required=False` makes it
    optional (None when absent); `many=True` takes one or more values (a list; each checked alike)."""

    help: str
    kind: str = "dir"
    required: bool = True
    many: bool = False


def check_path(flag: str, value: str | None, spec: PathArg) -> None:
    if value is None or spec.kind == "out":
        return
    if spec.kind == "int" and not value.isdigit():
        raise UserError(f"{flag} {value}: not a non-negative integer")
    path = Path(value)
    if spec.kind == "file" and not path.is_file():
        raise UserError(f"{flag} {value}: no such file")
    if spec.kind == "dir" and not path.is_dir():
        raise UserError(f"{flag} {value}: no such folder")
    if spec.kind == "model":
        if path.is_dir():
            if not any((path / marker).is_file() for marker in MODEL_MARKERS):
                raise UserError(
                    f"{flag} {value}: not a model folder (none of {', '.join(MODEL_MARKERS)} in it)"
                )
        elif path.exists() or not _looks_like_hub_id(value):
            raise UserError(f"{flag} {value}: no such model folder")


def _looks_like_hub_id(value: str) -> bool:
    return value.count("/") <= 1 and not value.startswith((".", "/", "~")) and not value.endswith(".json")


def parse_stage_args(stage: str, paths: dict[str, PathArg], argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m prefpipe.{stage}")
    parser.add_argument("--config", required=True, help="the stage's settings: inline JSON or a .json/.yaml")
    for name, spec in paths.items():
        flag, nargs = f"--{name.replace('_', '-')}", "+" if spec.many else None
        parser.add_argument(flag, dest=name, required=spec.required, help=spec.help, nargs=nargs)
    return parser.parse_args(argv)


def run_stage(
    stage: str,
    settings_cls: type[T],
    body: Callable[[T, argparse.Namespace], Any],
    paths: dict[str, PathArg],
    argv: list[str] | None = None,
) -> int:
    """Parse, check, run `body(settings, args)`; map the outcome to an exit code (module docstring)."""
    pinned = pin_cpu_kernels()  # before any tensor op: the kernels are chosen once per process
    setup_logging()
    log = logging.getLogger(f"prefpipe.{stage}")
    if pinned:
        log.info("CPU kernels pinned for reproducibility: %s", pinned)
    if argv is None:  # a real stage process (not a call from a test): stop when Snakemake dies
        die_with_parent()
    main_thread = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS} if main_thread else {}
    try:
        raise_on_stop_signals()
        return _run(stage, settings_cls, body, paths, argv, log)
    finally:  # in-process callers (tests) get their handlers back
        for signum, handler in previous.items():
            if handler is not None:
                signal.signal(signum, handler)


def _run(
    stage: str,
    settings_cls: type[T],
    body: Callable[[T, argparse.Namespace], Any],
    paths: dict[str, PathArg],
    argv: list[str] | None,
    log: logging.Logger,
) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    args = parse_stage_args(stage, paths, argv)
    try:
        for name, spec in paths.items():
            value = getattr(args, name)
            for one in value if spec.many and value is not None else [value]:
                check_path(f"--{name.replace('_', '-')}", one, spec)
        settings = settings_cls.from_stage_config(load_config_arg(args.config), "config")
        body(settings, args)
    except (UserError, FileNotFoundError) as err:  # a missing input file is the user's to fix too
        log.error("%s: %s", stage, " ".join(str(err).split()))
        return EXIT_USER_ERROR
    except StageInterrupted as stop:
        log.warning("%s: %s", stage, stop)
        return stop.exit_code
    return 0
