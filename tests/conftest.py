"""Shared test set-up: offline hub, one torch thread per test process, the slow tier switch, and under CI=true
the check that every skip is in a declared optional tier (tests/support/tiers.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support import parallel
from support.tiers import OPTIONAL_TIERS, declared, in_ci, need

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


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Under `-n N --dist loadfile` (scripts/test.sh): whole files per worker, SLURM files together, costliest
    first (tests/support/parallel.py)."""
    return parallel.make_scheduler(config, log)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the repository (real preference rows for tests; never copied into the repo)."""
    need(None if SHARED_DATA.is_dir() else f"real test data not found at {SHARED_DATA} (../shared/data)")
    return SHARED_DATA


# "node id: reason" of every skip outside tests/support/tiers.py's OPTIONAL_TIERS, in this session
_UNDECLARED: list[str] = []


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return reason.removeprefix("Skipped: ")


def _note_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    # a slow test outside the slow tier is the slow tier, whichever skip marker pytest reported first
    if "slow" in getattr(report, "keywords", {}) and os.environ.get("PREFPIPE_SLOW") != "1":
        return
    if declared(_skip_reason(report)) is None:
        _UNDECLARED.append(f"{report.nodeid}: {_skip_reason(report)}")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _note_skip(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _note_skip(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under CI=true a skip outside the declared optional tiers fails the run (issue 52)."""
    if in_ci() and _UNDECLARED and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if in_ci() and _UNDECLARED:
        terminalreporter.section("CI=true: skips outside the declared optional tiers fail the run", red=True)
        for line in _UNDECLARED:
            terminalreporter.line(line, red=True)
        terminalreporter.line(
            "declared optional tiers (tests/support/tiers.py): "
            + ", ".join(f"{t.name} ({t.reason_starts!r})" for t in OPTIONAL_TIERS)
        )
