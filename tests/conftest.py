"""Shared test set-up: offline hub, one torch thread per test process, and the slow tier switch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
# Snakemake runs in a subprocess and its rules run `python -m prefpipe.<stage>`: both import this checkout's
# src (not whatever prefpipe the virtualenv has installed, e.g. another worktree's editable install).
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(REPO_ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
)
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


def pytest_configure(config: pytest.Config) -> None:
    try:
        import torch

        torch.set_num_threads(int(os.environ.get("PREFPIPE_TEST_THREADS", "1")))
    except ImportError:
        pass


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests (pretrained backbones, long training) run only with PREFPIPE_SLOW=1 or `-m slow`."""
    if os.environ.get("PREFPIPE_SLOW") == "1" or "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow tier: set PREFPIPE_SLOW=1 to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the repository (real preference rows for tests; never copied into the repo)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real test data not found at {SHARED_DATA}")
    return SHARED_DATA
