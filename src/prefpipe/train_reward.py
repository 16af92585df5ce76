"""The train_reward_model rule: train one reward-model variant (Bradley-Terry, GPM or Bayesian GPM) and save it
for eval / GRPO.

    python -m prefpipe.train_reward --config '<json>' --data results/data --base results/base/model \\
        --out results/reward/<variant>
What it reads, writes and reports: prefpipe.reward.train.
"""

from __future__ import annotations

import sys

from prefpipe.common.stage import PathArg, run_stage
from prefpipe.reward.train import run
from prefpipe.settings.reward import RewardSettings

PATHS = {
    "data": PathArg("folder with pairs_train.jsonl and pairs_test.jsonl"),
    "base": PathArg("backbone: local HF folder or hub id", "model"),
    "out": PathArg("output folder for this variant", "out"),
}


def main(argv: list[str] | None = None) -> int:
    return run_stage("train_reward", RewardSettings, run, PATHS, argv)


if __name__ == "__main__":
    sys.exit(main())
