"""Reward-training step time on a GPU against the CPU-tuned batching settings (length buckets, the pass cost that
sets where they are cut, the shared-prompt pack): is a step's time the GPU's arithmetic or the number of passes?

    # on the GPU machine, .whl and .gpu-assets carried (see gpu.py):
    PYTHONPATH=/tmp/site:src python3 benchmarks/gpu_buckets.py --out buckets.json
    python benchmarks/gpu_buckets.py --device cpu --out /tmp/buckets.json     # a smoke run (tiny models)

Models: gpu.py's random Llama (0.5B: full fine-tuning, bf16 autocast, micro-batch 32) and gpu_paper.py's random
Gemma-2 2B (LoRA, bf16, gradient checkpointing, micro-batch 4); 32 HH-RLHF pairs per step that fit max_length
512, BT head. Per variant: a fresh model, 1 warm-up step and --steps timed steps (wall, synchronised)."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu  # noqa: E402  (puts src/ and tests/ on sys.path)
import gpu_paper  # noqa: E402
import reward_train  # noqa: E402

VARIANTS = {  # train.* overrides
    "config default": {},
    "one pass per micro-batch": {"length_buckets": 1},
    "pass cost 4096": {"bucket_pass_cost": 4096},
    "no shared prompt, one pass": {"share_prompt": False, "length_buckets": 1},
}


def step_times(base: Path, pairs: Path, device: str, model: dict, train: dict, steps: int) -> list[float]:
    import torch
    from support.settings import reward_settings

    from prefpipe.reward.model import build_reward_model
    from prefpipe.reward.pairs import read_pairs
    from prefpipe.reward.trainer import RewardTrainer

    settings = reward_settings(
        {"head": {"type": "bt", "standardize": False},
         "backbone": {"pooling": "last", "embedding_features": False, "likelihood_features": False,
                      "precision": "fp32" if device == "cpu" else "bf16",
                      "gradient_checkpointing": model["checkpointing"]},
         "lora": {"enabled": model["lora"]}, "data": {"max_length": 512},
         "train": {"steps": steps + 1, "batch_size": 32, "micro_batch_size": model["micro_batch"],
                   "learning_rate": 1e-5, "head_learning_rate": None, "warmup_steps": 0, "lr_schedule": "constant",
                   "checkpoint_every": 0, "resume": "never", "head_fit": {"before_steps": 0, "after_steps": 0},
                   **train}},
        variant="bt",
    )  # fmt: skip
    torch.manual_seed(0)
    rm = build_reward_model(str(base), settings)
    marks: list[float] = []

    def on_end(*_):
        if device != "cpu":
            torch.cuda.synchronize()
        marks.append(time.perf_counter())

    RewardTrainer(rm, settings, read_pairs(pairs)[0], tempfile.mkdtemp(), on_step_end=on_end).train()
    del rm
    if device != "cpu":
        torch.cuda.empty_cache()
    return reward_train.intervals(marks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--models", default="llama,gemma2")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="prefpipe-buckets-"))
    tok = gpu.load_tokenizer(gpu.ASSETS / "tokenizer" if (gpu.ASSETS / "tokenizer").exists() else None)
    rows = gpu.read_jsonl(
        gpu.ASSETS / "hh_pairs.jsonl" if (gpu.ASSETS / "hh_pairs.jsonl").exists() else gpu.SHARED_PAIRS
    )
    tiny = a.device == "cpu"
    models = {
        "llama": {"build": lambda f: gpu.build_base(f, "tiny" if tiny else "0.5b", tok), "lora": False,
                  "checkpointing": False, "micro_batch": 32, "variants": list(VARIANTS)},
        "gemma2": {"build": lambda f: gpu_paper.build_gemma2(f, "tiny" if tiny else "2b", tok, a.device), "lora": True,
                   "checkpointing": True, "micro_batch": 4, "variants": ["config default", "one pass per micro-batch"]},
    }  # fmt: skip
    results: dict = {"device": a.device, "steps": a.steps, "rows": []}
    for name in a.models.split(","):
        model = models[name]
        base = work / name
        model["build"](base)
        pairs = work / f"{name}_pairs.jsonl"
        reward_train.fitting_pairs(rows, base, 512, 32 * (a.steps + 1), pairs)
        for variant in model["variants"]:
            try:
                times = step_times(base, pairs, a.device, model, VARIANTS[variant], a.steps)
                row = {
                    "model": name,
                    "variant": variant,
                    "s_per_step": statistics.median(times),
                    "steps": times,
                }
            except Exception as exc:  # noqa: BLE001 - a failed variant is a result; the others still run
                row = {"model": name, "variant": variant, "error": f"{type(exc).__name__}: {exc}"[:500]}
            results["rows"].append(row)
            print(row, flush=True)
            gpu.write(a.out, results)


if __name__ == "__main__":
    main()
