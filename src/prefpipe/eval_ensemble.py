"""Stage: score a deep ensemble of evaluated reward variants (eval.ensembles), its members' disagreement as the
uncertainty.

    python -m prefpipe.eval_ensemble --config '<json>' --eval results/eval --out results/eval_ensemble/<name>
What it reads, writes and reports: prefpipe.evaluation.ensemble.
"""

from __future__ import annotations

import sys

from prefpipe.common.stage import PathArg, run_stage
from prefpipe.evaluation.ensemble import run
from prefpipe.settings.evaluation import EvalSettings

PATHS = {
    "eval": PathArg("evaluation folder holding <variant>/summary.json and per_example.parquet"),
    "out": PathArg("output folder results/eval_ensemble/<name>, <name> an eval.ensembles key", "out"),
}


def main(argv: list[str] | None = None) -> int:
    return run_stage("eval_ensemble", EvalSettings, run, PATHS, argv)


if __name__ == "__main__":
    sys.exit(main())
