"""Peak memory of one GRPO policy update on the CPU (issue 34: the 2B step's 92.9 GiB on an H200), by parts.

    nice -n 10 python benchmarks/grpo_memory.py [--only vocab,micro,layers,standin,chunk] [--out FILE]

Every case runs in its own child process: a random Gemma-2 (gpu_paper.py's `tiny` shape unless a case widens
it) with a fresh LoRA adapter (r 16, all-linear, reference = adapter off), a synthetic rollout (random prompt
and completion ids, every completion token trained), and one call of prefpipe's own `grpo.update.update` (old
and reference log-probs, the micro-batches' forward + backward, the optimizer step) with the GPU run's recipe
(beta 0.04, dapo, fast_paths). The figure is the process's peak resident memory during that call minus its
resident memory just before (Linux VmHWM, reset through /proc/self/clear_refs), so the weights, the adapter's
optimizer state and the import are not counted. bf16 weights as on the GPU; wall times are for this machine.

Groups (`--only`): vocab (256k is the Gemma tokenizer: how many bytes per logit row and vocabulary entry the
peak holds), micro (the same batch cut into smaller micro-batches: does micro_batch_size bound the peak?),
layers (small vocabulary, wider and deeper models: activation bytes per token per layer, with and without
grpo.gradient_checkpointing), standin (a 256k-vocabulary, 8-layer stand-in before/after: micro-batch and
checkpointing), chunk (the stand-in with grpo.logprob_chunk_tokens 0 / 512 / 128 / 32, and 0 / 128 with
checkpointing). The summary fits the per-logit and per-token-per-layer slopes and extrapolates them to the 2B
step (docs/findings/BENCHMARKS.md shows the arithmetic).
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

TINY = dict(hidden=64, inter=128, layers=2, heads=4, kv=2, head_dim=16)
WIDE = {256: dict(hidden=256, inter=1024, heads=4, kv=2, head_dim=64),
        512: dict(hidden=512, inter=2048, heads=8, kv=4, head_dim=64),
        1024: dict(hidden=1024, inter=4096, heads=8, kv=4, head_dim=128)}  # fmt: skip
BATCH = dict(prompts=4, G=8, prompt_len=32, tokens=16)  # 32 sequences, 16 trained tokens each


def _case(name: str, group: str, **kw) -> dict:
    case = {
        "name": name,
        "group": group,
        **TINY,
        **BATCH,
        "vocab": 256000,
        "micro": 32,
        "gc": False,
        "chunk": 0,
    }
    case.update(kw)
    return case


def cases() -> list[dict]:
    out = [_case(f"vocab {v}", "vocab", vocab=v) for v in (16000, 64000, 128000, 256000)]
    out += [_case(f"micro {m} of 32", "micro", micro=m) for m in (16, 8)]
    out += [_case("64 sequences, micro 64", "micro", prompts=8, micro=64)]
    for h in WIDE:
        for layers in (2, 8):
            for gc_on in (False, True):
                name = f"h{h} L{layers} gc {'on' if gc_on else 'off'}"
                out.append(_case(name, "layers", vocab=4096, layers=layers, gc=gc_on, tokens=64, **WIDE[h]))
    for micro, gc_on in ((32, False), (32, True), (8, False), (8, True)):
        name = f"stand-in micro {micro} gc {'on' if gc_on else 'off'}"
        out.append(_case(name, "standin", layers=8, micro=micro, gc=gc_on, **WIDE[256]))
    # grpo.logprob_chunk_tokens on the stand-in: 512 scored tokens per micro-batch, so 512 is one chunk (only
    # the checkpointing of the output layer), 128 and 32 are 4 and 16 chunks
    for chunk, gc_on in ((0, False), (512, False), (128, False), (32, False), (0, True), (128, True)):
        name = f"stand-in micro 32 gc {'on' if gc_on else 'off'} chunk {chunk}"
        out.append(_case(name, "chunk", layers=8, micro=32, gc=gc_on, chunk=chunk, **WIDE[256]))
    return out


def _resident_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _policy(case: dict):
    import torch
    from peft import LoraConfig
    from transformers import Gemma2Config, Gemma2ForCausalLM

    from prefpipe.common.torch_runtime.transformers_api import get_peft_model

    cfg = Gemma2Config(
        vocab_size=case["vocab"], hidden_size=case["hidden"], intermediate_size=case["inter"],
        num_hidden_layers=case["layers"], num_attention_heads=case["heads"], num_key_value_heads=case["kv"],
        head_dim=case["head_dim"], sliding_window=4096, query_pre_attn_scalar=case["head_dim"],
        attn_logit_softcapping=50.0, final_logit_softcapping=30.0, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Gemma2ForCausalLM(cfg).to(torch.bfloat16)
    lora = LoraConfig(
        r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
    )
    return get_peft_model(model, lora), model.config._attn_implementation


def _rollout(case: dict):
    import torch

    from prefpipe.grpo.rollout.completions import Rollout

    g = torch.Generator().manual_seed(1)
    n, P, C, V = case["prompts"] * case["G"], case["prompt_len"], case["tokens"], case["vocab"]
    prompts = torch.randint(3, V, (case["prompts"], P), generator=g).repeat_interleave(case["G"], 0)
    ones = torch.ones(n, C, dtype=torch.long)
    return Rollout(
        prompt_ids=prompts, prompt_mask=torch.ones_like(prompts), completion_ids=torch.randint(3, V, (n, C), generator=g),
        completion_mask=ones, env_mask=ones.clone(), truncated=torch.ones(n, dtype=torch.bool),
        prompt_truncated=torch.zeros(n, dtype=torch.bool), texts=[""] * n,
    )  # fmt: skip


def worker(case: dict) -> dict:
    """One update's peak over its starting resident memory (KiB -> bytes), and its wall seconds."""
    import torch
    from support.settings import grpo_settings

    from prefpipe.grpo.algorithm.reference import build_reference
    from prefpipe.grpo.algorithm.update import Learner, StepBatch, make_adamw, update
    from prefpipe.grpo.data_parallel import DataParallel
    from prefpipe.grpo.logprobs import set_logprob_chunk_tokens

    torch.set_num_threads(1)
    settings = grpo_settings({
        "prompts_per_step": case["prompts"], "num_generations": case["G"], "max_new_tokens": case["tokens"],
        "beta": 0.04, "loss_type": "dapo", "mask_truncated_completions": False, "micro_batch_size": case["micro"],
        "gradient_checkpointing": case["gc"], "lora": {"enabled": True}, "device": "cpu", "dtype": "bfloat16",
        "logprob_chunk_tokens": case["chunk"],
    })  # fmt: skip
    policy, attention = _policy(case)
    set_logprob_chunk_tokens(policy, settings.logprob_chunk_tokens)  # as GRPOTrainer does (no trainer here)
    params = [p for p in policy.parameters() if p.requires_grad]
    reference = build_reference(policy, "fresh", True, settings.reference_mode)
    learner = Learner(settings, policy, make_adamw(params, settings), params, reference, DataParallel(),
                      torch.device("cpu"))  # fmt: skip
    rollout = _rollout(case)
    n = rollout.completion_ids.shape[0]
    advantages = torch.randn(n, generator=torch.Generator().manual_seed(2))
    batch = StepBatch([{}] * n, rollout, advantages.clone(), {}, advantages)
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = _resident_kib("VmRSS")
    t0 = time.perf_counter()
    metrics = update(learner, batch)
    wall = time.perf_counter() - t0
    peak = _resident_kib("VmHWM") - before
    return {"peak_bytes": peak * 1024, "wall_s": wall, "attention": attention, "loss": metrics["loss"],
            "grad_norm": metrics["grad_norm"]}  # fmt: skip


def _run(case: dict) -> dict:
    """The case in a child whose glibc malloc maps every block over 64 KiB on its own and unmaps it when
    freed: the resident peak then follows the live tensors (with glibc's default, a freed block below its
    moving threshold of up to 32 MiB stays resident, and activation-sized tensors blur the figure)."""
    env = common.child_env()
    env.update(MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="65536", MALLOC_ARENA_MAX="1")
    cmd = [sys.executable, __file__, "--worker", json.dumps(case)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        raise RuntimeError(res.stderr[-2000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def fit(rows: list[dict]) -> dict:
    """Least-squares slopes: bytes per (logit row x vocabulary entry) from the vocab group, bytes per token per
    layer (gc off and on) from the layers group at each width."""
    import numpy as np

    out: dict = {}
    vocab = [r for r in rows if r["group"] == "vocab" and "peak_bytes" in r]
    if len(vocab) >= 2:
        logit_rows = vocab[0]["prompts"] * vocab[0]["G"] * vocab[0]["tokens"]
        slope, icpt = np.polyfit([r["vocab"] for r in vocab], [r["peak_bytes"] for r in vocab], 1)
        out["bytes_per_logit"] = slope / logit_rows
        out["vocab_intercept_bytes"] = icpt
    for h in WIDE:
        for gc_on in (False, True):
            pts = [r for r in rows if r["group"] == "layers" and r["hidden"] == h and r["gc"] is gc_on]
            if len(pts) == 2 and all("peak_bytes" in r for r in pts):
                a, b = sorted(pts, key=lambda r: r["layers"])
                tokens = a["prompts"] * a["prompt_len"] + a["prompts"] * a["G"] * a["tokens"]
                per_layer = (b["peak_bytes"] - a["peak_bytes"]) / (b["layers"] - a["layers"]) / tokens
                out[f"bytes_per_token_layer_h{h}_gc_{'on' if gc_on else 'off'}"] = per_layer
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--only", default="vocab,micro,layers,standin,chunk")
    ap.add_argument(
        "--smoke", action="store_true", help="two tiny cases (chunk 0, 4), 4k vocabulary, 4 sequences (CI)"
    )
    ap.add_argument("--out", type=Path, default=common.OUT / "grpo_memory.json")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(json.loads(a.worker))))
        return
    groups = set(a.only.split(","))
    chosen = [c for c in cases() if c["group"] in groups]
    if a.smoke:
        smoke = dict(vocab=4096, prompts=2, G=2, prompt_len=8, tokens=4, micro=4)
        chosen = [_case("smoke", "vocab", **smoke), _case("smoke chunk 4", "chunk", chunk=4, **smoke)]
    rows = []
    for case in chosen:
        try:
            res = _run(case)
        except RuntimeError as exc:  # one case out of memory or failing: the others still run
            res = {"error": str(exc)[-600:]}
        rows.append({**case, **res})
        peak = f"{res['peak_bytes'] / 2**20:8.1f} MiB" if "peak_bytes" in res else res["error"][-200:]
        print(f"{case['name']:<28} {peak}  ({res.get('wall_s', 0):.1f} s)", flush=True)
        payload = {"what": "GRPO update peak memory, CPU (benchmarks/grpo_memory.py)", "rows": rows,
                   "fit": fit(rows), "when": time.strftime("%Y-%m-%d %H:%M:%S")}  # fmt: skip
        a.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = a.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(payload, indent=1))
        tmp.replace(a.out)
    print(json.dumps(fit(rows), indent=1))


if __name__ == "__main__":
    main()
