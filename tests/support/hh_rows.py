"""Real HH-RLHF rows picked by id from a shared data file, in the order asked (the conversation tests)."""

from __future__ import annotations

import json
from pathlib import Path


def rows_by_id(path: Path, ids: tuple[str, ...]) -> list[dict]:
    """The rows of the JSONL file `path` whose id is in `ids`, in the order of `ids`."""
    found = {}
    for line in path.open():
        row = json.loads(line)
        if row["id"] in ids:
            found[row["id"]] = row
    return [found[i] for i in ids]
