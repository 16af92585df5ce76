"""Logging set-up shared by stage entry points (stderr, which the Snakemake rule sends to its log file)."""

from __future__ import annotations

import logging
import sys

from prefpipe.common.secrets import redact_text

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RedactingFormatter(logging.Formatter):
    """Every log line (and traceback) with credential-shaped values redacted (prefpipe.common.secrets): the
    rule sends stderr to its log file under results/logs/, which is shared like any result."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))


class _CurrentStderr(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is at the time of each record. A handler bound to the stderr of the
    moment breaks when that stream is swapped and closed (pytest's capture does exactly that), which is what
    `basicConfig(force=True)` inside a test process used to produce ("I/O operation on closed file")."""

    @property  # type: ignore[override]
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def setup_logging(level: str = "INFO") -> None:
    """Idempotent: one stderr handler on the root logger, whoever calls it and however often."""
    root = logging.getLogger()
    if not any(isinstance(h, _CurrentStderr) for h in root.handlers):
        handler = _CurrentStderr()
        handler.setFormatter(RedactingFormatter(FORMAT))
        root.addHandler(handler)
    root.setLevel(level)
