"""Shared by the benchmark scripts: run workers as child processes alternately (prefpipe, peer, prefpipe,
peer, ...) so both see the same machine load, collect each child's per-unit CPU seconds, print medians and the
ratio with its spread, and write JSON under results/benchmarks/.

CPU seconds (time.process_time in the child, over the timed units only) are the figure: the machine is shared,
wall time moves with other people's jobs, CPU time much less. Every child runs with OMP_NUM_THREADS=1.
On a GPU (benchmarks/gpu.py) the figure is wall time instead (`clock("wall")`: torch.cuda.synchronize, then
time.perf_counter), and the children see the parent's CUDA devices (`gpu=True`)."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# PREFPIPE_BENCH_OUT: another folder for the JSON (tests/test_benchmarks_smoke.py writes to a temporary one)
OUT = Path(os.environ.get("PREFPIPE_BENCH_OUT") or ROOT / "results" / "benchmarks")


def child_env(gpu: bool = False) -> dict[str, str]:
    """The children's environment: one thread, offline, prefpipe and the tests' support package importable;
    no CUDA device unless `gpu` (then the parent's CUDA_VISIBLE_DEVICES, if any, is passed on unchanged)."""
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        WANDB_MODE="disabled",
        TOKENIZERS_PARALLELISM="false",
        # this checkout first, then the parent's (e.g. wheels unpacked with pip --target on a GPU machine)
        PYTHONPATH=os.pathsep.join(
            [str(ROOT / "src"), str(ROOT / "tests"), str(ROOT)] + [x for x in [env.get("PYTHONPATH")] if x]
        ),
    )
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = env.get("CUDA_VISIBLE_DEVICES", "")
    return env


def run_worker(script: str, args: dict, gpu: bool = False, timeout: float = 3600) -> dict:
    """Run `python script --worker JSON` and return the JSON its last stdout line holds. With
    PREFPIPE_BENCH_IN_PROCESS=1 (the CPU smoke of tests/test_benchmarks_smoke.py) the same command line runs in
    this process instead (`in_process`)."""
    if os.environ.get("PREFPIPE_BENCH_IN_PROCESS") == "1":
        return in_process(script, args)
    cmd = [sys.executable, script, "--worker", json.dumps(args)]
    res = subprocess.run(cmd, env=child_env(gpu), capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(f"worker {args} failed:\n{res.stderr[-4000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def in_process(script: str, args: dict) -> dict:
    """`script --worker JSON` through the script's own main() in this process, its stdout captured: a smoke
    whose script starts many children pays the import of torch, transformers and TRL once, not once a child
    (its figures mean nothing; that every worker's call still works is what it checks). A worker that fails
    raises RuntimeError, as a failed child does."""
    import contextlib
    import importlib.util
    import io
    import traceback

    path = Path(script).resolve()
    module = next(
        (
            m
            for m in list(sys.modules.values())
            if getattr(m, "__file__", None) and Path(m.__file__).resolve() == path
        ),
        None,
    )
    if module is None:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
    argv, out = sys.argv, io.StringIO()
    sys.argv = [str(path), "--worker", json.dumps(args)]
    try:
        with contextlib.redirect_stdout(out):
            module.main()
    except (Exception, SystemExit) as exc:  # a failed child's RuntimeError, with this traceback
        raise RuntimeError(f"worker {args} failed:\n{traceback.format_exc()[-4000:]}") from exc
    finally:
        sys.argv = argv
    return json.loads(out.getvalue().strip().splitlines()[-1])


def interleaved(
    script: str, case: dict, sides: tuple[str, ...], rounds: int, wall: bool = False
) -> dict[str, list[float]]:
    """Per side, one value per round (the worker's median per-unit CPU seconds), sides alternating.
    wall: the children see the GPU and time wall seconds (case["clock"] = "wall", read by `clock`)."""
    values: dict[str, list[float]] = {s: [] for s in sides}
    if wall:
        case = {**case, "clock": "wall"}
    for r in range(rounds):
        for side in round_order(sides, r):
            values[side].append(run_worker(script, {**case, "side": side}, gpu=wall)["value"])
    return values


def round_order(sides: tuple[str, ...], r: int) -> tuple[str, ...]:
    """Round r's order of the sides: as given in even rounds, reversed in odd ones (a, b, b, a, ...)."""
    return sides if r % 2 == 0 else tuple(reversed(sides))


def summarise(values: dict[str, list[float]], ours: str, peer: str, lower_is_better: bool) -> dict:
    """Medians and the ratio (peer/ours for times, ours/peer for rates) per round, with min and max."""
    ratios = [(p / o if lower_is_better else o / p) for o, p in zip(values[ours], values[peer], strict=True)]
    return {
        "ours_median": statistics.median(values[ours]),
        "peer_median": statistics.median(values[peer]),
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "rounds": len(ratios),
        "values": values,
    }


def table(rows: list[dict], unit: str, peer_name: str) -> str:
    head = f"| case | prefpipe ({unit}) | {peer_name} ({unit}) | speed-up (median [min, max] over rounds) |"
    lines = [head, "|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['ours_median']:.4g} | {r['peer_median']:.4g} | "
            f"{r['ratio_median']:.2f}x [{r['ratio_min']:.2f}, {r['ratio_max']:.2f}] |"
        )
    return "\n".join(lines)


def write(name: str, payload: dict) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    payload = {
        **payload,
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"python": platform.python_version(), "cpu": platform.processor(), "threads": 1},
    }
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2))
    return path


def clock(kind: str = "cpu") -> Callable[[], float]:
    """The timer a worker reads: "cpu" = time.process_time (this process's CPU seconds); "wall" =
    time.perf_counter after torch.cuda.synchronize() where CUDA is in use (queued kernels count)."""
    if kind == "cpu":
        return time.process_time
    if kind != "wall":
        raise ValueError(f"clock must be cpu or wall, got {kind!r}")
    import torch

    if not torch.cuda.is_available():
        return time.perf_counter

    def now() -> float:
        torch.cuda.synchronize()
        return time.perf_counter()

    return now


def cpu_units(fn, n_units: int, warmup: int = 1, now: Callable[[], float] = time.process_time) -> list[float]:
    """Seconds (CPU seconds unless `now` is another clock) of each of n_units calls of fn() after `warmup`
    untimed ones."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n_units):
        t0 = now()
        fn()
        out.append(now() - t0)
    return out


def cuda_peak_memory() -> dict:
    """This process's peak CUDA memory (torch.cuda.max_memory_allocated) once CUDA is in use, else nothing."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    return {"peak_memory_bytes": torch.cuda.max_memory_allocated()}
