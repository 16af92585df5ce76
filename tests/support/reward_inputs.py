"""The batch the reward-model reward tests score (test_grpo_risk, test_grpo_ensemble): two prompts, a group of four
completions each, with answers and one reference completion per prompt (the opponent=reference case)."""

from __future__ import annotations

from prefpipe.grpo.rewards import RewardInputs

PROMPTS = ["What is 2 plus 3?", "Say yes."]
COMPLETIONS = ["5", "6", "five", "5 apples", "yes", "no", "yes yes", "Yes."]
REFS = ["5"] * 4 + ["yes"] * 4
G = 4


def group_inputs() -> RewardInputs:
    return RewardInputs(
        prompts=[p for p in PROMPTS for _ in range(G)],
        completions=list(COMPLETIONS),
        answers=["5"] * G + ["yes"] * G,
        kinds=["add"] * G + ["repeat"] * G,
        terminated=[True] * 8,
        group_size=G,
        reference_completions=list(REFS),
    )
