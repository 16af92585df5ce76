"""Faults, second round: an output that cannot be written (a full disk, a read-only folder) ends the stage in one
line naming the file, exit 2, and leaves no partial file (issue 35). The stages run for real; only the OS call
that fails is patched (a root test process cannot get EROFS from chmod, nor a full disk on demand)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from support.results_tree import manifest, write_results_tree
from support.settings import data_settings, report_settings, stage_json
from support.stages import run_main

from prefpipe.common import io
from prefpipe.common.io import OutputError, atomic_dir, atomic_write_text
from prefpipe.common.run_record import RunRecord
from prefpipe.prep_data import main as prep_data
from prefpipe.report.__main__ import main as report_main

SMALL = {"synthetic": {"rl_prompts_train": 8, "rl_prompts_heldout": 8, "demonstrations": 8}}


def _fail_replace(monkeypatch, name: str, code: int) -> None:
    """os.replace onto a file called `name` fails with `code` (the rename that publishes an atomic write)."""
    real = os.replace

    def replace(src, dst, *args, **kwargs):
        if Path(dst).name == name:
            raise OSError(code, os.strerror(code))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(io.os, "replace", replace)


def _leftovers(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*.tmp"))


def test_full_disk_in_prep_data_is_one_line_naming_the_file(tmp_path, monkeypatch, caplog):
    _fail_replace(monkeypatch, "pairs_test.jsonl", errno.ENOSPC)
    out = tmp_path / "data"
    code, errors = run_main(prep_data, stage_json(data_settings(SMALL)), caplog, out=str(out))
    assert code == 2 and errors == [
        f"prep_data: {out / 'pairs_test.jsonl'}: cannot write (No space left on device, ENOSPC)"
    ]
    assert not (out / "pairs_test.jsonl").exists() and _leftovers(tmp_path) == []


def test_read_only_folder_in_the_report_is_one_line_naming_the_file(tmp_path, monkeypatch, caplog):
    results = tmp_path / "results"
    write_results_tree(results, reward_steps=3, grpo_steps=3)
    _fail_replace(monkeypatch, "report.html", errno.EROFS)
    config = report_settings({"figure_dpi": 40}, experiment="synthetic-default", seed=0)
    out = results / "report"
    code, errors = run_main(
        report_main,
        stage_json(config),
        caplog,
        results=str(results),
        inputs=manifest().to_json(),
        out=str(out),
    )
    assert code == 2 and errors == [
        f"report: {out / 'report.html'}: cannot write (Read-only file system, EROFS)"
    ]
    assert not (out / "report.html").exists() and _leftovers(tmp_path) == []


def test_every_writer_names_its_file_and_cleans_up(tmp_path, monkeypatch):
    # the temporary file cannot even be created (a read-only folder)
    def no_temp(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    with monkeypatch.context() as patch:
        patch.setattr(io.tempfile, "mkstemp", no_temp)
        with pytest.raises(
            OutputError, match=rf"^{tmp_path / 'a.txt'}: cannot write \(Read-only file system, EROFS\)$"
        ):
            atomic_write_text(tmp_path / "a.txt", "x")
    # the disk fills while a folder's files are written: the half-built folder is removed
    with (
        pytest.raises(
            OutputError, match=rf"^{tmp_path / 'model'}: cannot write \(No space left on device, ENOSPC\)"
        ),
        atomic_dir(tmp_path / "model") as tmp,
    ):
        (tmp / "weights.bin").write_bytes(b"1234")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    # a metrics line that cannot be appended: named, and the file keeps only whole lines
    record = RunRecord(tmp_path / "stage", "prep_data", {"seed": 0})
    record.log(step=1, loss=0.5)

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("prefpipe.common.run_record.os.write", full)
    metrics = tmp_path / "stage" / "metrics.jsonl"
    with pytest.raises(OutputError, match=rf"^{metrics}: cannot write \(No space left on device, ENOSPC\)$"):
        record.log(step=2, loss=0.25)
    assert metrics.read_text(encoding="utf-8").count("\n") == 1
