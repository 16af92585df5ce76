"""What the fault suite (tests/faults/) checks around a failing stage: which files it changed (a content hash of
every file in a tree, before and after) and the modes files get under a given umask."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

# A credential-shaped value planted in configs, argv, logs and summaries (matches prefpipe.common.secrets).
FAKE_TOKEN = "hf_FaKeT0kenF0rTestsOnly0123456789"


def tree_hashes(root: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under root (empty when root does not exist)."""
    root = Path(root)
    if not root.exists():
        return {}
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    """Paths added, removed or rewritten between two tree_hashes."""
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def modes(root: Path) -> dict[str, int]:
    """{relative path: permission bits} of root's files and folders (root itself as '.')."""
    root = Path(root)
    entries = [root, *sorted(root.rglob("*"))] if root.is_dir() else [root]
    return {
        (str(p.relative_to(root)) if p != root else "."): stat.S_IMODE(p.stat().st_mode)
        for p in entries
        if not p.is_symlink()
    }


def files_containing(root: Path, text: str) -> list[str]:
    """Files under root whose bytes contain `text`."""
    needle = text.encode()
    return sorted(str(p) for p in Path(root).rglob("*") if p.is_file() and needle in p.read_bytes())
