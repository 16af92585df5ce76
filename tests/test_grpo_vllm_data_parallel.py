"""Data-parallel GRPO with one vLLM engine per process: two gloo processes (torch.distributed.run, as `accelerate
launch` starts them), each engine joined to their process group by vLLM's `external_launcher`, on the tiny
SmolLM2-architecture model of tests/test_grpo_vllm.py.

What is checked: every rank's engine passes the weight-sync probe at the start and after every step; the ranks'
weights stay identical; loss and metrics are finite; a sync skipped on one rank stops EVERY rank at that step
(naming the rank), with a LoRA policy whose earlier syncs passed on both ranks. What equality holds: vLLM samples
with its own generator, not prefpipe's uniforms, so the vLLM run is not the plain engine's; but each request's seed
is keyed by its row of the whole step, so two processes draw the same tokens as one process (equal rewards and
token counts) and take its steps up to float rounding (the gradient sum's order).

Needs vLLM (its own virtualenv, scripts/vllm_env.sh): `.venv-vllm/bin/python -m pytest -q
tests/test_grpo_vllm_data_parallel.py`; skipped, saying why, where vllm does not import."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from support.vllm_import import require_vllm

require_vllm(in_process=False)  # the launched workers import it

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from support.torchrun import finish, start  # noqa: E402

WORKER = Path(__file__).parent / "support" / "grpo_vllm_dp_worker.py"
STEPS = 3
FP32_GAP = 1e-4  # engine vs trainer log-probs, both fp32 on CPU (tests/test_grpo_vllm.py)


def _results(out: Path, processes: int) -> list[dict]:
    return [json.loads((out / f"rank{r}" / "result.json").read_text()) for r in range(processes)]


def _weights(out: Path, rank: int) -> dict[str, torch.Tensor]:
    return load_file(out / f"rank{rank}" / "weights.safetensors")


def _same_weights_on_both_ranks(out: Path) -> dict[str, torch.Tensor]:
    """Rank 0's weights, after checking rank 1 holds exactly the same (one all-reduced gradient, one step)."""
    w0, w1 = _weights(out, 0), _weights(out, 1)
    assert w0.keys() == w1.keys()
    for name in w0:
        assert torch.equal(w0[name], w1[name]), name
    return w0


def _check_synced(result: dict, syncs: int) -> None:
    """Every rank's probe gap below the tolerance at each sync (the start, then after each step)."""
    assert len(result["probe_gaps"]) == syncs
    for gaps in result["probe_gaps"]:
        assert len(gaps) == result["world_size"] and max(gaps) < FP32_GAP, gaps
    for row in result["rows"]:
        assert row["engine_probe_gap"] == max(result["probe_gaps"][row["step"] + 1])
        assert row["engine_probe_step_change"] > 100 * row["engine_probe_gap"] + 1e-3  # a miss would show
        assert row["engine_logprob_gap_max"] < FP32_GAP and abs(row["is_weight_mean"] - 1.0) < 1e-3
        assert all(math.isfinite(v) for v in row.values() if isinstance(v, float)), row


def test_an_engine_per_process_stays_synced_and_takes_the_one_process_steps(tmp_path):
    two, one = tmp_path / "two", tmp_path / "one"
    runs = [  # side by side: the test's wall time is the slower launch's
        start(WORKER, 2, tmp_path / "two.log", str(two), json.dumps({"steps": STEPS})),
        start(WORKER, 1, tmp_path / "one.log", str(one), json.dumps({"steps": STEPS})),
    ]
    for launch in runs:
        finish(launch)
    results, (single,) = _results(two, 2), _results(one, 1)
    for result in results:
        assert result["error"] is None and result["world_size"] == 2
        assert [r["step"] for r in result["rows"]] == list(range(STEPS))
        _check_synced(result, STEPS + 1)
        print(json.dumps([{k: r[k] for k in ("step", "loss", "engine_probe_gap")} for r in result["rows"]]))
    w_two, w_one = _same_weights_on_both_ranks(two), _weights(one, 0)
    assert w_two.keys() == w_one.keys()
    for (
        name,
        value,
    ) in w_two.items():  # the bound of tests/test_grpo_data_parallel.py (Adam amplifies rounding)
        assert torch.allclose(value, w_one[name], atol=2e-4, rtol=1e-4), name
    for a, b in zip(single["rows"], results[0]["rows"], strict=True):
        assert (
            a["reward_mean"] == b["reward_mean"] and a["num_loss_tokens"] == b["num_loss_tokens"]
        )  # same tokens
        for key in ("loss", "grad_norm", "entropy", "reward_std"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-7), (a["step"], key)


def test_a_sync_skipped_on_one_rank_stops_every_rank_at_that_step(tmp_path):
    over = {"lora": True, "steps": STEPS, "skip_push_at": 1, "skip_rank": 1}
    finish(start(WORKER, 2, tmp_path / "launch.log", str(tmp_path), json.dumps(over)))
    for result in _results(tmp_path, 2):
        print("caught:", result["error"])
        assert result["error"] is not None
        assert result["error"].startswith("step 1: the vLLM engine on process 1 of 2 does not compute")
        assert [r["step"] for r in result["rows"]] == [0]  # step 0 recorded; step 1's row never was
        _check_synced(result, 2)  # the start and step 0, LoRA merged
    _same_weights_on_both_ranks(tmp_path)
