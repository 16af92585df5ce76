"""Faults, third round: a fuzz test of the `prefpipe` command line (issue 50). Random argument lists for report,
export and inspect (and none, an unknown command, --help): folders of the right kind and of the wrong kind
(another stage's folder, a results tree, someone's notes), empty and missing folders, files where folders belong,
paths through a file, symlinks (to a stage folder, dangling, a loop), /proc and /dev files as inputs; missing,
repeated, unknown and garbage options. Every case ends in success (exit 0) or a clean error: exit 2 with a
message on stderr naming one of its arguments, never a traceback or another exception; and no byte, file or
link under the folders it was pointed at changes (sha256 of every file, the target of every link). New outputs
go to folders that did not exist (under fresh/, the working directory too).

Seeded (PREFPIPE_CLI_FUZZ_SEED) with a fixed number of cases (PREFPIPE_CLI_FUZZ_CASES, default CASES); the
count of cases, of each outcome and of failures is printed (`pytest -s`).
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from collections import Counter
from pathlib import Path

import pytest
from support.faults import command_scratch

from prefpipe.cli import main as prefpipe

CASES = int(os.environ.get("PREFPIPE_CLI_FUZZ_CASES", "240"))
SEED = int(os.environ.get("PREFPIPE_CLI_FUZZ_SEED", "50"))
# Paths relative to the scratch root (command_scratch, plus what `_decorate` adds); absolute ones are inputs only.
FOLDERS = [
    "results", "results/reward/bt", "results/reward/bt/model", "results/eval/bt", "results/eval",
    "results/grpo/gpm-verifier", "results/report", "results/data", "other", "other/reward/bt", "notes",
    "notes/thesis.txt", "notes/thesis.txt/inside", "empty", "missing", "missing/deeper", "link_to_results",
    "link_to_bt", "dangling", "loop", "sp ace", "-dash", "tëst", ".", "..",
]  # fmt: skip
INPUT_ONLY = ["/proc/self/status", "/dev/null", "/proc/self"]
GARBAGE = [
    "",
    " ",
    "--",
    "-",
    "--bogus",
    "--out",
    "--step",
    "=",
    "x=",
    "=y",
    "--format=",
    "\t",
    "-h",
    "ü",
    "a" * 300,
]
FORMATS = ["auto", "sequence-classification", "head-folder", "onnx", "", "AUTO"]
STEPS = ["0", "1", "3", "-1", "x", "1e3", "99999999999999999999", ""]


def _decorate(root: Path) -> Path:
    """command_scratch's folders plus the odd ones FOLDERS names."""
    (root / "empty").mkdir()
    (root / "link_to_results").symlink_to(root / "results")
    (root / "link_to_bt").symlink_to(root / "results" / "reward" / "bt")
    (root / "dangling").symlink_to(root / "nowhere")
    (root / "loop").symlink_to(root / "loop")
    for odd in ("sp ace", "-dash", "tëst"):
        (root / odd).mkdir()
        (root / odd / "kept.txt").write_text(odd)
    (root / "fresh" / "cwd").mkdir(parents=True)
    return root


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return _decorate(command_scratch(tmp_path_factory.mktemp("cli_fuzz")))


def snapshot(root: Path, skip: str = "fresh") -> dict[str, str]:
    """{relative path: sha256 of a file | 'link -> target' | 'folder'} of everything under root but `skip`,
    links not followed."""
    out = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        here = Path(folder)
        if here == root:
            dirs[:] = [d for d in dirs if d != skip]
        for name in dirs + files:
            path = here / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                out[key] = f"link -> {os.readlink(path)}"
            elif path.is_dir():
                out[key] = "folder"
            else:
                out[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _path(rng: random.Random, root: Path, fresh: Path, output: bool = False) -> str:
    """A folder argument: mostly one of FOLDERS, sometimes a new folder, an input-only system file (inputs), a
    relative path or garbage."""
    roll = rng.random()
    if roll < 0.2 if output else roll < 0.05:
        return str(fresh / f"new-{rng.randrange(10**9)}")
    if roll < 0.3 and not output:
        return rng.choice(INPUT_ONLY)
    if roll < 0.35:
        return rng.choice(GARBAGE)
    name = rng.choice([f for f in FOLDERS if not (output and f.startswith("missing"))])  # new: fresh/ only
    return (
        name if rng.random() < 0.2 else str(root / name)
    )  # relative: from the working directory (fresh/cwd)


def _report(rng: random.Random, root: Path, fresh: Path) -> list[str]:
    argv = ["report", _path(rng, root, fresh)]
    for _ in range(rng.choice([0, 0, 1, 2])):
        name = rng.choice(["self", "a", "b", "", "x y", "="])
        argv += ["--compare", f"{name}={_path(rng, root, fresh)}" if rng.random() < 0.8 else name]
    if rng.random() < 0.8:
        argv += ["--out", _path(rng, root, fresh, output=True)]
    if rng.random() < 0.2:
        argv += ["--config", rng.choice(["{", "[]", '{"figure_dpi": 40}', "null", _path(rng, root, fresh)])]
    return argv


def _export(rng: random.Random, root: Path, fresh: Path) -> list[str]:
    argv = ["export", _path(rng, root, fresh), _path(rng, root, fresh, output=True)]
    if rng.random() < 0.4:
        argv += ["--format", rng.choice(FORMATS)]
    if rng.random() < 0.2:
        argv += ["--eval-summary", _path(rng, root, fresh)]
    return argv


def _inspect(rng: random.Random, root: Path, fresh: Path) -> list[str]:
    argv = ["inspect", _path(rng, root, fresh)]
    if rng.random() < 0.9:
        argv += ["--step", rng.choice(STEPS)]
    if rng.random() < 0.3:
        argv.append("--fresh")
    for option in ("--policy", "--reference", "--data", "--reward-model"):
        if rng.random() < 0.15:
            argv += [option, _path(rng, root, fresh)]
    if rng.random() < 0.2:
        argv += ["--completions", rng.choice(STEPS)]
    if rng.random() < 0.8:
        argv += ["--out", _path(rng, root, fresh, output=True)]
    return argv


COMMANDS = {"report": _report, "export": _export, "inspect": _inspect}


def _case(rng: random.Random, root: Path, fresh: Path) -> list[str]:
    """One argument list: a command's plausible arguments, then sometimes dropped, repeated or garbage ones."""
    roll = rng.random()
    if roll < 0.04:
        return rng.choice([[], ["--help"], ["check"], [rng.choice(GARBAGE)], ["report", "--help"]])
    argv = COMMANDS[rng.choice(list(COMMANDS))](rng, root, fresh)
    for _ in range(rng.choice([0, 0, 0, 1, 2])):
        where = rng.randrange(1, len(argv) + 1)
        mutation = rng.random()
        if mutation < 0.4 and len(argv) > 1:
            del argv[where - 1 if where == len(argv) else where]
        elif mutation < 0.7:
            argv.insert(where, rng.choice(GARBAGE))
        else:
            argv.insert(where, rng.choice(argv[1:] or ["--out"]))
    return argv


def _named(argument: str, err: str) -> bool:
    """Whether the message names `argument`: itself, or a part of a --key=value or NAME=DIR argument; a
    one-character or blank argument only where it stands quoted or beside a colon."""
    text = argument.strip()
    parts = [text, *text.split("=")] if "=" in text and len(text) > 1 else [text]
    for part in parts:
        if len(part) > 1 and part in err:
            return True
    return f"'{text}'" in err or f"{text}:" in err or f": {text}" in err or repr(argument) in err


def _clean(code: object, err: str, argv: list[str]) -> str | None:
    """Why this outcome is not clean (None: it is)."""
    if "Traceback" in err:
        return "a traceback on stderr"
    if code == 0:
        return None
    if code != 2:
        return f"exit code {code!r}"
    named = [a for a in argv[1:] if _named(a, err)]
    if not err.strip() or (argv[1:] and not named and "required" not in err):
        return "no message naming an argument"
    return None


def test_command_line_fuzz(scratch, capfd, monkeypatch):
    monkeypatch.chdir(scratch / "fresh" / "cwd")  # default output folders land in fresh/
    rng = random.Random(SEED)
    before = snapshot(scratch)
    assert len(before) > 50  # the check below compares a real tree
    outcomes, failures, started = Counter(), [], time.perf_counter()
    for index in range(CASES):
        argv = _case(rng, scratch, scratch / "fresh")
        try:
            code = prefpipe(list(argv))
        except SystemExit as exit_:  # argparse: usage errors exit 2, --help 0
            code = exit_.code
        except Exception as err:  # noqa: BLE001 - every other exception is the failure being looked for
            code = f"{type(err).__name__}: {err}"
        out, err = capfd.readouterr()
        why = _clean(code, err, argv)
        after = snapshot(scratch)
        if after != before:
            touched = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
            why = f"changed {touched[:5]}"
            before = after
        outcomes["ok" if code == 0 else f"exit {code}" if isinstance(code, int) else "exception"] += 1
        if why:
            failures.append(f"case {index}: {argv}: {why}; stderr: {err.strip()[-300:]}")
    seconds = time.perf_counter() - started
    print(
        f"cli fuzz: seed {SEED}, {CASES} cases in {seconds:.1f}s, outcomes {dict(outcomes)}, {len(failures)} failures"
    )
    assert not failures, "\n".join(failures[:20])
    assert outcomes["ok"] > 0 and outcomes["exit 2"] > CASES // 2  # both kinds of outcome are exercised
