"""Tiny GRPO runs with a learning curve, for the curve and paired-comparison tests: RL prompts graded by a
verifier that accepts about half of a random tiny policy's completions (an even character count), so the
accuracies compared are not all 0 (the real verifiers almost never accept a random completion)."""

from __future__ import annotations

from pathlib import Path

from prefpipe import eval_policy, train_grpo
from prefpipe.common.io import write_jsonl
from prefpipe.data.verifier import VERIFIERS, register_verifier
from support.models import save_tiny_policy
from support.settings import grpo_settings, stage_json
from support.stages import run_main

EVEN = "test_even_length"
if EVEN not in VERIFIERS:
    register_verifier(EVEN)(lambda answer, completion: len(completion) % 2 == 0)

ROWS = [
    {"id": f"p{i}", "prompt": f"Say {w}.", "answer": w, "kind": EVEN, "aliases": []}
    for i, w in enumerate("abcdefghij")
]
EVAL = {"max_new_tokens": 7, "batch_size": 3, "curve_every": 2, "curve_prompts": 5, "kl_estimate": False}
SHORT = {
    "steps": 5,
    "prompts_per_step": 2,
    "num_generations": 4,
    "max_new_tokens": 6,
    "learning_rate": 5e-2,
    "sample_every": 0,
    "checkpoint_every": 0,
    "inspect_steps": [],
    "mask_truncated_completions": False,
    "beta": 0.0,
    "eval": EVAL,
}


def write_inputs(root: Path) -> dict[str, Path]:
    """rl_prompts_train/heldout.jsonl (the held-out file is the training rows reversed) and a tiny policy."""
    data = root / "data"
    write_jsonl(data / "rl_prompts_train.jsonl", ROWS)
    write_jsonl(data / "rl_prompts_heldout.jsonl", ROWS[::-1])
    return {"root": root, "data": data, "policy": save_tiny_policy(root / "base", seed=4)}


def train(folders: dict[str, Path], out: Path, seed: int = 0, **changes) -> None:
    """train_grpo on SHORT merged with `changes`; asserts it exits 0."""
    settings = grpo_settings({**SHORT, **changes}, seed=seed)
    code, _ = run_main(
        train_grpo.main, stage_json(settings), data=folders["data"], policy=folders["policy"], out=out
    )
    assert code == 0


def evaluate(folders: dict[str, Path], policy: Path, out: Path, seed: int = 0, **eval_changes) -> None:
    """eval_policy of `policy` against the base on the held-out prompts; asserts it exits 0."""
    settings = grpo_settings({**SHORT, "eval": {**EVAL, **eval_changes}}, seed=seed)
    code, _ = run_main(
        eval_policy.main,
        stage_json(settings),
        data=folders["data"],
        base=folders["policy"],
        policy=policy,
        out=out,
    )
    assert code == 0
