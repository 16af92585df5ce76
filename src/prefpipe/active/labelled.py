"""The labelled set of one round: the training rows chosen so far, as a data folder train_reward reads
(pairs_train.jsonl = the labelled rows in the order of the full training file, pairs_test.jsonl = the
experiment's test pairs unchanged) and selection.json (the ids, and which of them this round added).

The pool of a round is every training pair not in its labelled set; a pair is never labelled twice.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from prefpipe.common.config import DataError
from prefpipe.common.io import atomic_file, atomic_write_json, iter_jsonl, read_json, write_jsonl

TRAIN, TEST, SELECTION = "pairs_train.jsonl", "pairs_test.jsonl", "selection.json"


def training_rows(data: Path) -> list[dict[str, Any]]:
    """The experiment's training rows (data/pairs_train.jsonl); every row needs a unique id."""
    rows, seen = [], set()
    for line, row in iter_jsonl(data / TRAIN, DataError):
        if "id" not in row:
            raise DataError(f"{data / TRAIN}:{line}: active learning needs an `id` on every training pair")
        if str(row["id"]) in seen:
            raise DataError(f"{data / TRAIN}:{line}: id {row['id']!r} occurs twice")
        seen.add(str(row["id"]))
        rows.append(row)
    return rows


def labelled_ids(folder: Path) -> list[str]:
    """The labelled ids of a round's data folder (its selection.json)."""
    return list(read_json(folder / SELECTION)["labelled"])


def pool_ids(rows: list[dict[str, Any]], labelled: list[str]) -> list[str]:
    """The training ids not yet labelled, in file order."""
    taken = set(labelled)
    return [str(r["id"]) for r in rows if str(r["id"]) not in taken]


def write_round(
    out: Path,
    data: Path,
    rows: list[dict[str, Any]],
    labelled: list[str],
    added: list[str],
    info: dict[str, Any],
) -> None:
    """Write the round's data folder: its labelled rows, the test pairs, selection.json (labelled, added, info)."""
    if len(set(labelled)) != len(labelled):
        raise DataError(f"{out}: a pair would be labelled twice")
    unknown = set(labelled) - {str(r["id"]) for r in rows}
    if unknown:
        raise DataError(f"{out}: labelled ids not in {data / TRAIN}, e.g. {min(unknown)}")
    taken = set(labelled)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / TRAIN, [r for r in rows if str(r["id"]) in taken])
    with atomic_file(out / TEST) as tmp:
        shutil.copyfile(data / TEST, tmp)
    atomic_write_json(
        out / SELECTION, {**info, "labels": len(labelled), "labelled": labelled, "added": added}
    )
