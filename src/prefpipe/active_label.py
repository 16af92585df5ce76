"""Stage of the al_initial and al_select rules: write one round's labelled set (docs/findings/ACTIVE_LEARNING.md).

    python -m prefpipe.active_label --config '<json>' --data results/data --strategy bgpm --al-seed 0 --round 2 \\
        --previous results/active_learning/bgpm/seed0/round1 --out results/active_learning/bgpm/seed0/round2/data
Round 0 (no --previous): a random sample of initial_labels training pairs drawn from the seed, shared by every
strategy. A later round: the previous round's labelled set plus labels_per_round pool pairs the strategy picks
from the previous round's pool scores. What it writes: prefpipe.active.labelled; how it picks: prefpipe.active.select.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import pandas as pd

from prefpipe.active.labelled import labelled_ids, pool_ids, training_rows, write_round
from prefpipe.active.layout import INITIAL
from prefpipe.active.pool_scores import LABELLED, POOL, SCORES
from prefpipe.active.select import acquisition, random_pick, select
from prefpipe.common.config import ConfigError
from prefpipe.common.stage import PathArg, run_stage
from prefpipe.settings.active import ActiveLearningSettings

log = logging.getLogger("prefpipe.active_label")
PATHS = {
    "data": PathArg("the experiment's data folder (pairs_train.jsonl, pairs_test.jsonl)"),
    "strategy": PathArg("acquisition strategy (active_learning.strategies), `initial` in round 0", "name"),
    "al_seed": PathArg("the active-learning seed (active_learning.seeds)", "int"),
    "round": PathArg("the round whose labelled set this writes", "int"),
    "previous": PathArg("the previous round's folder (none in round 0)", "dir", required=False),
    "out": PathArg("this round's data folder", "out"),
}


def run(settings: ActiveLearningSettings, args: argparse.Namespace) -> None:
    data, seed, round_ = Path(args.data), int(args.al_seed), int(args.round)
    rows = training_rows(data)
    ids = [str(r["id"]) for r in rows]
    if (args.previous is None) != (round_ == 0) or (round_ == 0) != (args.strategy == INITIAL):
        raise ConfigError(
            f"active_label: round {round_} of {args.strategy!r} with --previous {args.previous}"
        )
    if round_ == 0:
        if settings.initial_labels > len(ids):
            raise ConfigError(
                f"active_learning.initial_labels = {settings.initial_labels}: only {len(ids)} pairs"
            )
        added = random_pick(ids, settings.initial_labels, seed, 0)
        labelled = added
    else:
        previous = Path(args.previous)
        before = labelled_ids(previous / "data")
        tables = {
            v: pd.read_parquet(previous / "scores" / v / SCORES)
            for v in acquisition(args.strategy).scorers(settings)
        }
        scores = {v: _split(t, POOL) for v, t in tables.items()}
        labelled_rows = {v: _split(t, LABELLED) for v, t in tables.items()}
        added = select(
            args.strategy,
            settings,
            pool_ids(rows, before),
            scores,
            settings.labels_per_round,
            seed,
            round_,
            labelled_rows,
        )
        labelled = before + added
    info = {"strategy": args.strategy, "seed": seed, "round": round_, "unlabelled": len(ids) - len(labelled)}
    write_round(Path(args.out), data, rows, labelled, added, info)
    log.info(
        "round %d of %s (seed %d): %d labelled, %d added",
        round_,
        args.strategy,
        seed,
        len(labelled),
        len(added),
    )


def _split(frame: pd.DataFrame, split: str) -> pd.DataFrame:
    return frame[frame["split"] == split].reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    return run_stage("active_label", ActiveLearningSettings, run, PATHS, argv)


if __name__ == "__main__":
    sys.exit(main())
