"""Stage of the al_score rule: score one round's model on its pool and on the test pairs (docs/findings/ACTIVE_LEARNING.md).

    python -m prefpipe.active_score --config '<json>' --model <round>/reward/<variant>/model --data results/data \\
        --labelled <round>/data --pool 1 --out <round>/scores/<variant>
What it writes: prefpipe.active.pool_scores.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from prefpipe.active.pool_scores import score_round
from prefpipe.common.stage import PathArg, run_stage
from prefpipe.settings.active import ActiveLearningSettings

PATHS = {
    "model": PathArg("the round's trained reward model", "model"),
    "data": PathArg("the experiment's data folder (pairs_train.jsonl, pairs_test.jsonl)"),
    "labelled": PathArg("the round's data folder (selection.json: the labelled ids)"),
    "pool": PathArg("1: score the pool too (a selection reads it), 0: the test pairs only", "int"),
    "out": PathArg("output folder for scores.parquet", "out"),
}


def run(settings: ActiveLearningSettings, args: argparse.Namespace) -> None:
    paths = (Path(args.model), Path(args.data), Path(args.labelled), Path(args.out))
    score_round(settings, *paths, pool=int(args.pool) > 0)


def main(argv: list[str] | None = None) -> int:
    return run_stage("active_score", ActiveLearningSettings, run, PATHS, argv)


if __name__ == "__main__":
    sys.exit(main())
