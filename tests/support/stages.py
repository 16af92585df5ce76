"""Calling a stage entry point as the workflow does: `--config <stage JSON>` and its path arguments, in this
process (`run_main`) or in a subprocess (`stage_env`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"


def stage_argv(config: str, **paths: str | Path | list[Path] | None) -> list[str]:
    """`--config config --<name> <path> ...` (underscores become dashes; a None path is left out; a list gives
    the flag all its paths, as for a deep ensemble's --reward-model)."""
    argv = ["--config", config]
    for name, path in paths.items():
        if path is not None:
            argv += [f"--{name.replace('_', '-')}", *map(str, path if isinstance(path, list) else [path])]
    return argv


def run_main(
    main: Callable[[list[str]], int], config: str, caplog: pytest.LogCaptureFixture | None = None, **paths
) -> tuple[int, list[str]]:
    """A stage's `main` on `config` and `paths`: (exit code, the error lines it logged; [] without caplog)."""
    if caplog is None:
        return main(stage_argv(config, **paths)), []
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        code = main(stage_argv(config, **paths))
    return code, [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def stage_env(**extra: str) -> dict[str, str]:
    """The environment for a stage run as a subprocess (`python -m prefpipe.<stage>`, torchrun): this
    checkout's src first on PYTHONPATH (not whatever prefpipe the venv has installed), one thread, offline."""
    return {
        **os.environ,
        "PYTHONPATH": str(SRC),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "TOKENIZERS_PARALLELISM": "false",
        **extra,
    }
