"""Atomic file output and JSONL helpers.

Every stage writes through these so a crash or a bad row never leaves a half-written file
where Snakemake (or a person) would take it for a finished output.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from prefpipe.common.config import UserError

log = logging.getLogger(__name__)

# errnos that mean "this output cannot be written here" (full disk or quota, read-only or forbidden folder, file
# too large, a failing device): the user's to fix, so one line naming the file instead of a traceback.
WRITE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG, errno.EIO}
)


class OutputError(UserError):
    """An output could not be written (full disk, read-only folder...); the message names the file."""


@contextlib.contextmanager
def writing(path: str | os.PathLike) -> Iterator[None]:
    """Turn a write failure (WRITE_ERRNOS) inside the block into an OutputError naming `path` and the cause,
    e.g. `results/data/pairs_train.jsonl: cannot write (No space left on device, ENOSPC)`."""
    try:
        yield
    except OSError as err:
        if err.errno not in WRITE_ERRNOS:
            raise
        cause = f"{os.strerror(err.errno)}, {errno.errorcode[err.errno]}"
        raise OutputError(f"{path}: cannot write ({cause})") from err


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def output_mode(path: str | os.PathLike) -> Path:
    """Give `path` (and, for a folder, everything inside it) the mode open()/mkdir() would have given it
    under the current umask: 0644/0755 under umask 022.

    mkstemp/mkdtemp create 0600/0700 entries and safetensors' save_file creates 0600 files; results written
    that way would be unreadable by the group on a shared cluster. Every atomic writer calls this on its
    temporary path before the rename, so no output keeps a private mode the umask did not ask for.
    """
    path = Path(path)
    mask = _umask()
    entries = [path]
    if path.is_dir() and not path.is_symlink():
        entries += sorted(path.rglob("*"))
    for entry in entries:
        if entry.is_symlink():
            continue
        entry.chmod((0o777 if entry.is_dir() else 0o666) & ~mask)
    return path


def _tmp_sibling(path: Path, is_dir: bool) -> Path:
    """A temp file/dir beside `path` (same filesystem, so the final rename is atomic), with the umask-based
    mode of an ordinary file or folder (output_mode), not mkstemp's private one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if is_dir:
        return output_mode(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return output_mode(name)


@contextlib.contextmanager
def _atomic(path: Path, is_dir: bool) -> Iterator[Path]:
    """Yield a temp file or folder beside `path`; on success it (every entry of a folder) gets the umask-based
    mode (output_mode) and replaces `path` in one rename; on failure it is removed and `path` is untouched."""
    with writing(path):
        tmp = _tmp_sibling(path, is_dir)
    try:
        with writing(path):
            yield tmp
            output_mode(tmp)  # files the writers created privately (safetensors: 0600) become group-readable
            if is_dir and path.exists():
                log.info("%s: deleting the earlier folder to put the new one in its place", path)
                shutil.rmtree(path)
            os.replace(tmp, path)
    finally:
        if not is_dir:
            tmp.unlink(missing_ok=True)
        elif tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def atomic_file(path: str | os.PathLike) -> contextlib.AbstractContextManager[Path]:
    """Yield a temp file path beside `path` for a writer that wants a file name (pandas' to_parquet,
    safetensors' save_file); on success it gets the umask-based mode and replaces `path` in one rename."""
    return _atomic(Path(path), is_dir=False)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write text to a temp file beside `path`, then rename it into place."""
    path = Path(path)
    with writing(path):
        tmp = _tmp_sibling(path, is_dir=False)
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return path


def to_jsonable(obj: Any) -> Any:
    """Convert numpy/torch scalars and paths so json.dumps accepts them."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", 0) == 0:
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return obj


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> Path:
    return atomic_write_text(path, json.dumps(to_jsonable(obj), indent=indent, sort_keys=False) + "\n")


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> Path:
    """Write rows as JSON Lines atomically (one JSON object per line, UTF-8, no ASCII escaping)."""
    text = "".join(json.dumps(to_jsonable(row), ensure_ascii=False) + "\n" for row in rows)
    return atomic_write_text(path, text)


def iter_jsonl(path: str | os.PathLike, error: type[ValueError] = ValueError) -> Iterator[tuple[int, dict]]:
    """(line number, object) of each non-blank line of a JSON Lines file; a line that is not a JSON object
    raises `error` naming the file and line number."""
    with open(path, encoding="utf-8-sig") as handle:  # -sig: a leading byte-order mark is not data
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise error(f"{path}:{line_no}: not valid JSON ({err.msg})") from err
            if not isinstance(row, dict):
                raise error(f"{path}:{line_no}: expected a JSON object, got {type(row).__name__}")
            yield line_no, row


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read JSON Lines; a malformed line raises ValueError naming the file and line number."""
    return [row for _, row in iter_jsonl(path)]


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8-sig") as handle:
        return json.load(handle)


def atomic_dir(path: str | os.PathLike) -> contextlib.AbstractContextManager[Path]:
    """Yield a temp directory; on success every entry gets the umask-based mode (output_mode) and the folder
    replaces `path` (e.g. a saved model folder) in one rename."""
    return _atomic(Path(path), is_dir=True)
