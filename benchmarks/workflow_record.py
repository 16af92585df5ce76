"""The record of one workflow run (what `benchmarks/gpu_workflow.sh` commits as workflow.json): the command's exit
code and wall seconds, the jobs Snakemake ran, and per stage folder the device it ran on (versions.json `ran_on`,
written by every stage at its end) and its seconds (its benchmark TSV). With --require-cuda it exits 1 naming every
GPU stage (a rule that asks for a GPU) off CUDA, so a GPU run that silently fell back to the CPU cannot pass as a GPU run.

    python benchmarks/workflow_record.py --results results/gpu-smoke --log snakemake.log --rc 0 --wall 312.4 \
        --out workflow.json [--require-cuda]
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path
from typing import Any

DONE = re.compile(r"(\d+) of (\d+) steps \((\d+)%\) done")
# The stages whose rules ask for a GPU (workflow/rules: rule_resources(..., gpu=True)), by the name their
# config.json records. Data preparation, the ablation's bootstrap and the report do no device work.
GPU_STAGES = {"build_base", "train_reward", "eval_rewardbench", "train_grpo", "eval_policy", "active_train",
              "active_score"}  # fmt: skip


def stage_rows(results: Path) -> list[dict[str, Any]]:
    """One row per stage folder (a folder holding versions.json), in path order."""
    rows = []
    for versions_path in sorted(results.rglob("versions.json")):
        folder = versions_path.parent
        versions = json.loads(versions_path.read_text())
        config = _read(folder / "config.json")
        summary = _read(folder / "summary.json") or {}
        timing = _read(folder / "timing.json") or {}
        ran_on = versions.get("ran_on")
        rows.append(
            {
                "folder": str(folder.relative_to(results)),
                "stage": (config or {}).get("stage"),
                "device": ran_on["device"] if ran_on else None,
                "torch": ran_on.get("torch", True) if ran_on else None,
                "gpus": [g["name"] for g in ran_on.get("cuda", [])] if ran_on else [],
                "peak_memory_gib": max(
                    (g["peak_memory_gib"] for g in (ran_on or {}).get("cuda", [])), default=None
                ),
                "stage_seconds": timing.get("wall_time_s", summary.get("wall_time_s")),
            }
        )
    return rows


def job_seconds(results: Path) -> dict[str, float]:
    """Snakemake's own timing of each job (benchmarks/<rule>[_<wildcards>].tsv: column s)."""
    out = {}
    for tsv in sorted((results / "benchmarks").glob("*.tsv")):
        with tsv.open() as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
        if rows:
            out[tsv.stem] = float(rows[-1]["s"])
    return out


def jobs_done(log_text: str) -> dict[str, int] | None:
    matches = DONE.findall(log_text)
    if not matches:
        return None
    done, total, _ = matches[-1]
    return {"done": int(done), "total": int(total)}


def _read(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def off_cuda(stages: list[dict[str, Any]]) -> list[str]:
    """GPU stages that ran off CUDA, and stages that never recorded a device (they did not finish)."""
    return [
        s["folder"]
        for s in stages
        if s["device"] is None or (s["stage"] in GPU_STAGES and not str(s["device"]).startswith("cuda"))
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--log", type=Path, required=True, help="Snakemake's output")
    parser.add_argument("--rc", type=int, required=True)
    parser.add_argument("--wall", type=float, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--require-cuda", action="store_true")
    args = parser.parse_args(argv)
    stages = stage_rows(args.results) if args.results.exists() else []
    record = {
        "rc": args.rc,
        "wall_s": round(args.wall, 1),
        "jobs": jobs_done(args.log.read_text(errors="replace")) if args.log.exists() else None,
        "stages": stages,
        "job_seconds": job_seconds(args.results) if args.results.exists() else {},
        "off_cuda": off_cuda(stages),
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: record[k] for k in ("rc", "wall_s", "jobs", "off_cuda")}))
    if args.rc != 0:
        return args.rc
    if args.require_cuda and (record["off_cuda"] or not stages):
        print(f"stages not on CUDA: {record['off_cuda'] or 'no stage recorded'}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
