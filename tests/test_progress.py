"""The log progress of long loops (prefpipe.common.progress): a tqdm bar with rate and ETA on stderr and a
rounded per-step line, due on the first and last step and every LINE_EVERY_S seconds in between."""

from __future__ import annotations

import logging
import time

import pytest

from prefpipe.common import progress as progress_module
from prefpipe.common.progress import Progress, duration, progress, rounded


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", fake)
    monkeypatch.setattr(progress_module, "HEARTBEAT_S", 0.0)  # the fake clock's jumps are not silences
    return fake


def test_rounding_and_durations():
    assert rounded(0.432149) == "0.4321"
    assert rounded(0.0019123) == "0.001912"
    assert rounded(12) == "12" and rounded(None) == "-" and rounded(True) == "True"
    assert [duration(s) for s in (4.4, 59.6, 88, 3600 + 180, None)] == ["4s", "1m00s", "1m28s", "1h03m", "?"]


def test_lines_on_first_last_and_every_interval(clock, caplog, capsys):
    bar = Progress(100, "reward training", line_every_s=5.0)
    with caplog.at_level(logging.INFO, logger="prefpipe.progress"), bar:
        for step in range(100):
            clock.now += 0.5  # 2 steps/s: a line every 10 steps
            bar.step(loss=1 / (step + 1), lr=1.9e-3)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "reward training step 1/100 loss 1 lr 0.0019 2 steps/s eta 50s"
    assert lines[-1] == "reward training step 100/100 loss 0.01 lr 0.0019 2 steps/s eta 0s"
    steps = [int(line.split()[3].split("/")[0]) for line in lines]
    assert steps == [1, 11, 21, 31, 41, 51, 61, 71, 81, 91, 100]
    err = capsys.readouterr().err
    assert "100/100" in err and "step/s" in err and "<" in err  # tqdm's bar: count, rate, elapsed<remaining


def test_resumed_loop_counts_rate_and_eta_from_its_start(clock, caplog):
    bar = Progress(10, "GRPO", start=6)
    with caplog.at_level(logging.INFO, logger="prefpipe.progress"), bar:
        clock.now += 4.0
        bar.step(reward=0.5)
    assert caplog.records[0].getMessage() == "GRPO step 7/10 reward 0.5 0.25 steps/s eta 12s"


def test_disabled_progress_shows_nothing(clock, caplog, capsys):
    with caplog.at_level(logging.INFO, logger="prefpipe.progress"):
        items = list(progress(range(3), 3, "scoring", enabled=False))
        with Progress(0, "head fit before") as empty:  # a head fit of 0 steps
            assert not empty.enabled
    assert items == [0, 1, 2] and not caplog.records and capsys.readouterr().err == ""


def test_batch_loop_yields_every_item_and_counts_batches(clock, caplog):
    with caplog.at_level(logging.INFO, logger="prefpipe.progress"):
        for _ in progress(range(4), 4, "scoring"):
            clock.now += 1.0
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["scoring batch 1/4 1 batches/s eta 3s", "scoring batch 4/4 1 batches/s eta 0s"]


def test_a_long_step_gets_still_on_lines_until_it_ends(caplog):
    """Real time: a step longer than the heartbeat gets "still on" lines from the background thread, none
    after close(), so a watched log is never silent for longer than the heartbeat."""
    caplog.set_level(logging.INFO, logger="prefpipe.progress")
    with Progress(3, "slow", heartbeat_s=0.2) as bar:
        bar.step(loss=1.0)
        time.sleep(0.7)  # one slow step
        bar.step(loss=0.5)
        bar.step(loss=0.25)
    still = [r.getMessage() for r in caplog.records if "still on" in r.getMessage()]
    assert still and all(m.startswith("slow still on step 2/3") for m in still), still
    n = len(caplog.records)
    time.sleep(0.4)
    assert len(caplog.records) == n, "the heartbeat kept logging after close()"
