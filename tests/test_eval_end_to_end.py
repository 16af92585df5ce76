"""End to end: train a tiny reward model of each head type, save it, evaluate it offline on real rows via the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file
from support.models import save_scratch_base
from support.settings import eval_settings, reward_settings, stage_json
from support.stages import run_main

from prefpipe.common.io import read_jsonl, write_jsonl
from prefpipe.eval_rewardbench import main
from prefpipe.evaluation.pair_scoring import score_pairs
from prefpipe.reward.model import (
    FINETUNED_HEAD_WEIGHTS,
    build_reward_model,
    load_reward_model,
    save_reward_model,
)
from prefpipe.train_reward import main as train_reward_main

TINY_LLAMA = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "max_position_embeddings": 128,
}
HEADS = {
    "bt": {"type": "bt", "tau": 0.1},
    "gpm": {"type": "gpm", "dim": 4, "tau": 0.1},
    "bgpm": {"type": "bgpm", "dim": 4, "tau": 0.1, "bayes": {"kl_warmup_steps": 0, "max_kl_weight": 1e-3}},
}


@pytest.fixture(scope="module")
def real_rows(shared_data):
    return read_jsonl(shared_data / "rewardbench_real_subsets.jsonl")


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory, real_rows):
    """A tokenizer trained on real rows and a random tiny Llama, saved as an HF folder."""
    texts = [r[k] for r in real_rows[::3] for k in ("prompt", "chosen", "rejected")]
    return save_scratch_base(tmp_path_factory.mktemp("base"), texts, vocab_size=400, seed=0, **TINY_LLAMA)


def _train(base, head_cfg, rows, steps=12, batch=16):
    """A few AdamW steps of the reward helper's model and loss; returns (model, first loss, last loss)."""
    settings = reward_settings(
        {"head": head_cfg, "data": {"max_length": 96}}, variant=head_cfg["type"], seed=0
    )
    torch.manual_seed(0)
    rm = build_reward_model(str(base), settings)
    rm.train()
    opt = torch.optim.AdamW(rm.parameters(), lr=3e-3)
    losses = []
    for step in range(steps):
        chunk = [rows[(step * batch + i) % len(rows)] for i in range(batch)]
        prompts = [r["prompt"] for r in chunk]
        enc = rm.encoder
        out_c = rm(**enc.pad(enc.tokenize_many(prompts, [r["chosen"] for r in chunk])))
        out_r = rm(**enc.pad(enc.tokenize_many(prompts, [r["rejected"] for r in chunk])))
        parts = rm.head.loss(out_c, out_r, step)
        opt.zero_grad()
        parts.loss.backward()
        opt.step()
        losses.append(float(parts.preference_loss.detach()))
    rm.eval()
    return rm, losses


@pytest.mark.parametrize("head", ["bt", "gpm", "bgpm"])
def test_trained_tiny_model_evaluates_offline(tmp_path, tiny_base, real_rows, shared_data, head):
    train_rows = real_rows[:64]
    rm, losses = _train(tiny_base, HEADS[head], train_rows)
    assert all(math.isfinite(x) for x in losses)
    model_dir = save_reward_model(rm, tmp_path / "model")

    benchmarks = {"synthetic": None, "real": str(shared_data / "rewardbench_real_subsets.jsonl")}
    cfg = eval_settings({"benchmarks": benchmarks, "batch_size": 16, "mc_samples": 10000}, seed=0)
    out = tmp_path / "eval"
    assert run_main(main, stage_json(cfg), model=model_dir, data=tmp_path, out=out)[0] == 0

    summary = json.loads((out / "summary.json").read_text())
    frame = pd.read_parquet(out / "real" / "per_example.parquet")
    assert summary["n_pairs"] == len(frame) == 663
    assert summary["head_type"] == head and summary["tau"] == pytest.approx(0.1)
    assert np.isfinite(frame["score_chosen_minus_rejected"]).all()
    assert frame["correct"].tolist() == (frame["score_chosen_minus_rejected"] > 0).tolist()
    # The official map on the real file: LLMBar -> Chat Hard, XSTest -> Safety; the sources it does not hold
    # (MT-Bench, Chat, Reasoning) are listed, not flagged; overall is the mean of the two present.
    sections = summary["sections"]
    assert sections["chat_hard"]["n"] == 419 and sections["safety"]["n"] == 244
    assert sections["chat_hard"]["missing_subsets"] == [] and sections["chat_hard"]["absent_subsets"] == [
        "mt-bench-hard"
    ]
    assert set(sections) == {"chat_hard", "safety"} and summary["missing_sections"] == []
    assert summary["sections_not_in_benchmark"][:2] == ["chat", "reasoning"]
    assert summary["overall_sections"] == ["chat_hard", "safety"]
    assert summary["overall"] == pytest.approx(
        (sections["chat_hard"]["score"] + sections["safety"]["score"]) / 2
    )
    assert summary["data"]["rows_skipped"] == 0 and "pairs_per_second" not in summary
    timing = json.loads((out / "timing.json").read_text())  # speed figures live apart from the results
    assert timing["wall_time_s"] > 0 and timing["benchmarks"][summary["benchmark"]]["pairs_per_second"] > 0
    assert 0 <= summary["calibration"]["ece"] <= 0.5
    if head == "bgpm":
        assert (frame["variance"] > 0).all()
        check = summary["prob_mc_check"]
        assert check["samples"] == 10000
        assert check["max_abs_diff"] < 0.02 + 4 * check["max_mc_stderr"]
    else:
        assert frame["variance"].isna().all()

    # The saved-and-loaded model, scored with its own batching, gives the per-example scores.
    loaded = load_reward_model(model_dir)
    rows = read_jsonl(shared_data / "rewardbench_real_subsets.jsonl")[:48]
    prompts = [r["prompt"] for r in rows]
    score, _ = loaded.compare(
        loaded.encode(prompts, [r["chosen"] for r in rows], batch_size=7),
        loaded.encode(prompts, [r["rejected"] for r in rows], batch_size=7),
    )
    by_id = frame.set_index("id")["score_chosen_minus_rejected"]
    expected = by_id.loc[[str(r["id"]) for r in rows]].to_numpy()
    assert np.max(np.abs(score.double().numpy() - expected)) < 1e-5


@pytest.mark.parametrize("head", ["gpm", "bgpm"])
def test_scores_do_not_depend_on_batch_size(tmp_path, tiny_base, real_rows, head):
    rm, _ = _train(tiny_base, HEADS[head], real_rows[:32], steps=4)
    rm = load_reward_model(save_reward_model(rm, tmp_path / "model"))
    rows = real_rows[100:140]
    columns = ([r["prompt"] for r in rows], [r["chosen"] for r in rows], [r["rejected"] for r in rows])
    one = score_pairs(rm, *columns, batch_size=1)
    many = score_pairs(rm, *columns, batch_size=16)
    assert np.max(np.abs(one.score - many.score)) < 1e-5
    clear = np.abs(one.score) > 1e-5
    assert ((one.score > 0) == (many.score > 0))[clear].all()
    if head == "bgpm":
        assert np.max(np.abs(one.variance - many.variance)) < 1e-5


def test_reward_stage_then_eval_stage(tmp_path, tiny_base, real_rows, shared_data):
    """The two stage CLIs back to back: train_reward writes results/reward/<v>/model, eval reads it."""
    data = tmp_path / "data"
    write_jsonl(data / "pairs_train.jsonl", real_rows[:48])
    write_jsonl(data / "pairs_test.jsonl", real_rows[600:616])
    reward_cfg = reward_settings(
        {
            "head": HEADS["bgpm"],
            "data": {"max_length": 96},
            "train": {
                "steps": 6,
                "batch_size": 8,
                "micro_batch_size": 8,
                "learning_rate": 3e-3,
                "head_learning_rate": None,
                "warmup_steps": 0,
            },
            "eval": {"batch_size": 16, "train_pairs": 0, "test_pairs": True},
        },
        variant="bgpm",
        seed=0,
    )
    reward_out = tmp_path / "reward" / "bgpm"
    code, _ = run_main(train_reward_main, stage_json(reward_cfg), data=data, base=tiny_base, out=reward_out)
    assert code == 0

    eval_cfg = eval_settings({"mc_samples": 2000}, seed=0)
    assert {k: v.source for k, v in eval_cfg.eval.benchmarks.items()} == {"synthetic": "synthetic"}
    out = tmp_path / "eval" / "bgpm"
    assert run_main(main, stage_json(eval_cfg), model=reward_out / "model", data=data, out=out)[0] == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_pairs"] == 16 and summary["head_type"] == "bgpm"
    # The training stage's own sanity accuracy on the same test pairs agrees with the evaluation stage.
    sanity = json.loads((reward_out / "summary.json").read_text())["accuracy"]["test"]
    assert summary["pooled_accuracy"] == pytest.approx(sanity["overall"])

    # The head as fine-tuned (before the refit) is kept and scored on the same features: the same scores as
    # the saved model with that head swapped in, and on the training pairs the accuracy the trainer measured
    # just before the refit.
    reward_summary = json.loads((reward_out / "summary.json").read_text())
    frame = pd.read_parquet(out / "per_example.parquet")
    swapped = load_reward_model(reward_out / "model")
    swapped.head.load_state_dict(load_file(str(reward_out / "model" / FINETUNED_HEAD_WEIGHTS)))
    rows = read_jsonl(data / "pairs_test.jsonl")
    alone = score_pairs(swapped, *([r[k] for r in rows] for k in ("prompt", "chosen", "rejected")), 16)
    np.testing.assert_allclose(frame["score_as_finetuned"], alone.score, rtol=1e-5, atol=1e-6)
    assert not np.allclose(frame["score_as_finetuned"], frame["score_chosen_minus_rejected"])
    block = summary["extra_heads"]["as_finetuned"]
    assert block["pooled_accuracy"] == pytest.approx(float((alone.score > 0).mean()))
    train_rows = real_rows[:48]
    on_train = score_pairs(
        swapped, *([r[k] for r in train_rows] for k in ("prompt", "chosen", "rejected")), 16
    )
    assert float((on_train.score > 0).mean()) == pytest.approx(
        reward_summary["head_fit"]["after"]["accuracy_start"], abs=1 / 48 + 1e-9
    )
