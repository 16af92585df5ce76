"""Stage of the al_train rule: train_reward on a round's labelled set, the learner's KL weight rescaled to that
set when active_learning.kl_weight is `labelled` (the rule then passes --kl-reference, the experiment's data
folder; prefpipe.active.kl_weight).

    python -m prefpipe.active_train --config '<json>' --data <round>/data --base results/base/model \\
        [--kl-reference results/data] --out <round>/reward/<variant>
The model's config.json records the weight it trained with.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from prefpipe.active.kl_weight import scaled_kl_weight
from prefpipe.active.labelled import TRAIN
from prefpipe.common.config import DataError
from prefpipe.common.io import iter_jsonl
from prefpipe.common.stage import PathArg, run_stage
from prefpipe.reward.train import run as train_run
from prefpipe.settings.reward import RewardSettings
from prefpipe.train_reward import PATHS as TRAIN_PATHS

log = logging.getLogger("prefpipe.active_train")
PATHS = {
    **TRAIN_PATHS,
    "kl_reference": PathArg(
        "the experiment's data folder: rescale the KL weight to the labelled set", "dir", required=False
    ),
}


def _pairs(folder: str) -> int:
    return sum(1 for _ in iter_jsonl(Path(folder) / TRAIN, DataError))


def run(settings: RewardSettings, args: argparse.Namespace) -> None:
    if args.kl_reference is not None:
        full, labelled = _pairs(args.kl_reference), _pairs(args.data)
        settings = scaled_kl_weight(settings, full, labelled)
        log.info("max_kl_weight %.4g (x %d / %d pairs)", settings.head.bayes.max_kl_weight, full, labelled)
    train_run(settings, args)


def main(argv: list[str] | None = None) -> int:
    return run_stage("active_train", RewardSettings, run, PATHS, argv)


if __name__ == "__main__":
    sys.exit(main())
