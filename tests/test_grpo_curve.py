"""The held-out learning curve (grpo/policy_eval/curve.py) and the validation split (grpo/splits.py) on tiny real folders:
the curve has a point at the expected steps and its last point equals a separate eval_policy run on the saved
policy; the curve survives a resume; validation prompts are never trained on and are the same in every order."""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path

import pytest
from support.curve_runs import EVAL, ROWS, SHORT, evaluate, train, write_inputs
from support.models import chat_tokenizer, tiny_llama
from support.settings import grpo_settings

from prefpipe.common.config import ConfigError
from prefpipe.common.io import read_jsonl
from prefpipe.grpo.policy_eval.curve import CURVE_FILE, curve_steps
from prefpipe.grpo.rewards import build_rewards
from prefpipe.grpo.splits import evaluation_rows, split_validation, training_rows
from prefpipe.grpo.training.trainer import GRPOTrainer, Preempted


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    return write_inputs(tmp_path_factory.mktemp("grpo_curve"))


@pytest.mark.parametrize(
    ("every", "total", "expected"),
    [(2, 5, [0, 2, 4, 5]), (5, 5, [0, 5]), (1, 3, [0, 1, 2, 3]), (0, 4, []), (10, 3, [0, 3])],
)
def test_curve_steps(every, total, expected):
    assert curve_steps(every, total) == expected


def _train(folders, out: Path, **changes) -> dict:
    train(folders, out, **changes)
    return json.loads((out / "summary.json").read_text())


def test_curve_points_and_last_point_equal_a_separate_eval(folders):
    out = folders["root"] / "grpo" / "curve"
    summary = _train(folders, out)
    curve = read_jsonl(out / CURVE_FILE)
    assert [p["step"] for p in curve] == [0, 2, 4, 5]
    assert summary["curve"] == {"file": CURVE_FILE, "points": 4}
    assert all(p["n"] == 5 and p["split"] == "heldout" for p in curve)
    ev = folders["root"] / "policy_eval" / "curve"
    evaluate(folders, out / "policy", ev, max_prompts=5)
    decodings = json.loads((ev / "summary.json").read_text())["decodings"]
    first, last = curve[0], curve[-1]
    for decoding in ("greedy", "sampled"):
        for point, side in ((first, "base"), (last, "trained")):
            block = decodings[decoding][side]
            assert point[f"{decoding}_correct"] == block["correct"], (decoding, side)
            assert point[f"{decoding}_mean_length"] == pytest.approx(block["mean_length"])
            assert point[f"{decoding}_truncated_ratio"] == pytest.approx(block["truncated_ratio"])
    examples = read_jsonl(ev / "per_example.jsonl")
    # the point names the prompts it got right: eval_policy's, per prompt
    for decoding in ("greedy", "sampled"):
        right = {r["id"] for r in examples if r[f"trained_correct_{decoding}"]}
        assert set(last[f"{decoding}_correct_ids"]) == right
        assert len(last[f"{decoding}_correct_ids"]) == last[f"{decoding}_correct"]
    for decoding, block in decodings.items():  # the paired block: per-prompt grades of both policies
        t = [r[f"trained_correct_{decoding}"] for r in examples]
        b = [r[f"base_correct_{decoding}"] for r in examples]
        pair = block["paired"]
        assert pair["delta"] == pytest.approx(block["trained"]["accuracy"] - block["base"]["accuracy"])
        assert pair["only_a"] == sum(x and not y for x, y in zip(t, b, strict=True))
        assert pair["only_b"] == sum(y and not x for x, y in zip(t, b, strict=True))
        assert pair["ci"][0] <= pair["delta"] <= pair["ci"][1] and pair["n"] == 5
    # the comparison is not vacuous: some point has a right and a wrong answer, and the policy moved
    assert any(0 < p["sampled_correct"] < p["n"] for p in curve)
    assert any(p["greedy_correct"] != first["greedy_correct"] for p in curve[1:])


def test_curve_off_writes_an_empty_file(folders):
    out = folders["root"] / "grpo" / "off"
    summary = _train(folders, out, steps=2, eval={**EVAL, "curve_every": 0})
    assert read_jsonl(out / CURVE_FILE) == [] and summary["curve"] is None


def _trainer(out: Path) -> GRPOTrainer:
    tok = chat_tokenizer()
    cfg = grpo_settings(SHORT, seed=0)
    rewards = build_rewards(cfg.rewards, None)
    return GRPOTrainer(cfg, tiny_llama(tok, seed=3), tok, "none", ROWS, rewards, out, curve_rows=ROWS[:5])


def _untimed(points: list[dict]) -> list[dict]:
    return [{k: v for k, v in p.items() if k != "eval_time"} for p in points]


def test_sigterm_resume_keeps_the_curve_of_an_uninterrupted_run(tmp_path):
    full = _trainer(tmp_path / "full")
    full.train()

    def stop_at_step_2(step, row):
        if step == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(Preempted):
        _trainer(tmp_path / "resumed").train(on_step_end=stop_at_step_2)
    assert [p["step"] for p in read_jsonl(tmp_path / "resumed" / CURVE_FILE)] == [0, 2]
    _trainer(tmp_path / "resumed").train()
    resumed = read_jsonl(tmp_path / "resumed" / CURVE_FILE)
    assert [p["step"] for p in resumed] == [0, 2, 4, 5]
    assert _untimed(resumed) == _untimed(read_jsonl(tmp_path / "full" / CURVE_FILE))


def test_validation_split_is_order_free_disjoint_and_never_trained_on(folders, tmp_path):
    shuffled = ROWS[:]
    random.Random(1).shuffle(shuffled)
    train_a, val_a = split_validation(ROWS, 3)
    train_b, val_b = split_validation(shuffled, 3)
    assert {r["id"] for r in val_a} == {r["id"] for r in val_b} and len(val_a) == 3
    assert not {r["id"] for r in val_a} & {r["id"] for r in train_a}
    assert len(train_a) + len(val_a) == len(ROWS)
    trained_on, _ = training_rows(folders["data"], 3)
    held, _ = evaluation_rows(folders["data"], "validation", 3, None)
    assert [r["id"] for r in held] == [r["id"] for r in val_a]
    assert [r["id"] for r in trained_on] == [r["id"] for r in train_a]
    assert [r["id"] for r in evaluation_rows(folders["data"], "heldout", 3, 4)[0]] == ["p9", "p8", "p7", "p6"]
    with pytest.raises(ConfigError, match="validation_prompts"):
        evaluation_rows(folders["data"], "validation", 0, None)
    with pytest.raises(ConfigError, match="leaves no training prompt"):
        split_validation(ROWS, len(ROWS))


def test_validation_run_samples_only_training_prompts(folders):
    out = folders["root"] / "grpo" / "val"
    _train(folders, out, steps=3, validation_prompts=4, sample_every=1, eval={**EVAL, "split": "validation"})
    held = {r["id"] for r in split_validation(ROWS, 4)[1]}
    sampled = {r["id"] for r in read_jsonl(out / "samples.jsonl")}
    assert sampled and not sampled & held
    assert all(p["split"] == "validation" and p["n"] == 4 for p in read_jsonl(out / CURVE_FILE))
