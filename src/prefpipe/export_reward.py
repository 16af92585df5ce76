"""Rule export_reward_model: a trained reward model in a form other tools load without prefpipe.

    python -m prefpipe.export_reward RUN_DIR OUT_DIR [--format auto|sequence-classification|head-folder]
        [--eval-summary results/eval/<variant>/summary.json]

RUN_DIR is a reward run (results/reward/<variant>: model/, config.json, summary.json). A BT model whose head
reads only the last token's final state becomes an AutoModelForSequenceClassification folder; every other model
the backbone folder plus head and `reward_loader.py` (torch + transformers only). Both get a README.md model card.
The work is in prefpipe.export.
"""

from __future__ import annotations

import argparse
import logging
import sys

from prefpipe.common.results.outputs import path_text
from prefpipe.export.run import FORMS, export_reward

DESCRIPTION = (
    "Export a trained reward model (a results/reward/<variant> folder) for tools without prefpipe: an "
    "AutoModelForSequenceClassification folder where that is faithful (a BT head on the last token), else the "
    "backbone with the head and reward_loader.py; both with a README.md model card."
)


def parser(prog: str = "python -m prefpipe.export_reward") -> argparse.ArgumentParser:
    """The export's arguments (also `prefpipe export`'s, prefpipe.cli)."""
    p = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    p.add_argument("run_dir", type=path_text, help="the reward run's folder (holds model/)")
    p.add_argument(
        "out_dir",
        type=path_text,
        help="the export folder to write: a new folder, or one this export wrote before from the same run "
        "(never the run, a stage folder of a results tree or a folder holding other files)",
    )
    p.add_argument(
        "--format", default="auto", choices=FORMS, help="auto: sequence-classification where faithful"
    )
    p.add_argument(
        "--eval-summary",
        default=None,
        type=path_text,
        help="the run's evaluation summary.json (scores in the card)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """The workflow rule's entry: its output is the declared results/reward/<variant>/export folder."""
    return run(parser().parse_args(argv), in_results=True)


def run(args: argparse.Namespace, in_results: bool = False) -> int:
    """Export the run `args` name; exit code 0, or 2 after a one-line error. `prefpipe export` runs this with
    in_results False: its output may not lie in a results tree's stage folders (prefpipe.common.results.outputs)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        info = export_reward(args.run_dir, args.out_dir, args.format, args.eval_summary, in_results)
    except (ValueError, FileNotFoundError) as err:
        print(f"export_reward: {err}", file=sys.stderr)
        return 2
    print(f"{args.out_dir}: {info['format']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
