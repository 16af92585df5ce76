"""scripts/test.sh's two xdist workers (tests/support/parallel.py): a file's tests run on one worker (its module
fixtures are built once), the two files that start the local SLURM cluster run on the same worker one after the
other (never two clusters at once), and the costliest units are handed out first. Checked on the unit helpers and
in a real `pytest -n 2 --dist loadfile` session over a copy of this suite's conftest.py and support files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import OrderedDict, defaultdict
from itertools import pairwise
from pathlib import Path

from support.parallel import COSTLY, SHARED_UNITS, costliest_first, unit_of

TESTS = Path(__file__).resolve().parent
# Each test writes "worker file start end" of its run to its own line in the session's log.
CASE = """
import os, time
from pathlib import Path

def _record(name):
    start = time.monotonic()
    time.sleep(0.3)
    with open(os.environ["UNITS_LOG"], "a") as log:
        log.write(f"{os.environ['PYTEST_XDIST_WORKER']} {__file__} {name} {start} {time.monotonic()}\\n")

def test_one():
    _record("one")

def test_two():
    _record("two")

def test_three():
    _record("three")
"""
FILES = [
    "tests/test_slurm_cluster.py",
    "tests/faults/test_slurm_faults.py",
    "tests/test_a.py",
    "tests/test_b.py",
]


def test_the_slurm_files_share_one_unit_and_other_files_are_their_own():
    assert {unit_of(f"{path}::test_x[1]") for path in SHARED_UNITS} == {"local SLURM cluster"}
    assert unit_of("tests/test_cli.py::test_x[a::b]") == "tests/test_cli.py"
    assert set(SHARED_UNITS.values()) <= set(COSTLY)


def test_costly_units_come_first_in_their_order_then_the_most_tests():
    queue = OrderedDict(
        [
            ("tests/test_small.py", {"a": False}),
            ("tests/test_many.py", {"a": False, "b": False, "c": False}),
            (COSTLY[1], {"a": False}),
            (COSTLY[0], {"a": False}),
        ]
    )
    assert list(costliest_first(queue)) == [COSTLY[0], COSTLY[1], "tests/test_many.py", "tests/test_small.py"]


def test_two_workers_keep_each_file_and_the_slurm_unit_on_one_worker(tmp_path):
    tests = tmp_path / "tests"
    (tests / "support").mkdir(parents=True)
    shutil.copy2(TESTS / "conftest.py", tests / "conftest.py")
    for name in ("tiers.py", "parallel.py"):
        shutil.copy2(TESTS / "support" / name, tests / "support" / name)
    for path in FILES:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(CASE)
    log = tmp_path / "units.log"
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"UNITS_LOG": str(log)}
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-n",
        "2",
        "--dist",
        "loadfile",
    ]
    result = subprocess.run(
        [*command, "--rootdir", str(tmp_path), str(tests)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "12 passed" in result.stdout
    rows = [line.split() for line in log.read_text().splitlines()]
    workers = defaultdict(set)
    for worker, f, *_ in rows:
        workers[Path(f).relative_to(tmp_path).as_posix()].add(worker)
    assert all(len(w) == 1 for w in workers.values()), workers  # a file never splits
    assert workers[FILES[0]] == workers[FILES[1]], workers  # the SLURM files: one worker
    assert len(set().union(*workers.values())) == 2, workers  # both workers had work
    slurm = sorted((float(s), float(e)) for _, f, _, s, e in rows if "slurm" in f)
    assert all(a[1] <= b[0] for a, b in pairwise(slurm)), slurm  # one SLURM test at a time
