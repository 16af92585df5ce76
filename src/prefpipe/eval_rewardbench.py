"""Stage: evaluate a trained reward model on one or more RewardBench-style benchmarks.

    python -m prefpipe.eval_rewardbench --config '<json>' --model results/reward/<variant>/model \
        --data results/data --out results/eval/<variant>
What it reads, writes and reports: prefpipe.evaluation.evaluate.
"""

from __future__ import annotations

import sys

from prefpipe.common.stage import PathArg, run_stage
from prefpipe.evaluation.evaluate import run
from prefpipe.settings.evaluation import EvalSettings

PATHS = {
    "model": PathArg("reward model folder (prefpipe.reward.model format)", "model"),
    "data": PathArg("prep_data output folder (holds pairs_test.jsonl)"),
    "out": PathArg("output folder, e.g. results/eval/<variant>", "out"),
}


def main(argv: list[str] | None = None) -> int:
    return run_stage("eval_rewardbench", EvalSettings, run, PATHS, argv)


if __name__ == "__main__":
    sys.exit(main())
