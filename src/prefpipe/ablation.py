"""The ablation rule: the Bayesian GPM ablation, each fix added to the broken variant and removed from the fixed
one, with paired bootstrap intervals over the test pairs.

    python -m prefpipe.ablation --config '<json>' --eval results/eval --out results/ablation
What it reads, writes and reports: prefpipe.evaluation.ablation_contrasts.
"""

from __future__ import annotations

import sys

from prefpipe.common.stage import PathArg, run_stage
from prefpipe.evaluation.ablation_contrasts import run
from prefpipe.settings.ablation import AblationStageSettings

PATHS = {
    "eval": PathArg("evaluation folder holding <variant>/summary.json and per_example.parquet"),
    "out": PathArg("output folder, e.g. results/ablation", "out"),
}


def main(argv: list[str] | None = None) -> int:
    return run_stage("ablation", AblationStageSettings, run, PATHS, argv)


if __name__ == "__main__":
    sys.exit(main())
