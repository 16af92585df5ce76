"""Faults, second round, in the data files (issue 35): the one reader (prefpipe.data.sources.open_records) names
the config key, the file and, where there is one, the row, for every way a file can fail: empty, numbers where
strings belong, a directory, a FIFO, unreadable, an I/O error mid-read. A UTF-8 byte-order mark costs no row."""

from __future__ import annotations

import builtins
import errno
import json
import os
from pathlib import Path

import pytest
from support.rows import load_pairs
from support.settings import data_settings, stage_json

from prefpipe.common.config import DataError
from prefpipe.data.sources import load_benchmark_rows, read_pairs
from prefpipe.evaluation.bench_data import BenchmarkDataError, detect_format
from prefpipe.prep_data import main as prep_data

ROWS = [{"prompt": f"p{i}", "chosen": f"good {i}", "rejected": f"bad {i}"} for i in range(3)]
KEY = r"^data\.external\.path: "


def _jsonl(path, rows, prefix: bytes = b""):
    path.write_bytes(prefix + b"".join(json.dumps(r).encode() + b"\n" for r in rows))
    return path


def _read(path):
    return read_pairs("jsonl", str(path), "train", "auto", "drop", "x")


def test_a_byte_order_mark_costs_no_row(tmp_path):
    rows, report = _read(_jsonl(tmp_path / "bom.jsonl", ROWS, b"\xef\xbb\xbf"))
    assert [r["prompt"] for r in rows] == ["p0", "p1", "p2"] and sum(report["dropped"].values()) == 0
    as_json = tmp_path / "bom.json"
    as_json.write_bytes(b"\xef\xbb\xbf" + json.dumps(ROWS).encode())
    rows, _ = read_pairs("json", str(as_json), "train", "auto", "drop", "x")
    assert len(rows) == 3


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="no /proc here")
def test_a_proc_file_is_read_not_called_empty():
    """/proc files report size 0 but hold text (issue 50): read, and judged by their content."""
    proc = Path("/proc/self/status")
    assert proc.stat().st_size == 0
    with pytest.raises(DataError, match=rf"{KEY}{proc}: row 1: not valid JSON") as info:
        _read(proc)
    assert "0 bytes" not in str(info.value)


def test_empty_blank_and_wrong_type_files_name_key_file_and_row(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(DataError, match=rf"{KEY}{empty}: is empty \(0 bytes\)$"):
        _read(empty)
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"{KEY}{blank}: holds no rows"):
        _read(blank)
    numbers = _jsonl(tmp_path / "numbers.jsonl", [{"prompt": 1, "chosen": 2, "rejected": 3}] * 2)
    with pytest.raises(
        DataError, match=rf"{KEY}{numbers}: row 1: .*fields prompt \(int\), chosen \(int\), rejected \(int\)"
    ):
        _read(numbers)
    with pytest.raises(DataError, match=rf"{KEY}{numbers}: row 1: unrecognised_shape: 'prompt' is a int"):
        read_pairs("jsonl", str(numbers), "train", "rewardbench", "error", "x")


def test_a_directory_and_a_fifo_are_named_as_what_they_are(tmp_path):
    folder = tmp_path / "pairs.jsonl"
    folder.mkdir()
    with pytest.raises(DataError, match=rf"{KEY}{folder}: is a directory, not a data file$"):
        _read(folder)
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)  # opening it would block forever: the reader must not
    with pytest.raises(DataError, match=rf"{KEY}{fifo}: is a FIFO, not a regular file$"):
        _read(fifo)
    with pytest.raises(DataError, match=rf"{KEY}{tmp_path / 'gone.jsonl'}: does not exist$"):
        _read(tmp_path / "gone.jsonl")


def _failing_open(monkeypatch, target, error: OSError, after_bytes: int | None = None):
    """open() of `target` raises `error` (at once, or on the first read after `after_bytes` bytes): the OS's
    answer for an unreadable file or a failing disk, which a root test process cannot get from chmod."""
    real_open = builtins.open

    class Failing:
        def __init__(self, handle):
            self.handle, self.read = handle, 0

        def __iter__(self):
            for line in self.handle:
                self.read += len(line)
                if self.read > after_bytes:
                    raise error
                yield line

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    def fake_open(file, *args, **kwargs):
        if os.fspath(file) != os.fspath(target):
            return real_open(file, *args, **kwargs)
        if after_bytes is None:
            raise error
        return Failing(real_open(file, *args, **kwargs))

    monkeypatch.setattr(builtins, "open", fake_open)


def test_unreadable_file_and_io_error_name_key_file_and_row(tmp_path, monkeypatch):
    path = _jsonl(tmp_path / "pairs.jsonl", ROWS)
    _failing_open(monkeypatch, path, PermissionError(errno.EACCES, "Permission denied"))
    with pytest.raises(DataError, match=rf"{KEY}{path}: cannot be read \(Permission denied\)$"):
        _read(path)
    monkeypatch.undo()
    line = len(json.dumps(ROWS[0])) + 1
    _failing_open(monkeypatch, path, OSError(errno.EIO, "Input/output error"), after_bytes=line)
    with pytest.raises(DataError, match=rf"{KEY}{path}: cannot be read after row 1 \(Input/output error\)$"):
        _read(path)


def test_the_test_file_prompts_and_benchmarks_name_their_own_keys(tmp_path):
    train = _jsonl(tmp_path / "train.jsonl", ROWS)
    folder = tmp_path / "test.jsonl"
    folder.mkdir()
    with pytest.raises(DataError, match=rf"^data\.external\.test_split: {folder}: is a directory"):
        load_pairs({"source": "jsonl", "path": str(train), "test_split": str(folder)}, "drop", 0)
    empty = tmp_path / "bench.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(BenchmarkDataError, match=rf"^eval\.benchmarks\.mine\.source: {empty}: is empty"):
        detect_format("mine", str(empty), "auto", "test")
    with pytest.raises(DataError, match=rf"^data\.external\.path: {empty}: is empty"):
        load_benchmark_rows(str(empty), "test", bad_rows="drop")


def test_prep_data_with_a_fifo_for_prompts_fails_in_one_line(tmp_path, caplog):
    train = _jsonl(tmp_path / "train.jsonl", [{"question": "q", "answer": "1"}])
    fifo = tmp_path / "heldout.jsonl"
    os.mkfifo(fifo)
    prompts = {"source": "jsonl", "path": str(train), "test_path": str(fifo), "prompt_field": "question"}
    settings = data_settings({"prompts": prompts})
    caplog.clear()
    with caplog.at_level("ERROR"):
        code = prep_data(["--config", stage_json(settings), "--out", str(tmp_path / "data")])
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert code == 2 and errors == [
        f"prep_data: data.prompts.test_path: {fifo}: is a FIFO, not a regular file"
    ]
    assert not (tmp_path / "data" / "rl_prompts_train.jsonl").exists()
