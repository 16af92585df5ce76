"""Stage of the al_curve rule: the accuracy-vs-labels curve per acquisition strategy and the labels each needs to
reach random selection's final accuracy, mean +- sd over seeds (docs/findings/ACTIVE_LEARNING.md), and with
--data (the experiment's data folder) what each strategy's rounds selected (prefpipe.active.picks).

    python -m prefpipe.active_curve --config '<json>' --root results/active_learning --data results/data \
        --out results/active_learning
Writes <out>/summary.json (prefpipe.active.curve) with its run record. On a finished run, without rerunning the
workflow: --config <the folder's config.json `config` part, saved as a .json file>, --out any other folder.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from prefpipe.active.curve import summarize
from prefpipe.common.run_record import RunRecord
from prefpipe.common.stage import PathArg, run_stage
from prefpipe.settings.active import ActiveLearningSettings
from prefpipe.settings.build import to_mapping

log = logging.getLogger("prefpipe.active_curve")
PATHS = {
    "root": PathArg("the active-learning folder (results/<experiment>/active_learning)"),
    "data": PathArg("the experiment's data folder (pairs_train.jsonl): the picks analysis", required=False),
    "out": PathArg("output folder for summary.json", "out"),
}


def run(settings: ActiveLearningSettings, args: argparse.Namespace) -> None:
    record = RunRecord(Path(args.out), "active_curve", to_mapping(settings))
    summary = summarize(settings, Path(args.root), None if args.data is None else Path(args.data))
    record.finish(summary, timing={})
    for strategy, rows in summary["curve"].items():
        log.info("%s: test accuracy %s", strategy, " ".join(f"{r['mean']:.4f}" for r in rows))


def main(argv: list[str] | None = None) -> int:
    return run_stage("active_curve", ActiveLearningSettings, run, PATHS, argv)


if __name__ == "__main__":
    sys.exit(main())
