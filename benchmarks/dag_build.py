"""DAG build time of a 50-variant config: `snakemake -n` (parse, settings layer, schema checks, DAG) with 47
extra reward variants on top of config/config.yaml's, CPU seconds of the Snakemake process (median of runs).

    .venv-bench/bin/python benchmarks/dag_build.py [--runs 3]
No peer: the figure tracks the workflow's own parse cost as configs grow."""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402


def overlay(n: int) -> dict:
    base = yaml.safe_load((common.ROOT / "config" / "config.yaml").read_text())
    have = len(base["reward"]["variants"])
    heads = ["bt", "gpm"]
    extra = {
        f"bench-{i:02d}": {"head": {"type": heads[i % 2]}, "train": {"learning_rate": 1.0e-3 * (1 + i / 100)}}
        for i in range(max(0, n - have))
    }
    return {"reward": {"variants": extra}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--variants", type=int, default=50)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "bench_variants.yaml"
        cfg.write_text(yaml.safe_dump(overlay(a.variants)))
        cmd = [sys.executable, "-m", "snakemake", "-n", "--quiet", "all", "--configfile", str(cfg)]  # fmt: skip
        cpu, wall = [], []
        for _ in range(a.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            res = subprocess.run(cmd, env=common.child_env(), capture_output=True, text=True, cwd=common.ROOT)
            wall.append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if res.returncode != 0:
                raise SystemExit(
                    f"snakemake failed ({res.returncode}):\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
                )
            cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    row = {"variants": a.variants, "cpu_s_median": statistics.median(cpu), "cpu_s": cpu, "wall_s": wall}
    print(
        f"| DAG build, {a.variants} reward variants | {row['cpu_s_median']:.2f} CPU s (runs {', '.join(f'{c:.2f}' for c in cpu)}) |"
    )
    print(f"written {common.write('dag_build', row)}")


if __name__ == "__main__":
    main()
