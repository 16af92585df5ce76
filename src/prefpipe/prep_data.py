"""The prep_data rule: write the preference pairs, SFT demonstrations and RL prompts of an experiment.

    python -m prefpipe.prep_data --config '<json>' --out results/data

The config is the stage's settings (prefpipe.settings.data.DataSettings) as JSON. Preference pairs come from
the built-in world (`source: synthetic`) or `prefpipe.data.sources.load_external_pairs`; RL prompts from the
world (`prompts.source: synthetic`), the multi-hop world (`multihop`: prefpipe.data.synthetic_multihop, whose
episodes join the demonstrations) or `prefpipe.data.rl_prompts` (files, the hub); demonstrations from the
world, only when base SFT uses them. Only the parts of the world a config uses are generated. The work is in
prefpipe.data.prepare.
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
