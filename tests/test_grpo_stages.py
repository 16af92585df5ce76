"""The two stage entry points (train_grpo, eval_policy) end to end on tiny real folders, plus the Wilson
interval against an independent numerical inversion of the score test."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from test_grpo_tiny import reward_spec, tiny_llama, tiny_tokenizer

from prefpipe import eval_policy, train_grpo
from prefpipe.common.io import read_jsonl, write_jsonl
from prefpipe.grpo.policy_eval import wilson_interval

PROMPTS = [
    ("What is 2 plus 3?", "5", "add"),
    ("Say yes.", "yes", "repeat"),
    ("Say no.", "no", "repeat"),
    ("Repeat cat:", "cat", "repeat"),
    ("What is 7 plus 1?", "8", "add"),
    ("Answer with one word.", "yes", "repeat"),
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("grpo_stage")
    tok = tiny_tokenizer(chat_template=True)
    policy = root / "base"
    tiny_llama(tok, seed=2).save_pretrained(policy)
    tok.save_pretrained(policy)
    data = root / "data"
    rows = [{"id": f"p{i}", "prompt": p, "answer": a, "kind": k} for i, (p, a, k) in enumerate(PROMPTS)]
    write_jsonl(
        data / "rl_prompts_train.jsonl", rows + [{"id": "bad", "prompt": "", "answer": "1", "kind": "add"}]
    )
    write_jsonl(data / "rl_prompts_heldout.jsonl", rows)

    from prefpipe.reward.model import build_reward_model, save_reward_model
    from prefpipe.reward.settings import parse_settings

    torch.manual_seed(0)
    rm = build_reward_model(
        str(policy), parse_settings({"head": {"type": "gpm", "dim": 4}, "data": {"max_length": 64}})
    )
    save_reward_model(rm, root / "rm")
    return {"root": root, "policy": policy, "data": data, "rm": root / "rm"}


GRPO_SECTION = {
    "seed": 0,
    "defaults": {
        "steps": 3,
        "prompts_per_step": 2,
        "num_generations": 4,
        "max_new_tokens": 6,
        "learning_rate": 1e-2,
        "sample_every": 1,
        "checkpoint_every": 2,
        "rewards": [reward_spec("verifier")],
    },
    "runs": {
        "gpm": {
            "reward_model": "gpm",
            "beta": 0.04,
            "rewards": [reward_spec("reward_model"), reward_spec("verifier")],
        },
        "lora": {"lora": {"enabled": True, "r": 4, "alpha": 8}, "beta": 0.04},
    },
}


def test_train_grpo_stage_with_a_gpm_reward_model_then_eval(folders):
    out = folders["root"] / "grpo" / "gpm"
    code = train_grpo.main(
        [
            "--config",
            json.dumps(GRPO_SECTION),
            "--data",
            str(folders["data"]),
            "--policy",
            str(folders["policy"]),
            "--reward-model",
            str(folders["rm"]),
            "--out",
            str(out),
        ]
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
    code = eval_policy.main(
        [
            "--config",
            json.dumps({"seed": 0, "max_new_tokens": 6, "batch_size": 4}),
            "--data",
            str(folders["data"]),
            "--base",
            str(folders["policy"]),
            "--policy",
            str(out / "policy"),
            "--reward-model",
            str(folders["rm"]),
            "--out",
            str(ev),
        ]
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
    eval_policy.main(
        [
            "--config",
            json.dumps({"seed": 1, "max_new_tokens": 5}),
            "--data",
            str(folders["data"]),
            "--base",
            str(folders["policy"]),
            "--policy",
            str(folders["policy"]),
            "--out",
            str(ev),
        ]
    )
    s = json.loads((ev / "summary.json").read_text())
    assert s["accuracy_delta"] == 0 and s["intervals_overlap"]
    assert s["kl_to_base"]["k1_token_mean"] == pytest.approx(0.0, abs=1e-6)
    assert s["kl_to_base"]["k3_token_mean"] == pytest.approx(0.0, abs=1e-6)


def test_lora_run_saves_a_merged_policy(folders):
    out = folders["root"] / "grpo" / "lora"
    assert (
        train_grpo.main(
            [
                "--config",
                json.dumps(GRPO_SECTION),
                "--data",
                str(folders["data"]),
                "--policy",
                str(folders["policy"]),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["lora_state"] == "fresh" and summary["reference"] == "disable_adapter"
    assert summary["trainable_parameters"] < summary["total_parameters"] / 2
    assert not (out / "policy" / "adapter_config.json").exists()
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(out / "policy")
    assert not any("lora" in n for n, _ in merged.named_parameters())


def test_reward_model_run_without_a_reward_model_is_a_config_error(folders):
    from prefpipe.common.config import ConfigError

    with pytest.raises(ConfigError, match="no --reward-model"):
        train_grpo.run(
            train_grpo.parse_args(
                [
                    "--config",
                    json.dumps(GRPO_SECTION),
                    "--data",
                    str(folders["data"]),
                    "--policy",
                    str(folders["policy"]),
                    "--out",
                    str(folders["root"] / "grpo" / "gpm"),
                ]
            )
        )


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
    from prefpipe.grpo.config import GRPOConfig
    from prefpipe.grpo.policy_io import load_policy
    from prefpipe.grpo.prompts import load_rl_prompts
    from prefpipe.grpo.rewards import build_rewards
    from prefpipe.grpo.trainer import GRPOTrainer
    from prefpipe.reward.model import load_reward_model

    specs = [reward_spec("reward_model", opponent="reference")]
    cfg = GRPOConfig.from_dict(
        {
            "steps": 2,
            "prompts_per_step": 2,
            "num_generations": 2,
            "max_new_tokens": 4,
            "rewards": specs,
            "sample_every": 0,
            "checkpoint_every": 0,
        }
    )
    policy, tok, state = load_policy(folders["policy"])
    rows, _ = load_rl_prompts(folders["data"] / "rl_prompts_train.jsonl")
    rewards = build_rewards(specs, load_reward_model(folders["rm"]))
    trainer = GRPOTrainer(cfg, policy, tok, state, rows, rewards, tmp_path)
    assert trainer.reference is not None  # beta is 0, but the opponent needs pi_ref's completions
    trainer.train()
    assert len(trainer.ref_cache) == 4  # one greedy completion per distinct prompt seen (2 steps x 2)
    assert trainer.metric_rows[0].get("kl_k3_mean") is None  # ... and still no KL term at beta 0


def test_workflow_style_run_config_drives_both_stages(folders):
    """The workflow passes one resolved run config (with `run` and `eval`) to train_grpo AND eval_policy."""
    from prefpipe.common.config import ConfigError, deep_merge

    cfg = {
        "run": "plain",
        "seed": 0,
        "torch_threads": 1,
        "experiment": "t",
        "wandb": {"enabled": False},
        **deep_merge(GRPO_SECTION["defaults"], {"steps": 2, "eval": {"batch_size": 3, "primary": "sampled"}}),
    }
    out = folders["root"] / "grpo" / "wf"
    args = ["--config", json.dumps(cfg), "--data", str(folders["data"]), "--policy", str(folders["policy"])]
    assert train_grpo.main([*args, "--out", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["run"] == "plain"
    ev = folders["root"] / "policy_eval" / "wf"
    assert (
        eval_policy.main(
            [
                "--config",
                json.dumps(cfg),
                "--data",
                str(folders["data"]),
                "--base",
                str(folders["policy"]),
                "--policy",
                str(out / "policy"),
                "--out",
                str(ev),
            ]
        )
        == 0
    )
    s = json.loads((ev / "summary.json").read_text())
    assert s["decoding"] == "sampled" and set(s["decodings"]) == {"greedy", "sampled"}
    bad = {**cfg, "eval": {"batchsize": 3}}
    with pytest.raises(ConfigError, match="unknown grpo eval key"):
        train_grpo.run(train_grpo.parse_args(["--config", json.dumps(bad), *args[2:], "--out", str(out)]))
