"""Progress people can read in a rule's log: a tqdm bar (rate, ETA) and a rounded per-step line.

Every loop that can run over a minute (training steps, scoring and decoding batches) goes through `Progress`,
so a log never stays silent for long. The bar writes to stderr, the stream each Snakemake rule sends to its log
file, and redraws at most every BAR_EVERY_S seconds; the line ("train_reward step 120/1200 loss 0.4321 lr 0.0019
12.3 steps/s eta 1m28s") goes through `logging` on the first step, the last, and whenever LINE_EVERY_S seconds
passed since the previous one: with steps shorter than that, at least one line every 2 * LINE_EVERY_S seconds.
A step longer than HEARTBEAT_S (a slow step on a busy machine, a long first compile) gets a "still on step" line
from a background thread every HEARTBEAT_S seconds, so a watched log is never silent for longer than that.
The figures are for people only: the machine-readable record stays metrics.jsonl (prefpipe.common.run_record).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from tqdm import tqdm

log = logging.getLogger("prefpipe.progress")

LINE_EVERY_S = 5.0
BAR_EVERY_S = 2.0
HEARTBEAT_S = 8.0
BAR_COLUMNS = 160  # room for the bar and four rounded metrics
T = TypeVar("T")


def rounded(value: Any) -> str:
    """A metric for a person: four significant digits for floats, integers and text as they are, '-' for None."""
    if value is None:
        return "-"
    if isinstance(value, bool | int | str):
        return str(value)
    try:
        return f"{float(value):.4g}"
    except (TypeError, ValueError):
        return str(value)


def duration(seconds: float | None) -> str:
    """45s, 1m28s, 2h03m; '?' before the first step gives a rate."""
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "?"
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


class Progress:
    """A bar and a per-step line for a loop of `total` units starting at `start` (a resumed run). `enabled`
    False (a non-main process) shows nothing; `step(**metrics)` advances one unit and shows the metrics."""

    def __init__(
        self,
        total: int,
        label: str,
        unit: str = "step",
        start: int = 0,
        enabled: bool = True,
        line_every_s: float = LINE_EVERY_S,
        heartbeat_s: float | None = None,
    ) -> None:
        self.total, self.label, self.unit, self.done = total, label, unit, start
        self.enabled = enabled and total > 0  # a loop of no steps (a head fit switched off) shows nothing
        self.line_every_s = line_every_s
        self.started = self.last_line = time.monotonic()
        self.start = start
        self.lines = 0
        self.bar = tqdm(
            total=total,
            initial=start,
            desc=label,
            unit=unit,
            file=sys.stderr,
            mininterval=BAR_EVERY_S,
            ncols=BAR_COLUMNS,
            ascii=True,
            disable=not self.enabled,
        )
        self._closed = threading.Event()
        every_s = HEARTBEAT_S if heartbeat_s is None else heartbeat_s
        if self.enabled and every_s > 0:
            threading.Thread(target=self._heartbeat, args=(every_s,), daemon=True).start()

    def _heartbeat(self, every_s: float) -> None:
        """A line whenever none was written for `every_s` seconds, until close()."""
        while not self._closed.wait(every_s / 4):
            quiet = time.monotonic() - self.last_line
            if quiet >= every_s and self.done < self.total:
                self._log(f"{self.label} still on {self.unit} {self.done + 1}/{self.total} "
                          f"({duration(quiet)} since the last line)")  # fmt: skip

    def rate(self) -> float | None:
        """Units per second over this process's part of the loop (a resumed run counts from its start)."""
        elapsed = time.monotonic() - self.started
        ran = self.done - self.start
        return ran / elapsed if ran > 0 and elapsed > 0 else None

    def line(self, metrics: dict[str, Any]) -> str:
        rate = self.rate()
        eta = (self.total - self.done) / rate if rate else None
        shown = " ".join(f"{k} {rounded(v)}" for k, v in metrics.items())
        units = self.unit + ("es" if self.unit.endswith(("s", "sh", "ch", "x")) else "s")
        speed = f"{rate:.3g} {units}/s" if rate else f"- {units}/s"
        return " ".join(
            p
            for p in (
                f"{self.label} {self.unit} {self.done}/{self.total}",
                shown,
                speed,
                f"eta {duration(eta)}",
            )
            if p
        )

    def step(self, n: int = 1, **metrics: Any) -> None:
        """Advance `n` units; log the rounded line when it is due (first and last unit, every line_every_s).
        The bar shows the metrics of the step it is drawn at."""
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        due = self.lines == 0 or self.done >= self.total or now - self.last_line >= self.line_every_s
        redraw = time.time() - self.bar.last_print_t >= self.bar.mininterval  # tqdm's own clock and test
        if metrics and (due or redraw):  # formatted only when shown: a metric may be a device tensor (a sync)
            self.bar.set_postfix({k: rounded(v) for k, v in metrics.items()}, refresh=False)
        self.bar.update(n)
        if due:
            self.bar.refresh()
            self._log(self.line(metrics))
            self.lines += 1

    def _log(self, message: str) -> None:
        """A log line on its own line (after the bar's carriage-return text; the bar redraws below it)."""
        self.bar.fp.write("\n")
        log.info("%s", message)
        self.last_line = time.monotonic()

    def close(self) -> None:
        self._closed.set()
        self.bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def progress(
    items: Iterable[T], total: int, label: str, unit: str = "batch", enabled: bool = True
) -> Iterator[T]:
    """`items` unchanged, with a Progress advanced after each one (scoring and decoding batch loops)."""
    with Progress(total, label, unit=unit, enabled=enabled) as bar:
        for item in items:
            yield item
            bar.step()
