"""The build_base rule: the base policy every later stage starts from.

    python -m prefpipe.build_base --config '<json>' --data results/data [--pretrained <folder>] --out results/base

The config is the stage's settings (prefpipe.settings.base.BaseSettings) as JSON.
source "scratch": train a BPE tokenizer on the world's text, build a tiny Llama, SFT it on demonstrations.
source "pretrained": load `base.pretrained` (hub id, folder, pkg:<module>/<folder>; the rule passes it resolved
as --pretrained, which an import:<name> reference needs), optionally SFT it (demonstrations are read only then). Either way the model is
saved with save_pretrained into <out>/model (atomically) and its held-out verifier accuracy, sampled and
greedy, goes into summary.json. The work is in prefpipe.base.build.
"""

from __future__ import annotations

import sys

from prefpipe.base.build import run
from prefpipe.common.stage import PathArg, run_stage
from prefpipe.settings.base import BaseSettings

PATHS = {
    "data": PathArg("prep_data output folder (results/data)"),
    "pretrained": PathArg("base.pretrained resolved (import:/pkg: references as folders)", "model", False),
    "out": PathArg("output folder", "out"),
}


def main(argv: list[str] | None = None) -> int:
    return run_stage("build_base", BaseSettings, run, PATHS, argv)


if __name__ == "__main__":
    sys.exit(main())
