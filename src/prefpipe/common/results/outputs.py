"""Where a `prefpipe` command may write its output folder, so that no command deletes or overwrites anything it
did not create (docs/reference/CONTRACTS.md, "Command outputs").

`check_output` is the one place these rules live; every command (report, export, inspect) calls it through
`command_output` before any work:

- the output may not be one of the command's inputs, nor contain one;
- it may not be, lie inside or contain a stage folder of a workflow's results tree (a folder with a run record,
  or a stage's top folder such as results/eval): the message names that stage folder;
- an existing output folder must be empty, or one this same command wrote from the same inputs (its MARKER
  file, written when the output was complete, names the command, the inputs and every file it wrote) and that
  holds nothing else.

`command_output` then writes into a temporary folder beside the output, adds the marker, and only then replaces
the earlier output (the deletion is logged).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from prefpipe.common.config import UserError
from prefpipe.common.io import atomic_dir, atomic_write_json
from prefpipe.common.results.results_owner import STAGE_FOLDERS

log = logging.getLogger(__name__)
MARKER = ".prefpipe-output.json"


class OutputRefused(UserError):
    """A command's output folder would delete or overwrite something the command did not write."""


def path_text(text: str) -> str:
    """argparse type of a command's path arguments: a blank one is refused at parse time, naming the argument
    (Path("") is the working folder: an empty --out would write there)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"an empty path ({text!r})")
    return text


def path_argument(text: str) -> Path:
    """path_text as a Path."""
    return Path(path_text(text))


def _resolved(path: str | os.PathLike) -> Path:
    """The absolute path with every link followed; a link loop is refused naming the path."""
    try:
        return Path(path).expanduser().resolve()
    except RuntimeError as err:  # pathlib's resolve() on a symlink loop
        raise OutputRefused(f"{path}: cannot be followed ({err})") from None


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def is_stage_folder(folder: Path) -> bool:
    """A folder a workflow stage wrote: its run record config.json ({"stage": ..., "config": ...}), and no
    MARKER (a command's output, such as `prefpipe report`'s, also holds a run record)."""
    if (folder / MARKER).is_file():
        return False
    try:
        record = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and "stage" in record


def is_results_tree(folder: Path) -> bool:
    """A workflow's results folder: one of its stage folders (results/eval, results/eval/bt...) has a run record."""
    for stage in STAGE_FOLDERS:
        top = folder / stage
        if top.is_dir() and (
            is_stage_folder(top) or any(is_stage_folder(p) for p in top.iterdir() if p.is_dir())
        ):
            return True
    return False


def stage_folder_hit(out: Path) -> Path | None:
    """The stage folder `out` is or lies inside (the deepest one): a folder with a run record, or a stage's top
    folder (results/eval) of a results tree. None where out is outside every results tree."""
    for folder in [out, *out.parents]:
        if folder.is_dir() and is_stage_folder(folder):
            return folder
        if folder.name in STAGE_FOLDERS and folder.parent.is_dir() and is_results_tree(folder.parent):
            return folder
    return None


def stage_folders_within(out: Path) -> list[Path]:
    """Stage folders inside an existing `out` (a results tree, or a folder holding one), at most three levels
    down (results/eval/bt under a folder holding results)."""
    found = []
    for depth in ("*", "*/*", "*/*/*"):
        found += [p for p in sorted(out.glob(depth)) if p.is_dir() and is_stage_folder(p)]
    return found


def _marker(out: Path) -> dict | None:
    try:
        marker = json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def _files(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if not p.is_dir() and p.name != MARKER)


def _existing_refusal(out: Path, command: str, inputs: list[str]) -> str | None:
    """Why the existing folder `out` may not be replaced (None: it is empty, or this command's own output)."""
    if not out.is_dir():
        return "exists and is not a folder"
    if not any(out.iterdir()):
        return None
    marker = _marker(out)
    if marker is None:
        shown = ", ".join(_files(out)[:3]) or "a folder"
        return f"exists and holds files no `prefpipe {command}` wrote ({shown}...)"
    if marker.get("command") != command or marker.get("inputs") != inputs:
        return (
            f"holds the output of `prefpipe {marker.get('command')}` from {marker.get('inputs')}, "
            f"not of `prefpipe {command}` from {inputs}"
        )
    extra = sorted(set(_files(out)) - set(marker.get("files", [])))
    if extra:
        return f"holds files added after `prefpipe {command}` wrote it ({', '.join(extra[:3])})"
    return None


def check_output(
    out: str | os.PathLike, command: str, inputs: Sequence[str | os.PathLike], in_results: bool = False
) -> None:
    """Refuse (OutputRefused naming the path) an output folder that would delete or overwrite anything this
    command did not write: the module docstring's rules. `in_results`: a workflow rule writing its declared
    output inside the results tree (Snakemake removed it before the job), so the stage-folder rules do not
    apply. A path the system cannot look at (a symlink loop, a name too long) is refused naming it. Reads only."""
    try:
        _check_output(Path(out), command, inputs, in_results)
    except OSError as err:
        raise OutputRefused(f"{err.filename or out}: {err.strerror or err}") from None


def _check_output(where: Path, command: str, inputs: Sequence[str | os.PathLike], in_results: bool) -> None:
    target = _resolved(where)
    sources = [_resolved(p) for p in inputs]
    for given, source in zip(inputs, sources, strict=True):
        if target == source:
            raise OutputRefused(
                f"{where}: the output folder is the input {given}: choose another output folder"
            )
        if _inside(source, target):
            raise OutputRefused(f"{where}: the output folder contains the input {given}: choose another one")
    hit = None if in_results else stage_folder_hit(target)
    if hit is not None:
        raise OutputRefused(
            f"{where}: would write into the workflow results' stage folder {hit} (over the stage's outputs); "
            "choose an output folder outside the results tree's stage folders"
        )
    if not in_results and target.is_dir() and (within := stage_folders_within(target)):
        raise OutputRefused(
            f"{where}: holds the workflow's stage folder {within[0]}: writing there would delete it; "
            "choose a new output folder"
        )
    if target.exists() or target.is_symlink():
        reason = _existing_refusal(target, command, [str(s) for s in sources])
        if reason is not None:
            raise OutputRefused(
                f"{where}: {reason}; choose a new output folder (or delete this one yourself)"
            )


@contextlib.contextmanager
def command_output(
    out: str | os.PathLike, command: str, inputs: Sequence[str | os.PathLike], in_results: bool = False
) -> Iterator[Path]:
    """check_output, then yield a temporary folder beside `out`; on success the marker (command, inputs, files)
    is written into it and it replaces `out` in one rename (an earlier output of this command is deleted, and
    that is logged); on failure `out` is untouched."""
    check_output(out, command, inputs, in_results)
    sources = [str(_resolved(p)) for p in inputs]
    with atomic_dir(out) as tmp:
        yield tmp
        marker = {"command": command, "inputs": sources, "files": _files(tmp)}
        atomic_write_json(tmp / MARKER, marker)
