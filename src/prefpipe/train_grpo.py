"""The train_grpo rule: GRPO policy training.

python -m prefpipe.train_grpo --config '<json>' --data results/data --policy results/base/model \
    [--reward-model results/reward/<variant>/model ...] --out results/grpo/<run>
(several --reward-model folders: the members of a deep ensemble, reward.ensemble)
What it reads, writes and reports: prefpipe.grpo.training.stage.
"""

from __future__ import annotations

import argparse
import sys

from prefpipe.common.stage import PathArg, run_stage
from prefpipe.config_checks import check_grpo_names
from prefpipe.grpo.training.stage import run
from prefpipe.settings.grpo import GrpoSettings

PATHS = {
    "data": PathArg("folder with rl_prompts_train.jsonl"),
    "policy": PathArg("starting policy: HF folder, hub id, or a LoRA adapter folder", "model"),
    "reward_model": PathArg(
        "reward model folder, or a deep ensemble's member folders (runs with a reward_model reward)",
        "model",
        required=False,
        many=True,
    ),
    "out": PathArg("output folder (results/grpo/<run>)", "out"),
}


def checked_run(settings: GrpoSettings, args: argparse.Namespace) -> None:
    """A stage started by hand gets the workflow's registry check of its names before any input is read."""
    check_grpo_names(settings, f"grpo.runs.{settings.run}")
    run(settings, args)


def main(argv: list[str] | None = None) -> int:
    return run_stage("train_grpo", GrpoSettings, checked_run, PATHS, argv)


if __name__ == "__main__":
    sys.exit(main())
