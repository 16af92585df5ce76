"""A reduced `paper_gemma2b`-shaped run on one GPU (issue 34, item 6): the paper setting's model shape and
training recipe, random-initialised (no hub where the GPU is), a few timed steps of each stage.

    benchmarks/gpu_wheels.sh      # once, where there is network: .whl/ and .gpu-assets/ (see gpu.py)
    # on the GPU machine, from the repository root, .whl and .gpu-assets carried:
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site:src python3 benchmarks/gpu_paper.py --out paper.json
    # locally, as a smoke run of the code paths (a tiny Gemma-2, fp32 on CPU):
    python benchmarks/gpu_paper.py --device cpu --size tiny --out /tmp/paper_cpu.json

Model (`--size 2b`): Gemma2ForCausalLM with gemma-2-2b's shape (hidden 2304, intermediate 9216, 26 layers, 8
heads of 256, 4 KV heads, sliding window 4096 on every other layer, attention soft-cap 50, final soft-cap 30,
tied 256000-token embedding), built on the GPU in bf16 with seed 0 and saved once; every child loads that folder.
The tokenizer is SmolLM2's (.gpu-assets/tokenizer): its ids are a subset of the 256000 rows, so the embedding and
the output layer cost what Gemma's do, while the texts tokenize to SmolLM2's lengths.

Sections, each in its own child process (gpu.py's Runner and workers), wall seconds after torch.cuda.synchronize,
the first step excluded:
reward   the paper's reward recipe per head (bt, gpm, bgpm): LoRA r 16 / alpha 32 on peft's defaults for Gemma,
         bf16 (`precision: bf16`), gradient checkpointing, 32 pairs per optimizer step in micro-batches of 4,
         HH-RLHF helpful pairs that fit max_length 512 (the paper's 2048 would need longer pairs than HH has).
         s/step, pairs/s, peak memory, and MFU over real tokens two ways: 6·N·tokens/s (the usual convention)
         and 4·N·tokens/s (what a frozen base with LoRA computes: forward 2N, input gradients 2N; gradient
         checkpointing's re-forward is not useful work), N = parameters outside the embedding, peak --peak-tflops.
grpo     the paper's GRPO step: LoRA policy (r 16, all-linear, reference = adapter off), bf16 weights, 16 prompts x
         G 8, 64 new tokens, beta 0.04, micro-batch 32 as paper_gemma2b.yaml (--grpo-micro-batch; runs before
         this option had the whole batch of 128 in one micro-batch), grpo.gradient_checkpointing with
         --grpo-gradient-checkpointing, grpo.logprob_chunk_tokens with --grpo-logprob-chunk N (the output
         layer and log-softmax over N positions at a time, no 128 x 64 x 256000 logits), prefpipe's own rollout engine (`plain`: the vLLM engine
         needs the vllm package, which a GPU machine without network and its 64 MiB carry cannot get). s/step,
         rollout s/step, generated tokens/s in the rollout, peak memory. A random model rarely stops, so the
         completions run to 64 tokens."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu  # noqa: E402  (puts src/ and tests/ on sys.path through its imports)
import reward_train  # noqa: E402

SHAPES = {  # Gemma2Config fields besides the vocabulary
    "2b": dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
               num_attention_heads=8, num_key_value_heads=4, head_dim=256, sliding_window=4096,
               query_pre_attn_scalar=256, attn_logit_softcapping=50.0, final_logit_softcapping=30.0),
    "tiny": dict(vocab_size=None, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, sliding_window=8, query_pre_attn_scalar=16,
                 attn_logit_softcapping=50.0, final_logit_softcapping=30.0),
}  # fmt: skip
PLAN = {
    "2b": {"reward": dict(batch=32, micro_batch=4, max_length=512, steps=3, lr=1e-4),
           "grpo": dict(prompts=16, G=8, tokens=64, beta=0.04, steps=2, micro_batch=32)},
    "tiny": {"reward": dict(batch=8, micro_batch=4, max_length=128, steps=2, lr=1e-4),
             "grpo": dict(prompts=2, G=4, tokens=8, beta=0.04, steps=2, micro_batch=4)},
}  # fmt: skip
GUESS_S = {"reward": 120, "grpo_prefpipe": 120}


def build_gemma2(folder: Path, size: str, tok, device: str) -> dict:
    """The random-initialised Gemma-2 (seed 0), built on `device` in bf16 (fp32 on CPU) and saved as HF folder."""
    import torch
    from transformers import Gemma2Config, Gemma2ForCausalLM

    shape = dict(SHAPES[size])
    shape["vocab_size"] = shape["vocab_size"] or len(tok)
    cfg = Gemma2Config(**shape, tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                       eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)  # fmt: skip
    torch.manual_seed(0)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    with torch.device(device):
        model = Gemma2ForCausalLM(cfg).to(dtype)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    total = sum(p.numel() for p in model.parameters())
    return {"architecture": "Gemma2ForCausalLM (random init, seed 0)", "config": shape, "dtype": str(dtype),
            "params": total, "params_non_embedding": total - model.get_input_embeddings().weight.numel()}  # fmt: skip


def reward_row(res: dict, head: str, n_matmul: int, peak: float, batch: int) -> dict:
    if not res.get("times"):
        return {"head": head, "error": res.get("error") or res.get("skipped")}
    real = sum(res["real_tokens"]) / sum(res["times"])
    step = statistics.median(res["times"])
    return {"head": head, "s_per_step": step, "pairs_per_s": batch / step, "real_tokens_per_s": real,
            "mfu_6n": 6 * n_matmul * real / peak, "mfu_4n_lora": 4 * n_matmul * real / peak,
            "peak_memory_gib": (res.get("peak_memory_bytes") or 0) / gpu.GIB, "steps_timed": res["times"]}  # fmt: skip


def grpo_row(res: dict) -> dict:
    if not res.get("times"):
        return {"error": res.get("error") or res.get("skipped")}
    rollout = sum(res["rollout_times"])
    return {"s_per_step": statistics.median(res["times"]), "rollout_s_per_step": statistics.median(res["rollout_times"]),
            "rollout_tokens_per_s": sum(res["generated"]) / rollout if rollout else None,
            "peak_memory_gib": (res.get("peak_memory_bytes") or 0) / gpu.GIB, "steps_timed": res["times"]}  # fmt: skip


def markdown(payload: dict) -> str:
    lines = [
        "| reward head | s/step | pairs/s | MFU 6N | MFU 4N (LoRA) | peak GiB |",
        "|---|---|---|---|---|---|",
    ]
    for r in payload["reward"]:
        if "error" in r:
            lines.append(f"| {r['head']} | error: {str(r['error'])[:80]} | | | | |")
        else:
            lines.append(f"| {r['head']} | {r['s_per_step']:.2f} | {r['pairs_per_s']:.1f} | {r['mfu_6n']:.1%} | "
                         f"{r['mfu_4n_lora']:.1%} | {r['peak_memory_gib']:.1f} |")  # fmt: skip
    g = payload["grpo"]
    lines += [
        "",
        "| GRPO step | s/step | rollout s/step | rollout tokens/s | peak GiB |",
        "|---|---|---|---|---|",
    ]
    st = g.get("settings", {})
    label = (f"LoRA, bf16, micro-batch {st.get('micro_batch')}" + (", gradient checkpointing" if st.get("gradient_checkpointing") else "")
             + (f", log-prob chunk {st['logprob_chunk']}" if st.get("logprob_chunk") else ""))  # fmt: skip
    if "error" in g:
        lines.append(f"| {label} | error: {str(g['error'])[:80]} | | | |")
    elif g:
        lines.append(f"| {label} | {g['s_per_step']:.2f} | {g['rollout_s_per_step']:.2f} | "
                     f"{g['rollout_tokens_per_s']:.0f} | {g['peak_memory_gib']:.1f} |")  # fmt: skip
    return "\n".join(lines)


def run(a: argparse.Namespace) -> None:
    t_start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="prefpipe-paper-"))
    tok = gpu.load_tokenizer(
        a.tokenizer or (gpu.ASSETS / "tokenizer" if (gpu.ASSETS / "tokenizer").exists() else None)
    )
    pairs_file = a.pairs or (
        gpu.ASSETS / "hh_pairs.jsonl" if (gpu.ASSETS / "hh_pairs.jsonl").exists() else gpu.SHARED_PAIRS
    )
    base = work / "base"
    t0 = time.monotonic()
    payload: dict = {"what": "issue 34 item 6: a reduced paper_gemma2b-shaped run (benchmarks/gpu_paper.py)",
                     "when": time.strftime("%Y-%m-%d %H:%M:%S"), "device": a.device, "size": a.size,
                     "peak_tflops": a.peak_tflops, "model": build_gemma2(base, a.size, tok, a.device),
                     "reward": [], "grpo": {}}  # fmt: skip
    payload["model"]["build_s"] = round(time.monotonic() - t0, 1)
    print(f"model: {payload['model']['params'] / 1e6:.0f}M parameters, built in {payload['model']['build_s']} s",
          flush=True)  # fmt: skip
    plan = PLAN[a.size]
    runner = gpu.Runner(a.budget_s, GUESS_S)
    common_case = {
        "device": a.device,
        "clock": "wall",
        "dtype": "float32" if a.device == "cpu" else "bfloat16",
    }
    r = plan["reward"]
    pairs = work / "pairs.jsonl"
    kept = reward_train.fitting_pairs(
        gpu.read_jsonl(pairs_file), base, r["max_length"], r["batch"] * (r["steps"] + 1), pairs
    )
    payload["reward_settings"] = {**r, "n_pairs": len(kept), "lora": {"r": 16, "alpha": 32}, "gradient_checkpointing": True,
                                  "precision": "bf16" if a.device != "cpu" else "fp32"}  # fmt: skip
    n_matmul, peak = payload["model"]["params_non_embedding"], a.peak_tflops * 1e12
    for head in ("bt", "gpm", "bgpm") if "reward" in a.sections else ():
        case = {**common_case, "kind": "reward", "side": f"prefpipe_{head}", "base": str(base), "pairs": str(pairs),
                "batch": r["batch"], "micro_batch": r["micro_batch"], "max_length": r["max_length"], "lr": r["lr"],
                "steps": r["steps"], "precision": payload["reward_settings"]["precision"], "lora": True,
                "gradient_checkpointing": True}  # fmt: skip
        payload["reward"].append(reward_row(runner.run("reward", case), head, n_matmul, peak, r["batch"]))
        gpu.write(a.out, payload)
    if "grpo" not in a.sections:
        return finish(a, payload, t_start)
    g = {**plan["grpo"], "micro_batch": a.grpo_micro_batch or plan["grpo"]["micro_batch"],
         "gradient_checkpointing": a.grpo_gradient_checkpointing, "logprob_chunk": a.grpo_logprob_chunk}  # fmt: skip
    case = {**common_case, "kind": "grpo", "side": "prefpipe", "model_dir": str(base), "prompts": g["prompts"],
            "G": g["G"], "tokens": g["tokens"], "beta": g["beta"], "lora": True, "steps": g["steps"],
            "micro_batch": g["micro_batch"], "gradient_checkpointing": g["gradient_checkpointing"],
            "logprob_chunk": g["logprob_chunk"]}  # fmt: skip
    res = runner.run("grpo_prefpipe", case)
    payload["env"] = res.pop("env", None)
    payload["grpo"] = {**grpo_row(res), "settings": g}
    finish(a, payload, t_start)


def finish(a: argparse.Namespace, payload: dict, t_start: float) -> None:
    payload["wall_s"] = round(time.monotonic() - t_start, 1)
    payload["markdown"] = markdown(payload)
    gpu.write(a.out, payload)
    print(payload["markdown"])
    print(f"\nwritten {a.out} ({payload['wall_s']} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--size", choices=sorted(SHAPES), default="2b")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak (H100/H200 SXM: 989)")
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--tokenizer", type=Path)
    ap.add_argument("--pairs", type=Path)
    ap.add_argument("--sections", default="reward,grpo", help="reward, grpo or both")
    ap.add_argument(
        "--grpo-micro-batch", type=int, help="grpo.micro_batch_size (default: the plan's, 32 for 2b)"
    )
    ap.add_argument(
        "--grpo-gradient-checkpointing", action="store_true", help="grpo.gradient_checkpointing: true"
    )
    ap.add_argument(
        "--grpo-logprob-chunk",
        type=int,
        default=0,
        help="grpo.logprob_chunk_tokens: log-probs over this many positions at a time (0: the plain path)",
    )
    run(ap.parse_args())


if __name__ == "__main__":
    main()
