"""Stage 1 (rule prep_data): write the preference pairs, SFT demonstrations and RL prompts of an experiment.

    python -m prefpipe.prep_data --config '<json>' --out results/data

The config is the stage's settings (prefpipe.settings.data.DataSettings) as JSON. With `source: synthetic`
every file comes from the built-in world. Otherwise the preference pairs come from
`prefpipe.data.sources.load_external_pairs` and the demonstrations and RL prompts still come from the world,
so the policy stages keep tasks with a ground-truth verifier. The work is in prefpipe.data.prepare.
"""

from __future__ import annotations

import sys

from prefpipe.common.stage import PathArg, run_stage
from prefpipe.data.prepare import run
from prefpipe.settings.data import DataSettings

PATHS = {"out": PathArg("output folder (results/data)", "out")}


def main(argv: list[str] | None = None) -> int:
    return run_stage("prep_data", DataSettings, run, PATHS, argv)


if __name__ == "__main__":
    sys.exit(main())
