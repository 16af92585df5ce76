"""The two stage entry points (train_grpo, eval_policy) end to end on tiny real folders, plus the Wilson
interval against an independent numerical inversion of the score test."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from support.models import save_tiny_policy
from support.rows import rl_rows
from support.settings import grpo_settings, reward_settings, stage_json
from support.stages import run_main

from prefpipe import eval_policy, train_grpo
from prefpipe.common.config import ConfigError
from prefpipe.common.io import read_jsonl, write_jsonl
from prefpipe.common.stats import wilson_interval
from prefpipe.grpo.training import stage as grpo_train
from prefpipe.settings.merge import deep_merge


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("grpo_stage")
    policy = save_tiny_policy(root / "base", seed=2)
    data = root / "data"
    rows = rl_rows()
    write_jsonl(
        data / "rl_prompts_train.jsonl", rows + [{"id": "bad", "prompt": "", "answer": "1", "kind": "add"}]
    )
    write_jsonl(data / "rl_prompts_heldout.jsonl", rows)

    from prefpipe.reward.model import build_reward_model, save_reward_model

    torch.manual_seed(0)
    rm = build_reward_model(str(policy), reward_settings({"head": {"dim": 4}, "data": {"max_length": 64}}))
    save_reward_model(rm, root / "rm")
    return {"root": root, "policy": policy, "data": data, "rm": root / "rm"}


# What every run here shares (merged over grpo.defaults), then each run's own keys.
SHORT = {
    "steps": 3,
    "prompts_per_step": 2,
    "num_generations": 4,
    "max_new_tokens": 6,
    "learning_rate": 1e-2,
    "sample_every": 1,
    "checkpoint_every": 2,
    # a random tiny policy rarely ends a completion within max_new_tokens: train on truncated ones
    "mask_truncated_completions": False,
    "rewards": [{"type": "verifier", "weight": 1.0}],
}
RUNS = {
    "gpm": {
        "reward_model": "gpm",
        "beta": 0.04,
        "rewards": [{"type": "reward_model", "weight": 1.0}, {"type": "verifier", "weight": 1.0}],
    },
    "lora": {"lora": {"enabled": True, "r": 4, "alpha": 8}, "beta": 0.04},
}


def _run(name: str, **changes):
    """Run `name` as the workflow builds it: grpo.defaults, SHORT, RUNS[name] and `changes` merged."""
    return grpo_settings(deep_merge({**SHORT, **RUNS.get(name, {})}, changes), run=name, seed=0)


def test_train_grpo_stage_with_a_gpm_reward_model_then_eval(folders):
    out = folders["root"] / "grpo" / "gpm"
    code, _ = run_main(
        train_grpo.main,
        stage_json(_run("gpm")),
        data=folders["data"],
        policy=folders["policy"],
        reward_model=folders["rm"],
        out=out,
    )
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"] == "gpm" and summary["steps"] == 3 and summary["all_finite"]
    assert summary["skipped_rows"] == {"empty_prompt": 1}
    assert summary["reference"] == "frozen_copy"
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1, 2]
    assert {"reward/reward_model_mean", "reward/verifier_mean", "kl_k3_mean"} <= set(metrics[0])
    assert len(read_jsonl(out / "samples.jsonl")) == 3 * 2
    assert not (out / "checkpoint").exists()  # removed after a finished run (keep_checkpoint false)
    with safe_open(str(out / "policy" / "model.safetensors"), "pt") as f:
        assert len(list(f.keys())) > 0
    assert json.loads((out / "config.json").read_text())["config"]["reward_model"] == "gpm"

    ev = folders["root"] / "policy_eval" / "gpm"
    code, _ = run_main(
        eval_policy.main,
        stage_json(_run("gpm", eval={"max_new_tokens": 6, "batch_size": 4})),
        data=folders["data"],
        base=folders["policy"],
        policy=out / "policy",
        reward_model=folders["rm"],
        out=ev,
    )
    assert code == 0
    s = json.loads((ev / "summary.json").read_text())
    assert s["n_prompts"] == 6
    for side in ("base", "trained"):
        lo, hi = s[side]["accuracy_ci95"]
        assert lo <= s[side]["accuracy"] <= hi
    rm = s["reward_model"]
    assert rm["win_rate"] + rm["tie_rate"] + rm["loss_rate"] == pytest.approx(1.0)
    assert s["kl_to_base"]["tokens"] > 0 and math.isfinite(s["kl_to_base"]["k3_token_mean"])
    assert s["kl_to_base"]["k3_token_mean"] >= 0
    assert len(read_jsonl(ev / "per_example.jsonl")) == 6


def test_eval_of_a_policy_against_itself_has_zero_kl_and_equal_accuracy(folders):
    ev = folders["root"] / "policy_eval" / "self"
    settings = grpo_settings({"eval": {"max_new_tokens": 5}}, seed=1)
    code, _ = run_main(
        eval_policy.main,
        stage_json(settings),
        data=folders["data"],
        base=folders["policy"],
        policy=folders["policy"],
        out=ev,
    )
    assert code == 0
    s = json.loads((ev / "summary.json").read_text())
    assert s["accuracy_delta"] == 0 and s["intervals_overlap"]
    assert s["kl_to_base"]["k1_token_mean"] == pytest.approx(0.0, abs=1e-6)
    assert s["kl_to_base"]["k3_token_mean"] == pytest.approx(0.0, abs=1e-6)


def test_lora_run_saves_a_merged_policy(folders):
    out = folders["root"] / "grpo" / "lora"
    code, _ = run_main(
        train_grpo.main, stage_json(_run("lora")), data=folders["data"], policy=folders["policy"], out=out
    )
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["lora_state"] == "fresh" and summary["reference"] == "disable_adapter"
    assert summary["trainable_parameters"] < summary["total_parameters"] / 2
    assert not (out / "policy" / "adapter_config.json").exists()
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(out / "policy")
    assert not any("lora" in n for n, _ in merged.named_parameters())


def test_reward_model_run_without_a_reward_model_is_a_config_error(folders, caplog):
    out = folders["root"] / "grpo" / "no_rm"
    args = argparse.Namespace(data=folders["data"], policy=folders["policy"], reward_model=None, out=out)
    with pytest.raises(ConfigError, match="no --reward-model"):
        grpo_train.run(_run("gpm"), args)
    code, errors = run_main(
        train_grpo.main,
        stage_json(_run("gpm")),
        caplog,
        data=folders["data"],
        policy=folders["policy"],
        out=out,
    )
    assert code == 2 and len(errors) == 1 and "no --reward-model" in errors[0]
    assert not out.exists()


def _wilson_by_bisection(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Independent: the interval is {p0 : |k/n - p0| <= z sqrt(p0 (1 - p0) / n)}; find its ends numerically."""
    phat = k / n

    def inside(p0: float) -> bool:
        return abs(phat - p0) <= z * math.sqrt(p0 * (1 - p0) / n)

    def edge(a: float, b: float) -> float:  # a inside, b outside (or the boundary)
        for _ in range(200):
            mid = (a + b) / 2
            a, b = (mid, b) if inside(mid) else (a, mid)
        return (a + b) / 2

    centre = phat if 0 < k < n else (1e-12 if k == 0 else 1 - 1e-12)
    return (0.0 if k == 0 else edge(centre, 0.0), 1.0 if k == n else edge(centre, 1.0))


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (37, 200), (200, 200), (1, 2)])
def test_wilson_interval_matches_numerical_inversion(k, n):
    assert wilson_interval(k, n) == pytest.approx(_wilson_by_bisection(k, n), abs=1e-9)


def test_reference_opponent_builds_greedy_reference_completions(folders, tmp_path):
    from prefpipe.generation.rl_prompts import load_rl_prompts
    from prefpipe.grpo.policy_io import load_policy
    from prefpipe.grpo.rewards import build_rewards
    from prefpipe.grpo.training.trainer import GRPOTrainer
    from prefpipe.reward.model import load_reward_model

    cfg = grpo_settings(
        {
            "steps": 2,
            "prompts_per_step": 2,
            "num_generations": 2,
            "max_new_tokens": 4,
            "beta": 0.0,
            "rewards": [{"type": "reward_model", "opponent": "reference"}],
            "reward_model": "gpm",
            "sample_every": 0,
            "checkpoint_every": 0,
        }
    )
    policy, tok, state = load_policy(folders["policy"], cfg.lora, cfg.dtype, cfg.device)
    rows, _ = load_rl_prompts(folders["data"] / "rl_prompts_train.jsonl")
    rewards = build_rewards(cfg.rewards, load_reward_model(folders["rm"]))
    trainer = GRPOTrainer(cfg, policy, tok, state, rows, rewards, tmp_path)
    assert trainer.reference is not None  # beta is 0, but the opponent needs pi_ref's completions
    trainer.train()
    assert len(trainer.ref_cache) == 4  # one greedy completion per distinct prompt seen (2 steps x 2)
    assert trainer.metric_rows[0].get("kl_k3_mean") is None  # ... and still no KL term at beta 0


def test_workflow_style_run_config_drives_both_stages(folders, caplog):
    """The workflow passes one run's settings (with `run` and `eval`) to train_grpo AND eval_policy."""
    config = stage_json(_run("plain", steps=2, eval={"batch_size": 3, "primary": "sampled"}))
    out = folders["root"] / "grpo" / "wf"
    paths = {"data": folders["data"], "policy": folders["policy"]}
    assert run_main(train_grpo.main, config, **paths, out=out)[0] == 0
    assert json.loads((out / "summary.json").read_text())["run"] == "plain"
    ev = folders["root"] / "policy_eval" / "wf"
    code, _ = run_main(eval_policy.main, config, data=folders["data"], base=folders["policy"],
                       policy=out / "policy", out=ev)  # fmt: skip
    assert code == 0
    s = json.loads((ev / "summary.json").read_text())
    assert s["decoding"] == "sampled" and set(s["decodings"]) == {"greedy", "sampled"}
    bad = {**json.loads(config), "eval": {**json.loads(config)["eval"], "batchsize": 3}}
    before = (out / "summary.json").read_text()
    code, errors = run_main(train_grpo.main, json.dumps(bad), caplog, **paths, out=out)
    assert code == 2 and len(errors) == 1
    assert "config.eval: Additional properties are not allowed ('batchsize' was unexpected)" in errors[0]
    assert (out / "summary.json").read_text() == before  # refused before anything was written


def test_logprob_chunk_tokens_reaches_the_trainer_and_keeps_the_first_update(folders, monkeypatch):
    """grpo.logprob_chunk_tokens: the stage's trainer sets it on the policy (before it builds its reference), and
    the first step's loss (same weights, same rollout) equals the plain run's to float tolerance."""
    from prefpipe.grpo.logprobs import logprob_chunk_tokens

    seen = []

    class Spy(grpo_train.GRPOTrainer):
        def __init__(self, settings, policy, *args, **kwargs):
            super().__init__(settings, policy, *args, **kwargs)
            seen.append(logprob_chunk_tokens(policy))

    monkeypatch.setattr(grpo_train, "GRPOTrainer", Spy)
    first_loss = []
    for chunk in (0, 5):
        out = folders["root"] / "grpo" / f"chunk{chunk}"
        settings = _run("lora", steps=1, logprob_chunk_tokens=chunk)
        code, _ = run_main(
            train_grpo.main, stage_json(settings), data=folders["data"], policy=folders["policy"], out=out
        )
        assert code == 0
        first_loss.append(read_jsonl(out / "metrics.jsonl")[0]["loss"])
    assert seen == [0, 5]
    assert abs(first_loss[0] - first_loss[1]) <= 1e-6
