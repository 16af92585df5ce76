"""Where a GRPO step's time goes: common/torch_runtime/phases.PhaseClock and the per-phase seconds and shares the
trainer logs in every metrics row (metric_names.PHASE_KEYS)."""

from __future__ import annotations

import time

import pytest
from test_grpo_trainer import _trainer

from prefpipe.common.torch_runtime.phases import PhaseClock
from prefpipe.grpo.metric_names import PHASE_KEYS, PHASE_PREFIX, PHASES, STEP_TIME


def test_the_clock_adds_a_phases_visits_and_the_shares_sum_to_one():
    clock = PhaseClock("cpu", "p/")
    t0 = time.perf_counter()
    for _ in range(2):
        with clock.phase("a"):
            time.sleep(0.02)
    with clock.phase("b"):
        time.sleep(0.01)
    time.sleep(0.01)  # claimed by no phase
    step = time.perf_counter() - t0
    m = clock.metrics(step)
    assert m["p/a_s"] == pytest.approx(clock.seconds["a"]) and m["p/a_s"] >= 0.04
    assert m["p/b_s"] >= 0.01 and m["p/other_s"] >= 0.01
    assert m["p/a_s"] + m["p/b_s"] + m["p/other_s"] == pytest.approx(step)
    assert sum(v for k, v in m.items() if k.endswith("_share")) == pytest.approx(1.0)


def test_a_phase_that_raises_is_still_billed():
    clock = PhaseClock("cpu")
    with pytest.raises(ValueError), clock.phase("x"):
        time.sleep(0.01)
        raise ValueError
    assert clock.seconds["x"] >= 0.01


def test_other_is_never_negative():
    clock = PhaseClock("cpu")
    clock.seconds = {"a": 2.0}
    assert clock.metrics(1.0)["phase/other_s"] == 0.0


def test_every_grpo_step_logs_each_phase_and_the_shares_cover_the_step(tmp_path):
    # beta 0.04 and num_iterations 2: reference and old log-probs are computed, so every phase has work
    trainer = _trainer(tmp_path, steps=2)
    trainer.train()
    assert set(PHASES) == {"rollout", "reward", "logprobs", "update", "sync", "other"}
    for row in trainer.metric_rows:
        assert set(PHASE_KEYS) <= set(row)
        seconds = {p: row[f"{PHASE_PREFIX}{p}_s"] for p in PHASES}
        assert all(v >= 0 for v in seconds.values())
        for p in ("rollout", "reward", "logprobs", "update"):
            assert seconds[p] > 0, p
        assert sum(seconds.values()) == pytest.approx(row[STEP_TIME], rel=1e-6)
        shares = [row[f"{PHASE_PREFIX}{p}_share"] for p in PHASES]
        assert sum(shares) == pytest.approx(1.0, rel=1e-6)
