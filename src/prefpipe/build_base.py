"""Stage 2 (rule build_base): the base policy every later stage starts from.

    python -m prefpipe.build_base --config '<json>' --data results/data --out results/base

The config is the stage's settings (prefpipe.settings.base.BaseSettings) as JSON.
source "scratch": train a BPE tokenizer on the world's text, build a tiny Llama, SFT it on demonstrations.
source "pretrained": load `base.pretrained` (hub id or folder), optionally SFT it. Either way the model is
saved with save_pretrained into <out>/model (atomically) and its held-out verifier accuracy, sampled and
greedy, goes into summary.json. The work is in prefpipe.base.build.
"""

from __future__ import annotations

import sys

from prefpipe.base.build import run
from prefpipe.common.stage import PathArg, run_stage
from prefpipe.settings.base import BaseSettings

PATHS = {"data": PathArg("prep_data output folder (results/data)"), "out": PathArg("output folder", "out")}


def main(argv: list[str] | None = None) -> int:
    return run_stage("build_base", BaseSettings, run, PATHS, argv)


if __name__ == "__main__":
    sys.exit(main())
