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


def command_scratch(root: Path) -> Path:
    """What the `prefpipe` command tests point the commands at, under root: results/ (a synthetic results tree
    with a real tiny BT reward run at reward/bt and the workflow's report recorded), other/ (another
    experiment's results tree) and notes/ (a folder of someone's files). Returns root."""
    import shutil

    from prefpipe.report.__main__ import main as report_stage
    from support.export_runs import reward_run
    from support.models import build_reward, save_tiny_base
    from support.results_tree import manifest, write_results_tree
    from support.settings import report_settings, stage_json
    from support.stages import run_main

    results = root / "results"
    write_results_tree(results, reward_steps=3, grpo_steps=3)
    write_results_tree(root / "other", experiment="other", reward_steps=3, grpo_steps=3)
    rm, _ = build_reward(save_tiny_base(root / "tinybase"), "bt")
    staged = reward_run(root / "staging", rm, "bt")
    shutil.move(str(staged / "model"), str(results / "reward" / "bt" / "model"))
    shutil.rmtree(root / "staging")
    config = report_settings({"figure_dpi": 40}, experiment="synthetic-default", seed=0)
    code, _ = run_main(
        report_stage, stage_json(config), results=str(results), inputs=manifest().to_json(),
        out=str(results / "report"),
    )  # fmt: skip
    assert code == 0
    (root / "notes").mkdir()
    (root / "notes" / "thesis.txt").write_text("chapter 1\n")
    return root
