"""config/experiments/real_rl.yaml and its sweep overlay: the shared sections stay real_small's, the runs are the
three arms with their seeds, and the sweep tunes on training prompts held back from training, never on the
held-out test prompts (checked on the split code with no held-out file present)."""

from __future__ import annotations

from pathlib import Path

from support.settings import pipeline

from prefpipe.common.config import read_config_file
from prefpipe.common.io import write_jsonl
from prefpipe.grpo.splits import evaluation_rows, training_rows

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "config" / "experiments"
RL, SWEEP = EXPERIMENTS / "real_rl.yaml", EXPERIMENTS / "sweeps" / "real_rl_sweep.yaml"


def test_shared_sections_are_real_smalls():
    rl, small = read_config_file(RL), read_config_file(EXPERIMENTS / "real_small.yaml")
    for key in ("models", "data", "base", "eval"):
        assert rl[key] == small[key], key
    assert rl["reward"]["defaults"] == small["reward"]["defaults"]


def test_runs_are_the_three_arms_with_their_seeds():
    settings = pipeline(RL)
    runs = settings.grpo
    seeded = ("verifier", "verifier_gpm", "verifier_gpm_gated")
    assert list(runs) == [f"{arm}_s{i}" for arm in seeded for i in range(3)] + ["gpm_only"]
    for name, run in runs.items():
        assert (run.steps, run.learning_rate, run.beta) == (40, 1e-5, 0.0), name
        assert run.eval.split == "heldout" and run.validation_prompts == 0 and run.eval.curve_every == 10
        types = [r["type"] for r in run.rewards]
        expected = {
            "verifier": ["verifier"],
            "verifier_gpm": ["verifier", "reward_model"],
            "verifier_gpm_gated": ["verifier", "reward_model"],
            "gpm_only": ["reward_model"],
        }
        assert types == expected[name.rsplit("_s", 1)[0] if name != "gpm_only" else name], name
    for arm in seeded:
        assert [runs[f"{arm}_s{i}"].seed for i in range(3)] == [0, 1, 2]
    # the gated arm: the same reward model term, paid only where the verifier says right
    for i in range(3):
        gated, plain = runs[f"verifier_gpm_gated_s{i}"].rewards[1], runs[f"verifier_gpm_s{i}"].rewards[1]
        assert (gated["gate"], gated["transform"], gated["weight"]) == (
            "verifier",
            "sigmoid",
            plain["weight"],
        )
    comparison = settings.report.policy_comparison
    assert comparison.arm_runs(list(runs))["gpm_only"] == ["gpm_only"]
    assert comparison.contrasts == [
        ["verifier_gpm", "verifier"],
        ["verifier_gpm_gated", "verifier"],
        ["gpm_only", "verifier"],
    ]


def test_sweep_evaluates_on_held_back_training_prompts_only(tmp_path):
    runs = pipeline(RL, SWEEP).grpo
    assert runs and all(name.startswith("sweep_") for name in runs)
    assert {(r.eval.split, r.validation_prompts) for r in runs.values()} == {("validation", 100)}
    # the split itself: with no held-out file at all, a sweep run's training and evaluation prompts are found
    rows = [
        {"id": f"t{i}", "prompt": f"What is {i} + 1?", "answer": str(i + 1), "kind": "math"}
        for i in range(300)
    ]
    write_jsonl(tmp_path / "rl_prompts_train.jsonl", rows)
    assert not (tmp_path / "rl_prompts_heldout.jsonl").exists()
    held, _ = evaluation_rows(tmp_path, "validation", 100, None)
    trained, _ = training_rows(tmp_path, 100)
    assert len(held) == 100 and len(trained) == 200
    assert not {r["id"] for r in held} & {r["id"] for r in trained}
