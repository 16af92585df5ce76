"""Real preference data from JSONL, JSON, Parquet or Hugging Face datasets, as normalised pairs.

Two entry points: `load_external_pairs` gives prep_data its train/test pairs from a non-synthetic source, and
`load_benchmark_rows` gives evaluation RewardBench-format rows. Readers only parse and number rows
(RawRecord); all judging of rows happens in prefpipe.data.normalize, so every source is checked the same way
and every bad row can be reported by file and row number. Nothing here unpickles or runs remote code.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefpipe.common.config import ConfigError, DataError
from prefpipe.data.normalize import (
    RawRecord,
    detect_format,
    guess_format,
    make_ids_unique,
    normalize_records,
    subset_counts,
    train_test_overlap,
)
from prefpipe.settings.data import ExternalSourceSettings

log = logging.getLogger(__name__)

SOURCES = ("hf", "jsonl", "parquet", "json")
FILE_SUFFIXES = {".jsonl": "jsonl", ".json": "json", ".parquet": "parquet"}
HF_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}  # datasets' builder per data file
DETECT_ROWS = 100  # rows read ahead to detect the format when format is "auto"


# ----------------------------------------------------------------------------- readers


def iter_jsonl(path: Path) -> Iterator[RawRecord]:
    """One record per non-blank line; a line that is not JSON becomes a record with an error, not a crash.
    A line that is not UTF-8 stops the read naming the file and line (the file's encoding is wrong, not a row)."""
    with open(path, "rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                # utf-8-sig on the first line: a byte-order mark (editors on Windows write one) is not data
                line = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise DataError(
                    f"{path}: line {line_no}: not UTF-8 text ({err.reason} at byte {err.start} of the line)"
                ) from err
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as err:
                yield RawRecord(line_no, error=f"not valid JSON ({err.msg} at column {err.colno})")
                continue
            yield RawRecord(line_no, value)


def iter_json(path: Path) -> Iterator[RawRecord]:
    """A JSON file holding one list of rows (numbered from 1)."""
    try:
        with open(path, encoding="utf-8-sig") as handle:  # -sig: a leading byte-order mark is not data
            data = json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: not a valid JSON file ({err})") from err
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of rows, got {type(data).__name__}")
    for number, value in enumerate(data, start=1):
        yield RawRecord(number, value)


def iter_parquet(path: Path, rows_per_read: int = 1024) -> Iterator[RawRecord]:
    """Parquet rows through pyarrow in batches, as plain Python values (message lists stay lists of dicts)."""
    import pyarrow
    import pyarrow.parquet as pq

    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=rows_per_read)
        number = 0
        for batch in batches:
            for value in batch.to_pylist():
                number += 1
                yield RawRecord(number, value)
    except pyarrow.ArrowException as err:
        raise DataError(f"{path}: cannot read as Parquet ({err})") from err


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def _load_hf_dataset(path: str, split: str, cache_dir: str | None) -> Any:
    """`datasets.load_dataset` for a local folder, a local data file or a hub id (hub ids need the network).

    HF_HUB_OFFLINE is left to `datasets` itself, so an offline machine fails fast instead of hanging.
    """
    import datasets

    local = Path(path)
    try:
        if local.is_file():
            builder = HF_BUILDERS.get(local.suffix.lower())
            if builder is None:
                raise DataError(
                    f"unsupported data file type {local.suffix!r} (use .jsonl, .json or .parquet)"
                )
            return datasets.load_dataset(
                builder, data_files={split: str(local)}, split=split, cache_dir=cache_dir
            )
        return datasets.load_dataset(path, split=split, cache_dir=cache_dir)
    except Exception as err:  # datasets raises many types; re-raise one that names the source
        offline = not local.exists() and _hub_offline()
        hint = (
            " (HF_HUB_OFFLINE is set: a hub id needs the network; use a local folder or file)"
            if offline
            else ""
        )
        raise DataError(
            f"{path} [split {split}]: cannot load with datasets.load_dataset: {err}{hint}"
        ) from err


def iter_hf(path: str, split: str, cache_dir: str | None = None) -> Iterator[RawRecord]:
    for number, value in enumerate(_load_hf_dataset(path, split, cache_dir), start=1):
        yield RawRecord(number, value)


def check_data_file(file: Path, key: str) -> None:
    """A DataError naming `key` and the file unless `file` is a non-empty regular file: a missing path, a
    folder, a FIFO (which would block the read forever), a socket or device, an empty file and a path that
    cannot be looked at are each named as what they are."""
    try:
        info = file.stat()
    except FileNotFoundError:
        raise DataError(f"{key}: {file}: does not exist") from None
    except OSError as err:
        raise DataError(f"{key}: {file}: cannot be read ({err.strerror or err})") from None
    if stat.S_ISDIR(info.st_mode):
        raise DataError(f"{key}: {file}: is a directory, not a data file")
    if not stat.S_ISREG(info.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a socket or device"
        raise DataError(f"{key}: {file}: is {kind}, not a regular file")
    if info.st_size == 0 and not _reads_a_byte(file, key):  # /proc and /sys files report size 0 but hold text
        raise DataError(f"{key}: {file}: is empty (0 bytes)")


def _reads_a_byte(file: Path, key: str) -> bool:
    try:
        with open(file, "rb") as handle:
            return bool(handle.read(1))
    except OSError as err:
        raise DataError(f"{key}: {file}: cannot be read ({err.strerror or err})") from None


def _read_guarded(records: Iterator[RawRecord], file: Path, key: str) -> Iterator[RawRecord]:
    """`records` with an OSError while opening or reading (permissions, an I/O error) as one DataError naming
    the key, the file and the last row read."""
    number = 0
    try:
        for record in records:
            number = record.number
            yield record
    except OSError as err:
        where = f" after row {number}" if number else ""
        raise DataError(f"{key}: {file}: cannot be read{where} ({err.strerror or err})") from None
    except DataError as err:  # a line that is not UTF-8, a JSON file that does not parse
        raise _keyed(key, err) from None


def _keyed(key: str, err: DataError) -> DataError:
    """`err` with the config key leading its message (once)."""
    return err if str(err).startswith(key) else DataError(f"{key}: {err}")


def open_records(
    source: str, path: str, split: str, cache_dir: str | None = None, key: str = "data.external.path"
) -> tuple[str, Iterator[RawRecord]]:
    """(name used in messages, records) for one file or one dataset split; `key` is the config key that names
    it, for the messages of check_data_file and _read_guarded."""
    if source == "hf":
        return f"{path} [split {split}]", iter_hf(path, split, cache_dir)
    file = Path(os.path.expanduser(path))
    check_data_file(file, key)
    readers = {"jsonl": iter_jsonl, "json": iter_json, "parquet": iter_parquet}
    return str(file), _read_guarded(readers[source](file), file, key)


# ----------------------------------------------------------------------------- pairs


def read_pairs(
    source: str,
    path: str,
    split: str,
    fmt: str,
    bad_rows: str,
    subset_name: str,
    max_rows: int | None = None,
    cache_dir: str | None = None,
    key: str = "data.external.path",
) -> tuple[list[dict], dict]:
    """Read one file or split and normalise it; ids are NOT yet made unique (the caller does that once).
    `key` is the config key that names the file, for the messages."""
    where, records = open_records(source, path, split, cache_dir, key)
    if fmt == "auto":
        head = list(itertools.islice(records, DETECT_ROWS))
        if not head:
            raise DataError(f"{key}: {where}: holds no rows (only blank lines)")
        values = [record.value for record in head if record.error is None]
        if not any(guess_format(value) for value in values):
            raise DataError(f"{key}: {where}: {_shape_note(head)}")
        fmt = detect_format(values, where)
        records = itertools.chain(head, records)
    try:
        rows, report = normalize_records(records, where, fmt, bad_rows, subset_name, max_rows)
    except DataError as err:  # a bad row in "error" mode
        raise _keyed(key, err) from None
    n_dropped = sum(report["dropped"].values())
    log.info("%s: format %s, %d rows read, %d kept", where, fmt, report["rows_in"], report["kept"])
    if n_dropped:
        reasons = {reason: n for reason, n in report["dropped"].items() if n}
        log.warning("%s: dropped %d bad rows: %s", where, n_dropped, reasons)
    return rows, report


def _shape_note(head: list[RawRecord]) -> str:
    """Why no row of `head` looks like a preference pair, told by its first row: its line, and each field
    with its type (numbers where strings belong, say)."""
    first = head[0]
    if first.error is not None:
        return f"row {first.number}: {first.error}"
    if not isinstance(first.value, dict):
        return f"row {first.number}: a {type(first.value).__name__}, not an object with chosen/rejected"
    fields = ", ".join(f"{name} ({type(value).__name__})" for name, value in list(first.value.items())[:6])
    return (
        f"row {first.number}: no row looks like a preference pair (fields {fields or 'none'}; chosen and "
        "rejected must be strings, or message lists)"
    )


def _split_key(seed: int, prompt: str) -> str:
    return hashlib.sha1(f"{seed}\0{prompt}".encode()).hexdigest()


def split_held_out(rows: list[dict], test_fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    """Hold out whole prompts (no prompt lands in both parts), chosen by a seeded hash of the prompt.

    Same seed and rows, same split, on any machine and independent of row order; the test part is
    round(n * test_fraction) rows (at least one when the fraction is positive), overshooting by at most
    the pairs of one prompt. Both parts keep the source order.
    """
    if not 0.0 <= test_fraction < 1.0:
        raise ConfigError(f"data.external.test_fraction must be in [0, 1), got {test_fraction!r}")
    target = round(len(rows) * test_fraction)
    if test_fraction > 0 and len(rows) >= 2:
        target = max(target, 1)
    groups: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        groups.setdefault(row["prompt"], []).append(index)
    held: set[int] = set()
    for prompt in sorted(groups, key=lambda p: _split_key(seed, p)):
        if len(held) >= target:
            break
        held.update(groups[prompt])
    train = [row for i, row in enumerate(rows) if i not in held]
    test = [row for i, row in enumerate(rows) if i in held]
    return train, test


def external_config(external: ExternalSourceSettings, source: str) -> dict[str, Any]:
    """The checks the schema cannot make (a path is required once the source is not synthetic)."""
    if source not in SOURCES:
        raise ConfigError(f"data.source must be one of {SOURCES} for external data, got {source!r}")
    settings = {**dataclasses.asdict(external), "source": source}
    for key in ("path", "split", "subset_name"):
        if not isinstance(settings[key], str) or not settings[key].strip():
            raise ConfigError(f"data.external.{key} must be a non-empty string, got {settings[key]!r}")
    if settings["test_split"] is not None and not settings["test_split"].strip():
        raise ConfigError("data.external.test_split must be null or a non-empty string")
    return settings


def load_external_pairs(
    external: ExternalSourceSettings, source: str, bad_rows: str, seed: int
) -> tuple[list[dict], list[dict], dict]:
    """Train and test pairs from a non-synthetic source, plus a report of what was read, kept and dropped.

    The test part is `test_split` when given (a split name of the same dataset for source "hf", a second
    file otherwise; test_fraction is then unused), else a seeded held-out share of the one split.
    """
    settings = external_config(external, source)
    common = {
        "source": settings["source"],
        "fmt": settings["format"],
        "bad_rows": bad_rows,
        "subset_name": settings["subset_name"],
        "max_rows": settings["max_rows"],
        "cache_dir": settings["cache_dir"],
    }
    train, train_report = read_pairs(
        path=settings["path"], split=settings["split"], key="data.external.path", **common
    )
    reads = [train_report]
    if settings["test_split"] is not None:
        test_path, test_split = (
            (settings["path"], settings["test_split"])
            if settings["source"] == "hf"
            else (settings["test_split"], settings["split"])
        )
        test, test_report = read_pairs(
            path=test_path, split=test_split, key="data.external.test_split", **common
        )
        reads.append(test_report)
    else:
        train, test = split_held_out(train, settings["test_fraction"], seed)
    if not train:
        raise DataError(
            f"{train_report['where']}: no usable preference pairs (dropped: {train_report['dropped']})"
        )
    if not test:
        log.warning("%s: the test part is empty", settings["path"])
    overlap = train_test_overlap(train, test)  # before ids are made unique across the parts
    if any(overlap.values()):
        log.warning(
            "%s: %d test pairs share a prompt and %d an id with training pairs (train_test_overlap)",
            settings["path"],
            overlap["prompts"],
            overlap["ids"],
        )
    duplicate_ids = make_ids_unique(train + test)
    return train, test, _pairs_report(settings, reads, train, test, duplicate_ids, overlap)


def _pairs_report(
    settings: dict[str, Any],
    reads: list[dict],
    train: list[dict],
    test: list[dict],
    duplicate_ids: int,
    overlap: dict[str, int],
) -> dict[str, Any]:
    """What load_external_pairs read, kept and dropped over its reads (the training file's first)."""
    first = reads[0]
    return {
        "source": settings["source"],
        "path": settings["path"],
        "format": first["format"],
        "test_from": "test_split" if settings["test_split"] is not None else "test_fraction",
        "rows_in": sum(r["rows_in"] for r in reads),
        "kept": sum(r["kept"] for r in reads),
        "dropped": {reason: sum(r["dropped"][reason] for r in reads) for reason in first["dropped"]},
        "duplicate_ids": duplicate_ids,
        "train_test_overlap": overlap,
        "train": len(train),
        "test": len(test),
        "subsets": {"train": subset_counts(train), "test": subset_counts(test)},
        "reads": reads,
    }


def load_benchmark_rows(
    path_or_id: str, split: str, *, bad_rows: str, cache_dir: str | None = None
) -> tuple[list[dict], dict]:
    """RewardBench-format rows (subsets kept) from a local .jsonl/.json/.parquet, a dataset folder or a hub id.

    Bad rows are dropped with a logged count (see the report's "dropped"), or with bad_rows="error" stop the
    read with a ValueError naming the file and row, as for training data; `split` applies to datasets only.
    """
    source = FILE_SUFFIXES.get(Path(path_or_id).suffix.lower(), "hf")
    rows, report = read_pairs(source, path_or_id, split, "auto", bad_rows, "default", cache_dir=cache_dir)
    report["duplicate_ids"] = make_ids_unique(rows)
    report["source"] = source
    return rows, report
