"""One GPU window's reward-training check (issue 47 item 1), at most ~9 minutes: prefpipe's BT, GPM and Bayesian
GPM with the new levers against TRL 1.16 RewardTrainer at its fastest settings, >= 2 rounds alternating, pairs/s,
MFU on real tokens and peak memory per side; raw JSON into --out (on the device machine: $OUT).

    # once, where there is network: benchmarks/gpu_wheels.sh (.whl/ and .gpu-assets/, see gpu.py)
    # on the GPU machine, one call (wheels unpacked as gpu.py's docstring says):
    PYTHONPATH=/tmp/site:src python3 benchmarks/device_check.py --out "$OUT" --budget-s 480
    # CPU smoke (tests/test_benchmarks_smoke.py; every side's worker in this one process):
    PREFPIPE_BENCH_IN_PROCESS=1 python benchmarks/device_check.py --device cpu --size tiny --rounds 1 --out /tmp/dc

Sides (one child process each, gpu.py's workers; same base model, same pairs and token ids, 32 pairs a step,
max_length 512 at 0.5b):
  prefpipe_bt            the config defaults (precision auto: fp32 weights under bf16 autocast; share_prompt,
                         cuda_length_buckets 1) with a host read of the metrics every step (cuda_metrics_every 1):
                         the baseline the issue measured
  prefpipe_bt_async      + train.cuda_metrics_every 3: no host sync inside a step, metrics read every 3 steps
  prefpipe_bt_master     + backbone.precision bf16_master: bf16 weights, fp32 master copies and Adam state
  prefpipe_bt_packed     + train.packing (one packed row when flash-attn is importable and the backbone runs it
                         as attn_implementation flash_attention_2, else rows of 4096 tokens under sdpa)
  prefpipe_bt_fast, prefpipe_gpm_fast, prefpipe_bgpm_fast   all the levers together (Liger's kernels when
                         liger_kernel is importable: backbone.kernels liger)
  prefpipe_bt_liger      + backbone.kernels liger alone (only when liger_kernel is importable)
  prefpipe_bt_fast_compiled   prefpipe_bt_fast + backbone.compile default (torch.compile; the first steps compile;
                         CUDA only)
  trl                    RewardTrainer, fp32 weights, bf16=True (the issue's setting)
  trl_bf16               RewardTrainer with the weights loaded in bf16 (its fastest documented setting here;
                         use_liger_kernel when liger_kernel is importable). TRL 1.16's RewardTrainer has no
                         padding-free option.
Step times are wall seconds between optimizer-step ends (torch.cuda.synchronize first), warm-up step excluded;
with metrics read every k steps, between reads (where the device has caught up) divided by k, the first window
(with the warm-up step) excluded (reward_train.per_step).
Host syncs: after the first round, one run of prefpipe_bt_fast's settings under torch.cuda.set_sync_debug_mode
(--sync-debug, default warn: every synchronising call site and its count, in "sync_check"; error stops at the
first) from the first metrics read to the last; the trainer's own reads lift the mode, so any site listed is a
host sync inside a step. On CPU (no CUDA) the run reports its host reads only.
MFU = 6 x (parameters outside the embedding) x real tokens/s / --peak-tflops (attention FLOPs not counted).
"agreement": each BT lever side's first step (same weights, same pairs) against prefpipe_bt's, loss and gradient
norm, relative, within AGREEMENT_RTOL (the levers' correctness check on the device: Liger and the compiled
forward cannot run in the CPU tests).
Order (--sides all): the CORE sides in every round (alternating), then each lever alone in the first round;
--sides levers gives a later window the levers alone over several rounds.
Rounds after the first run only while the budget allows (gpu.Runner); the JSON is rewritten after each child.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import gpu  # noqa: E402  (puts src/ and tests/ on sys.path)
import reward_train  # noqa: E402


def sides(device: str) -> dict[str, dict]:
    """Each side's case overrides on this machine. On CPU the per-step read is metrics_every (the CPU key)."""
    flash = device != "cpu" and importlib.util.find_spec("flash_attn") is not None
    key = "metrics_every" if device == "cpu" else "cuda_metrics_every"
    sync, deferred = {key: 1}, {key: 3}
    rows = 0 if flash else (4096 if device != "cpu" else 256)
    pack = {"train": {**sync, "packing": True, "packing_row_tokens": rows}}
    if flash:
        pack["backbone"] = {"attn_implementation": "flash_attention_2"}
    liger = device != "cpu" and importlib.util.find_spec("liger_kernel") is not None
    kernels = {"kernels": "liger"} if liger else {}
    fast = {"train": {**pack["train"], **deferred},
            "backbone": {**pack.get("backbone", {}), "precision": "bf16_master", **kernels}}
    compiled = {"train": fast["train"], "backbone": {**fast["backbone"], "compile": "default"}}
    return {
        "prefpipe_bt": {"train": sync},
        "prefpipe_bt_async": {"train": deferred},
        "prefpipe_bt_master": {"train": sync, "backbone": {"precision": "bf16_master"}},
        "prefpipe_bt_packed": pack,
        "prefpipe_bt_fast": fast,
        "prefpipe_gpm_fast": fast,
        "prefpipe_bgpm_fast": fast,
        **({"prefpipe_bt_liger": {"train": sync, "backbone": kernels}} if liger else {}),
        # compiling costs the CPU smoke a minute; tests/test_backbone_execution.py checks the lever on CPU
        **({"prefpipe_bt_fast_compiled": compiled} if device != "cpu" else {}),
        "trl": {},
        "trl_bf16": {"trl_dtype": "bfloat16" if device != "cpu" else "float32",
                     "trl_args": {"use_liger_kernel": True} if liger else {}},
    }  # fmt: skip


# A lever's first step against prefpipe_bt's (same weights, same pairs): |relative difference| of the loss and
# the gradient norm. The bound is bf16's: prefpipe_bt runs fp32 weights under bf16 autocast, bf16_master rounds
# the weights themselves, Liger's kernels and torch.compile reorder sums.
AGREEMENT_RTOL = 2e-2


def agreement(results: dict[str, list[dict]]) -> dict[str, dict]:
    """Per prefpipe side, its first step's loss and grad-norm relative differences to prefpipe_bt (first round)."""
    plain = next((r.get("first_step") for r in results.get("prefpipe_bt", []) if r.get("first_step")), None)
    out: dict[str, dict] = {}
    for side, runs in results.items():
        first = next((r.get("first_step") for r in runs if r.get("first_step")), None)
        if not (plain and first) or side == "prefpipe_bt" or not side.startswith("prefpipe_bt"):
            continue
        gaps = {k: abs(first[k] - plain[k]) / max(abs(plain[k]), 1e-12) for k in ("loss", "grad_norm")
                if first.get(k) is not None and plain.get(k) is not None}  # fmt: skip
        out[side] = {**{f"{k}_rel": v for k, v in gaps.items()}, "within": all(v <= AGREEMENT_RTOL for v in gaps.values())}
    return out


# The sides the acceptance reads (prefpipe's fastest BT / GPM / BGPM against TRL at both settings, and the
# baseline as the issue measured it): first in every round, so a window's budget never cuts them for a lever.
CORE = ("prefpipe_bt", "prefpipe_bt_fast", "trl", "prefpipe_gpm_fast", "prefpipe_bgpm_fast", "trl_bf16")


def round_sides(names: tuple[str, ...], r: int, which: str) -> tuple[str, ...]:
    """Round r's sides: the core ones alternating order by round; each lever alone (prefpipe_bt beside them for the
    agreement) in the first round only under `all`, in every round under `levers`."""
    core = tuple(n for n in CORE if n in names)
    levers = tuple(n for n in names if n not in CORE)
    if which == "core":
        return common.round_order(core, r)
    if which == "levers":
        return common.round_order(("prefpipe_bt", *levers), r)
    return common.round_order(core, r) + (levers if r == 0 else ())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for device_check.json")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--size", choices=sorted(gpu.SIZES), default="0.5b")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=480.0)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--sync-debug", choices=["warn", "error"], default="warn")
    ap.add_argument("--sides", choices=["all", "core", "levers"], default="all",
                    help="core: the acceptance sides (prefpipe's fastest BT/GPM/BGPM, TRL) every round; levers: each "
                         "lever alone beside prefpipe_bt, every round; all: core every round, levers in the first")  # fmt: skip
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    out = a.out / "device_check.json"
    tiny = a.size == "tiny"
    # steps + 1 run (the first is warm-up): 7 at 0.5b, read every 3 under the deferred sides (windows 4-6, 7)
    g = dict(batch=4 if tiny else 32, max_length=128 if tiny else 512, lr=1e-5, steps=3 if tiny else 6)
    work = Path(tempfile.mkdtemp(prefix="prefpipe-device-check-"))
    tok_dir = gpu.ASSETS / "tokenizer"
    pairs_file = gpu.ASSETS / "hh_pairs.jsonl"
    tok = gpu.load_tokenizer(tok_dir if tok_dir.exists() else None)
    model = gpu.build_base(work / "base", a.size, tok)
    rows = gpu.read_jsonl(pairs_file if pairs_file.exists() else gpu.SHARED_PAIRS)
    pairs = work / "pairs.jsonl"
    kept = reward_train.fitting_pairs(
        rows, work / "base", g["max_length"], g["batch"] * (g["steps"] + 1), pairs
    )
    precision = "fp32" if a.device == "cpu" else "auto"
    case = {"kind": "reward", "device": a.device, "clock": "wall", "base": str(work / "base"), "pairs": str(pairs),
            "precision": precision, "n_pairs": len(kept), **g}  # fmt: skip
    variants = sides(a.device)
    payload = {"what": "issue 47 item 1: reward training levers vs TRL (benchmarks/device_check.py)",
               "when": time.strftime("%Y-%m-%d %H:%M:%S"), "device": a.device, "size": a.size, "model": model,
               "settings": {**g, "precision": precision}, "sides": variants, "results": {}}  # fmt: skip
    runner = gpu.Runner(a.budget_s, {"reward": 60.0 if not tiny else 20.0})
    results: dict[str, list[dict]] = {s: [] for s in variants}
    for r in range(a.rounds):
        for side in round_sides(tuple(variants), r, a.sides):
            res = runner.run("reward", {**case, **variants[side], "side": side})
            payload["env"] = res.pop("env", payload.get("env"))
            results[side].append(res)
            peak = a.peak_tflops * 1e12
            payload["rows"] = gpu.reward_rows(
                results, model["params_non_embedding"], model["params"], peak, g["batch"], tuple(variants)
            )
            payload["results"] = results
            payload["agreement"] = agreement(results)
            gpu.write(out, payload)
        if r == 0:  # the host-sync check, once
            check = {**case, **variants["prefpipe_bt_fast"], "side": "prefpipe_bt_fast", "sync_debug": a.sync_debug}
            payload["sync_check"] = runner.run("reward", check)
            gpu.write(out, payload)
    for row in payload["rows"]:
        print(
            row["side"], {k: row.get(k) for k in ("pairs_per_s", "speedup_vs_trl", "mfu", "peak_memory_gib")}
        )
    sync = payload.get("sync_check", {})
    print("sync_check", {k: sync.get(k) for k in ("sync_debug", "syncs", "sync_sites", "host_reads", "error")})
    print(f"written {out}")


if __name__ == "__main__":
    main()
