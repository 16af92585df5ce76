"""The grpo_hypotheses rule: the GRPO hypothesis grid's verdicts (runs when the config declares `grpo.hypotheses`).
python -m prefpipe.grpo_hypotheses --config '<json>' --results results --out results/grpo_hypotheses
Reads results/policy_eval/<run>/{per_example.jsonl,summary.json} and results/grpo/<run>/metrics.jsonl of the
baseline and every test run; writes summary.json and summary.md (the maths: prefpipe.grpo.analyses.hypotheses).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from prefpipe.common.io import atomic_write_text, read_json, read_jsonl
from prefpipe.common.run_record import RunRecord
from prefpipe.common.stage import PathArg, run_stage
from prefpipe.grpo.analyses.hypotheses import markdown, summarise
from prefpipe.settings.build import to_mapping
from prefpipe.settings.hypotheses import HypothesesSettings

log = logging.getLogger("prefpipe.grpo_hypotheses")
PATHS = {
    "results": PathArg("the results folder (policy_eval/<run>/ and grpo/<run>/ of every run in the grid)"),
    "out": PathArg("output folder", "out"),
}


def run(settings: HypothesesSettings, args: argparse.Namespace) -> None:
    results, out = Path(args.results), Path(args.out)
    runs = settings.runs()
    per_example = {r: read_jsonl(results / "policy_eval" / r / "per_example.jsonl") for r in runs}
    metrics = {
        r: [row for row in read_jsonl(results / "grpo" / r / "metrics.jsonl") if row.get("step") is not None]
        for r in runs
    }
    decoding = read_json(results / "policy_eval" / settings.baseline / "summary.json").get("decoding")
    record = RunRecord(out, "grpo_hypotheses", to_mapping(settings))
    summary = summarise(settings, per_example, metrics, decoding)
    atomic_write_text(out / "summary.md", markdown(summary))
    record.finish(summary)
    for name, test in summary["tests"].items():
        for run_name, r in test["runs"].items():
            log.info(
                "%s %s: accuracy %+.3f %s -> %s",
                name,
                run_name,
                r["accuracy_delta"],
                r["accuracy_ci"],
                r["verdict"],
            )


def main(argv: list[str] | None = None) -> int:
    return run_stage("grpo_hypotheses", HypothesesSettings, run, PATHS, argv)


if __name__ == "__main__":
    sys.exit(main())
