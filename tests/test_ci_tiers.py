"""Under CI=true a skip outside the declared optional tiers fails the session, listing it (issue 52); a skip in
a declared tier (tests/support/tiers.py) does not, and outside CI nothing changes. Run as a real pytest session
in a subprocess over a copy of this suite's conftest.py and tiers.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
CASES = """
import pytest
from support.tiers import need

@pytest.mark.slow
def test_in_the_slow_tier():
    pass

def test_a_missing_requirement():
    need("the frobnicator is not installed")

def test_an_undeclared_skip():
    pytest.skip("some package is missing")

def test_runs():
    pass
"""


def _session(tmp_path: Path, ci: str | None, select: str, *extra: str) -> subprocess.CompletedProcess:
    tests = tmp_path / "tests"
    (tests / "support").mkdir(parents=True, exist_ok=True)
    shutil.copy2(TESTS / "conftest.py", tests / "conftest.py")
    for name in ("tiers.py", "parallel.py"):
        shutil.copy2(TESTS / "support" / name, tests / "support" / name)
    (tests / "test_cases.py").write_text(CASES)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PREFPIPE_SLOW")}
    env.update({"CI": ci} if ci else {})
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-ra",
        "-p",
        "no:cacheprovider",
        *(["-k", select] if select else []),
        *extra,
        str(tests),
    ]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


# scripts/test.sh runs the suite on two xdist workers: the policy reads the reports the controller receives.
WORKERS = pytest.mark.parametrize("workers", [(), ("-n", "2", "--dist", "loadfile")], ids=["serial", "xdist"])


@WORKERS
def test_declared_tiers_pass_under_ci(tmp_path, workers):
    result = _session(tmp_path, "true", "slow or runs", *workers)
    assert result.returncode == 0, result.stdout
    assert "1 passed, 1 skipped" in result.stdout


def test_outside_ci_every_skip_only_skips(tmp_path):
    result = _session(tmp_path, None, "")
    assert result.returncode == 0, result.stdout
    assert "1 passed, 3 skipped" in result.stdout and "the frobnicator is not installed" in result.stdout


@WORKERS
def test_under_ci_a_missing_requirement_fails_and_an_undeclared_skip_fails_the_session(tmp_path, workers):
    result = _session(tmp_path, "true", "", *workers)
    assert result.returncode == 1, result.stdout
    assert (
        "FAILED tests/test_cases.py::test_a_missing_requirement - Failed: CI=true requires it: the "
        "frobnicator is not installed" in result.stdout
    )
    summary = result.stdout.split("CI=true: skips outside the declared optional tiers fail the run")[1]
    assert "test_cases.py::test_an_undeclared_skip: some package is missing" in summary
    assert "test_in_the_slow_tier" not in summary  # the slow tier is declared
