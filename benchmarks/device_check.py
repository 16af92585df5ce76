"""One GPU window's reward-training check (issue 47 item 1), at most ~9 minutes: prefpipe's BT, GPM and Bayesian
GPM with the new levers against TRL 1.16 RewardTrainer at its fastest settings, >= 2 rounds alternating, pairs/s,
MFU on real tokens and peak memory per side; raw JSON into --out (on the device machine: $OUT).

    # once, where there is network: benchmarks/gpu_wheels.sh (.whl/ and .gpu-assets/, see gpu.py)
    # on the GPU machine, one call (wheels unpacked as gpu.py's docstring says):
    PYTHONPATH=/tmp/site:src python3 benchmarks/device_check.py --out "$OUT" --budget-s 480
    # CPU smoke (tests/test_benchmarks_smoke.py):
    python benchmarks/device_check.py --device cpu --size tiny --out /tmp/dc

Sides (one child process each, gpu.py's workers; same base model, same pairs and token ids, 32 pairs a step,
max_length 512 at 0.5b):
  prefpipe_bt            the config defaults (precision auto: fp32 weights under bf16 autocast; share_prompt,
                         cuda_length_buckets 1): the baseline the issue measured
  prefpipe_bt_packed     + train.packing (one packed row when flash-attn is importable and the backbone runs it
                         as attn_implementation flash_attention_2, else rows of 4096 tokens under sdpa)
  prefpipe_gpm_packed, prefpipe_bgpm_packed   the same levers for GPM and the Bayesian GPM
  trl                    RewardTrainer, fp32 weights, bf16=True (the issue's setting)
  trl_bf16               RewardTrainer with the weights loaded in bf16 (its fastest documented setting here;
                         use_liger_kernel when liger_kernel is importable). TRL 1.16's RewardTrainer has no
                         padding-free option.
Step times are wall seconds between optimizer-step ends (torch.cuda.synchronize first), warm-up step excluded.
MFU = 6 x (parameters outside the embedding) x real tokens/s / --peak-tflops (attention FLOPs not counted).
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
    """Each side's case overrides on this machine."""
    flash = device != "cpu" and importlib.util.find_spec("flash_attn") is not None
    pack = {
        "train": {"packing": True, "packing_row_tokens": 0 if flash else (4096 if device != "cpu" else 256)}
    }
    if flash:
        pack["backbone"] = {"attn_implementation": "flash_attention_2"}
    liger = device != "cpu" and importlib.util.find_spec("liger_kernel") is not None
    return {
        "prefpipe_bt": {},
        "prefpipe_bt_packed": pack,
        "prefpipe_gpm_packed": pack,
        "prefpipe_bgpm_packed": pack,
        "trl": {},
        "trl_bf16": {"trl_dtype": "bfloat16" if device != "cpu" else "float32",
                     "trl_args": {"use_liger_kernel": True} if liger else {}},
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for device_check.json")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--size", choices=sorted(gpu.SIZES), default="0.5b")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=480.0)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    out = a.out / "device_check.json"
    tiny = a.size == "tiny"
    g = dict(batch=4 if tiny else 32, max_length=128 if tiny else 512, lr=1e-5, steps=2 if tiny else 6)
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
        for side in common.round_order(tuple(variants), r):
            res = runner.run("reward", {**case, **variants[side], "side": side})
            payload["env"] = res.pop("env", payload.get("env"))
            results[side].append(res)
            peak = a.peak_tflops * 1e12
            payload["rows"] = gpu.reward_rows(
                results, model["params_non_embedding"], model["params"], peak, g["batch"], tuple(variants)
            )
            payload["results"] = results
            gpu.write(out, payload)
    for row in payload["rows"]:
        print(
            row["side"], {k: row.get(k) for k in ("pairs_per_s", "speedup_vs_trl", "mfu", "peak_memory_gib")}
        )
    print(f"written {out}")


if __name__ == "__main__":
    main()
