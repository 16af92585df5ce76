"""The eval_policy rule: base vs GRPO-trained policy on held-out prompts.
python -m prefpipe.eval_policy --config '<json>' --data results/data --base results/base/model \
    --policy results/grpo/<run>/policy [--reward-model <folder>] --out results/policy_eval/<run>
What it reads, writes and reports: prefpipe.grpo.policy_eval.stage.
"""

from __future__ import annotations

import sys

from prefpipe.common.stage import PathArg, run_stage
from prefpipe.grpo.policy_eval.stage import run
from prefpipe.settings.grpo import GrpoSettings

PATHS = {
    "data": PathArg("folder with rl_prompts_heldout.jsonl"),
    "base": PathArg("the base policy (the comparison point)", "model"),
    "policy": PathArg("the trained policy folder", "model"),
    "reward_model": PathArg(
        "reward model folder, or a deep ensemble's member folders (runs with a reward model)",
        "model",
        required=False,
        many=True,
    ),
    "out": PathArg("output folder", "out"),
}


def main(argv: list[str] | None = None) -> int:
    return run_stage("eval_policy", GrpoSettings, run, PATHS, argv)


if __name__ == "__main__":
    sys.exit(main())
