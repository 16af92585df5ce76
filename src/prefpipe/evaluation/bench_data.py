"""Benchmark rows for evaluation: where they come from and which ones can be scored.

A benchmark source is `synthetic` (the data stage's pairs_test.jsonl), a local .jsonl/.json/.parquet file (a
relative path is taken from the current directory, i.e. the workflow root under Snakemake), or a hub id. Files
and hub ids go through `prefpipe.data.sources.load_benchmark_rows` when that module is installed (one
normalisation for every stage, so a bad row in a benchmark file is judged like one in training data); without
it only local JSONL is read here. `bad_rows` (the config's `data.bad_rows`) applies to every source: "error"
stops at the first bad row naming the file and row, "drop" skips it and counts it by reason in the report's
`dropped` / `rows_skipped`. A missing local file is an error naming `eval.benchmarks.<name>`, raised only when
the benchmark is read (so a Snakemake dry run works on a machine without the file).

Rows are then checked once more: rows without a usable prompt/chosen/rejected are dropped and counted (or
raise); a missing subset becomes the benchmark name and a missing id is made from the row index, both counted.
Identical chosen/rejected rows from the synthetic source are kept (they score as ties, i.e. wrong) and
counted; the file loader treats them as bad rows (`chosen_equals_rejected`).
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

from prefpipe.common.config import DataError
from prefpipe.common.io import read_jsonl

log = logging.getLogger(__name__)

SYNTHETIC = "synthetic"
TEXT_FIELDS = ("prompt", "chosen", "rejected")
FILE_SUFFIXES = (".jsonl", ".json", ".parquet")
BAD_ROW_MODES = ("drop", "error")


class BenchmarkDataError(DataError):
    """A benchmark file or row cannot be used; the message names the source and row."""


def is_local_file_source(source: str) -> bool:
    """True for sources meant as local data files (by suffix), whether or not the file exists yet."""
    return source != SYNTHETIC and Path(source).suffix.lower() in FILE_SUFFIXES


def _check_local_file(name: str, source: str) -> None:
    if is_local_file_source(source) and not Path(source).is_file():
        raise BenchmarkDataError(
            f"eval.benchmarks.{name}: benchmark file {source!r} does not exist "
            f"(resolved from {Path.cwd()} to {Path(source).resolve()}); relative paths are taken from the "
            "workflow root"
        )


def _read_source(
    name: str, source: str, data_dir: Path, split: str, bad_rows: str
) -> tuple[list[dict], dict[str, Any], str]:
    if source == SYNTHETIC:
        path = data_dir / "pairs_test.jsonl"
        if not path.exists():
            raise BenchmarkDataError(
                f"benchmark {name!r} (synthetic): {path} does not exist (run the prep_data stage)"
            )
        return read_jsonl(path), {}, str(path)
    _check_local_file(name, source)
    try:
        from prefpipe.data.sources import load_benchmark_rows
    except ImportError:
        load_benchmark_rows = None
    if load_benchmark_rows is not None:
        try:
            rows, report = load_benchmark_rows(source, split=split, bad_rows=bad_rows)
        except (ValueError, FileNotFoundError) as err:
            # a bad row in "error" mode, an unreadable file or a hub failure: name the config key too
            raise BenchmarkDataError(f"eval.benchmarks.{name}: {err}") from err
        return list(rows), dict(report or {}), source
    path = Path(source)
    if path.suffix == ".jsonl":
        return read_jsonl(path), {}, str(path)
    raise BenchmarkDataError(
        f"eval.benchmarks.{name}: {source!r} is not a local .jsonl file, and prefpipe.data.sources (needed "
        "for .json/.parquet files and hub ids) is not available"
    )


def clean_rows(rows: list[dict], name: str, where: str, bad_rows: str) -> tuple[list[dict], dict]:
    """Validate and normalise benchmark rows; return (usable rows, report with counts by reason)."""
    if bad_rows not in BAD_ROW_MODES:
        raise BenchmarkDataError(f"data.bad_rows must be 'drop' or 'error', got {bad_rows!r}")
    dropped: Counter[str] = Counter()
    notes: Counter[str] = Counter()
    seen_ids: set[str] = set()
    kept = []
    for index, row in enumerate(rows):
        reason = None
        if not isinstance(row, dict):
            reason = "not_an_object"
        else:
            for field in TEXT_FIELDS:
                value = row.get(field)
                if not isinstance(value, str):
                    reason = f"missing_{field}"
                    break
                if not value.strip():
                    reason = f"empty_{field}"
                    break
        if reason is None:
            row_id = row.get("id")
            row_id = f"{name}-{index}" if row_id is None or row_id == "" else str(row_id)
            if row.get("id") in (None, ""):
                notes["id_filled"] += 1
            if row_id in seen_ids:
                reason = "duplicate_id"
        if reason is not None:
            if bad_rows == "error":
                raise BenchmarkDataError(f"{where}: row {index + 1}: {reason.replace('_', ' ')}")
            dropped[reason] += 1
            continue
        subset = row.get("subset")
        if not isinstance(subset, str) or not subset:
            subset = name
            notes["subset_filled"] += 1
        if row["chosen"] == row["rejected"]:
            notes["identical_pair_kept"] += 1
        seen_ids.add(row_id)
        kept.append(
            {
                "id": row_id,
                "prompt": row["prompt"],
                "chosen": row["chosen"],
                "rejected": row["rejected"],
                "subset": subset,
            }
        )
    if not kept:
        raise BenchmarkDataError(f"{where}: no usable rows (dropped: {dict(dropped)})")
    report = {"rows_in": len(rows), "rows_kept": len(kept), "dropped": dict(dropped), "notes": dict(notes)}
    if dropped:
        log.warning("%s: dropped %d rows: %s", where, sum(dropped.values()), dict(dropped))
    return kept, report


def load_benchmark(
    name: str, source: str, data_dir: str | Path, split: str, bad_rows: str
) -> tuple[list[dict], dict[str, Any]]:
    """Rows of one benchmark plus a report: source, rows read / kept / skipped, skips by reason, the loader's report.

    `dropped` adds up the loader's skips (malformed file rows) and this module's own, so `rows_skipped` is
    every row of the source that was not scored.
    """
    if bad_rows not in BAD_ROW_MODES:
        raise BenchmarkDataError(f"data.bad_rows must be 'drop' or 'error', got {bad_rows!r}")
    raw, loader_report, where = _read_source(name, source, Path(data_dir), split, bad_rows)
    rows, report = clean_rows(raw, name, where, bad_rows)
    dropped = Counter({k: v for k, v in (loader_report.get("dropped") or {}).items() if v})
    dropped.update(report["dropped"])
    rows_in = int(loader_report.get("rows_in", report["rows_in"]))
    return rows, {
        "source": where,
        **report,
        "rows_in": rows_in,
        "dropped": dict(dropped),
        "rows_skipped": sum(dropped.values()),
        "loader": loader_report,
    }
