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

from prefpipe.export.run import FORMS, export_reward


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m prefpipe.export_reward", description=__doc__.split("\n")[0]
    )
    parser.add_argument("run_dir", help="the reward run's folder (holds model/)")
    parser.add_argument("out_dir", help="the export folder to write (replaced atomically)")
    parser.add_argument(
        "--format", default="auto", choices=FORMS, help="auto: sequence-classification where faithful"
    )
    parser.add_argument(
        "--eval-summary", default=None, help="the run's evaluation summary.json (scores in the card)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        info = export_reward(args.run_dir, args.out_dir, args.format, args.eval_summary)
    except (ValueError, FileNotFoundError) as err:
        print(f"export_reward: {err}", file=sys.stderr)
        return 2
    print(f"{args.out_dir}: {info['format']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
