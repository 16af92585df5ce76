"""Benchmark rows for evaluation: where they come from and which ones can be scored.

A benchmark source is `synthetic` or `heldout` (the data stage's pairs_test.jsonl), a local .jsonl/.json/.parquet
file (a relative path is taken from the current directory, i.e. the workflow root under Snakemake), or a hub id.
Pair files and hub ids go through `prefpipe.data.sources.read_pairs` (one normalisation for every stage, so a
bad row in a benchmark file is judged like one in training data; rows without a subset, as in an HH-RLHF test
file, form one subset named after the benchmark). RewardBench 2 rows (lists of chosen and rejected completions)
are read by `load_rewardbench2`; `detect_format` tells the two apart. `bad_rows` (the config's `data.bad_rows`) applies to every source: "error"
stops at the first bad row naming the file and row, "drop" skips it and counts it by reason in the report's
`dropped` / `rows_skipped`. A missing local file is an error naming `eval.benchmarks.<name>`, raised only when
the benchmark is read (so a Snakemake dry run works on a machine without the file).

Rows are then checked once more: rows without a usable prompt/chosen/rejected are dropped and counted (or
raise); a missing subset becomes the benchmark name and a missing id is made from the row index, both counted.
Identical chosen/rejected rows from the synthetic source are kept (they score as ties, i.e. wrong) and
counted; the file loader treats them as bad rows (`chosen_equals_rejected`).
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from pathlib import Path
from typing import Any

from prefpipe.common.chat import Message, is_messages, plain_history
from prefpipe.common.config import DataError
from prefpipe.common.io import read_jsonl
from prefpipe.data.normalize import BadRow, make_ids_unique, message_list
from prefpipe.data.sources import open_records, read_pairs
from prefpipe.evaluation.summary_keys import PAIR_FIELDS
from prefpipe.settings.evaluation import SYNTHETIC_SOURCE

log = logging.getLogger(__name__)

SYNTHETIC = SYNTHETIC_SOURCE
HELDOUT = "heldout"  # the data stage's pairs_test.jsonl, whatever data.source is
DATA_STAGE_SOURCES = (SYNTHETIC, HELDOUT)
PAIRS = "rewardbench"  # one chosen and one rejected string per row
REWARDBENCH2 = "rewardbench2"  # lists of chosen and rejected completions per row
# Hub datasets whose format and split are known: id -> (format, split).
KNOWN_HUB_DATASETS = {
    "allenai/reward-bench": (PAIRS, "filtered"),
    "allenai/reward-bench-2": (REWARDBENCH2, "test"),
}
DETECT_ROWS = 20
TEXT_FIELDS = ("prompt", "chosen", "rejected")
FILE_SUFFIXES = (".jsonl", ".json", ".parquet")
FILE_KINDS = {".jsonl": "jsonl", ".json": "json", ".parquet": "parquet"}
BAD_ROW_MODES = ("drop", "error")


class BenchmarkDataError(DataError):
    """A benchmark file or row cannot be used; the message names the source and row."""


def is_local_file_source(source: str) -> bool:
    """True for sources meant as local data files (by suffix), whether or not the file exists yet."""
    return source not in DATA_STAGE_SOURCES and Path(source).suffix.lower() in FILE_SUFFIXES


def _check_local_file(name: str, source: str) -> None:
    if is_local_file_source(source) and not Path(source).exists():  # a folder or FIFO: open_records says so
        raise BenchmarkDataError(
            f"eval.benchmarks.{name}: benchmark file {source!r} does not exist "
            f"(resolved from {Path.cwd()} to {Path(source).resolve()}); relative paths are taken from the "
            "workflow root"
        )


def _key(name: str) -> str:
    return f"eval.benchmarks.{name}.source"


def _keyed(name: str, err: Exception) -> str:
    """The error's message led by the benchmark's config key (once: the data reader may have named it)."""
    return str(err) if str(err).startswith(f"eval.benchmarks.{name}") else f"eval.benchmarks.{name}: {err}"


def _source_kind(source: str) -> str:
    return FILE_KINDS.get(Path(source).suffix.lower(), "hf")


def _read_source(
    name: str, source: str, data_dir: Path, split: str, bad_rows: str
) -> tuple[list[dict], dict[str, Any], str]:
    if source in DATA_STAGE_SOURCES:
        path = data_dir / "pairs_test.jsonl"
        if not path.exists():
            raise BenchmarkDataError(
                f"benchmark {name!r} ({source}): {path} does not exist (run the prep_data stage)"
            )
        return read_jsonl(path), {}, str(path)
    _check_local_file(name, source)
    try:
        # Rows without a subset (an HH-style test file) form one subset named after the benchmark.
        rows, report = read_pairs(_source_kind(source), source, split, "auto", bad_rows, name, key=_key(name))
    except (ValueError, FileNotFoundError) as err:
        # a bad row in "error" mode, an unreadable file or a hub failure: name the config key too
        raise BenchmarkDataError(_keyed(name, err)) from err
    report["duplicate_ids"] = make_ids_unique(rows)
    report["source"] = _source_kind(source)
    return list(rows), dict(report), source


def resolve_split(source: str, split: str | None, default_split: str) -> str:
    """The entry's split, else the known hub dataset's own split, else eval.split."""
    if split is not None:
        return split
    return KNOWN_HUB_DATASETS.get(source, (None, default_split))[1]


def detect_format(name: str, source: str, fmt: str, split: str) -> str:
    """`rewardbench` or `rewardbench2` for an entry whose format is `auto`: the known hub datasets by id, the
    data stage's pairs as pairs, files and other hub ids by their first rows (a chosen that is a list of
    strings is RewardBench 2; a list of chat messages is a pair in "messages" form)."""
    if fmt != "auto":
        return fmt
    if source in DATA_STAGE_SOURCES:
        return PAIRS
    if source in KNOWN_HUB_DATASETS:
        return KNOWN_HUB_DATASETS[source][0]
    _check_local_file(name, source)
    try:
        _, records = open_records(_source_kind(source), source, split, key=_key(name))
        head = [r.value for r in itertools.islice(records, DETECT_ROWS) if r.error is None]
    except (ValueError, FileNotFoundError) as err:
        raise BenchmarkDataError(_keyed(name, err)) from err
    return REWARDBENCH2 if any(_is_option_list(row) for row in head) else PAIRS


def _is_option_list(row: Any) -> bool:
    chosen = row.get("chosen") if isinstance(row, dict) else None
    return isinstance(chosen, list) and bool(chosen) and all(isinstance(c, str) for c in chosen)


def load_rewardbench2(name: str, source: str, split: str, bad_rows: str) -> tuple[list[dict], dict[str, Any]]:
    """RewardBench 2 rows {id, prompt, chosen: [str], rejected: [str], subset, messages where the history is
    more than one user turn}; a prompt may be a string or a message list ending on the user's turn. Bad rows
    are dropped and counted (or, with bad_rows "error", the first one stops the read in one line naming the
    file, the row and what is wrong)."""
    if bad_rows not in BAD_ROW_MODES:
        raise BenchmarkDataError(f"data.bad_rows must be 'drop' or 'error', got {bad_rows!r}")
    _check_local_file(name, source)
    try:
        where, records = open_records(_source_kind(source), source, split, key=_key(name))
        records = list(records)
    except (ValueError, FileNotFoundError) as err:
        raise BenchmarkDataError(_keyed(name, err)) from err
    dropped: Counter[str] = Counter()
    kept: list[dict] = []
    seen: set[str] = set()
    for record in records:
        reason, detail, row = (
            _rb2_row(record.value, name, record.number)
            if record.error is None
            else ("invalid_json", record.error, None)
        )
        if row is not None and row["id"] in seen:
            reason, detail, row = "duplicate_id", f"id {row['id']!r} seen before", None
        if row is None:
            if bad_rows == "error":
                raise BenchmarkDataError(
                    f"eval.benchmarks.{name}: {where}: row {record.number}: {reason} ({detail})"
                )
            dropped[reason] += 1
            continue
        seen.add(row["id"])
        kept.append(row)
    if not kept:
        raise BenchmarkDataError(
            f"eval.benchmarks.{name}: {where}: no usable rows (dropped: {dict(dropped)})"
        )
    return kept, {
        "source": where,
        "format": REWARDBENCH2,
        "rows_in": len(records),
        "rows_kept": len(kept),
        "dropped": dict(dropped),
        "rows_skipped": sum(dropped.values()),
        "options": sum(len(r["chosen"]) + len(r["rejected"]) for r in kept),
    }


def _rb2_prompt(value: dict) -> tuple[str, list[Message] | None]:
    """The row's prompt text and its turns: a prompt string (with the row's `messages` where it has usable
    ones), or a prompt given as a message list ending on the user's turn (chat files, RewardBench 2 rebuilt
    as chat), flattened as every stage flattens a history (plain_history). BadRow when the list is unusable."""
    prompt = value.get("prompt")
    if isinstance(prompt, list):
        messages = message_list(prompt, "prompt", "user")
        text = plain_history(messages)
        return text, (messages if messages != [{"role": "user", "content": text}] else None)
    return prompt, (value["messages"] if is_messages(value.get("messages")) else None)


def _rb2_row(value: Any, name: str, number: int) -> tuple[str, str, dict | None]:
    """(reason, detail, row): a usable row has reason "", a bad one a reason code (counted) and a detail."""
    if not isinstance(value, dict):
        return "not_an_object", f"a {type(value).__name__}", None
    try:
        prompt, messages = _rb2_prompt(value)
    except BadRow as err:
        return "bad_prompt_messages", err.detail, None
    if not isinstance(prompt, str) or not prompt.strip():
        return "missing_prompt", "no prompt text", None
    lists = {}
    for field in ("chosen", "rejected"):
        options = value.get(field)
        if not isinstance(options, list) or not options:
            return f"missing_{field}", f"{field!r} is not a non-empty list", None
        if not all(isinstance(o, str) and o.strip() for o in options):
            return f"empty_{field}", f"{field!r} holds an empty or non-string option", None
        lists[field] = list(options)
    subset = value.get("subset")
    row_id = value.get("id")
    return (
        "",
        "",
        {
            "id": str(row_id) if row_id not in (None, "") else f"{name}-{number}",
            "prompt": prompt,
            "chosen": lists["chosen"],
            "rejected": lists["rejected"],
            "subset": subset if isinstance(subset, str) and subset.strip() else name,
            **({"messages": messages} if messages is not None else {}),
        },
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
                **({"messages": row["messages"]} if is_messages(row.get("messages")) else {}),
                # the uncertainty world's per-pair fields, where recorded (the uncertainty block's targets)
                **{k: row[k] for k in PAIR_FIELDS if row.get(k) is not None},
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
