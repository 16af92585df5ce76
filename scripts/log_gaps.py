"""The longest silence in each stage log of a finished run: seconds between consecutive timestamped lines
(prefpipe's log lines and its rounded progress lines carry `YYYY-MM-DD HH:MM:SS,mmm`).

    python scripts/log_gaps.py results/<experiment> [--over 10]

Prints one row per log (longest gap, where it ends, line count) and exits 1 when any gap exceeds --over seconds,
so a run's logs can be checked for "a line at least every N seconds" the way a user watching them sees it."""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}) ")


def gaps(log: Path) -> tuple[float, str, int]:
    """(longest gap in seconds, the line that ended it, timestamped lines) of one log."""
    last, worst, where, n = None, 0.0, "", 0
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        m = STAMP.match(line)
        if not m:
            continue
        n += 1
        now = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
        if last is not None and (now - last).total_seconds() > worst:
            worst, where = (now - last).total_seconds(), line[:140]
        last = now
    return worst, where, n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("--over", type=float, default=10.0)
    a = ap.parse_args()
    logs = sorted(p for p in a.results.rglob("*.log") if "benchmarks" not in p.parts)
    if not logs:
        print(f"no logs under {a.results}", file=sys.stderr)
        return 2
    bad = 0
    for log in logs:
        worst, where, n = gaps(log)
        flag = "  OVER" if worst > a.over else ""
        bad += bool(flag)
        print(
            f"{worst:7.1f} s  {n:5d} lines  {log.relative_to(a.results)}{flag}\n           ended by: {where}"
        )
    print(f"{len(logs)} logs, {bad} with a gap over {a.over:g} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
