"""Can the default scratch base learn to search the synthetic multi-hop world? SFT a fresh scratch base (the
default config's tokenizer and model sizes) on the world's tool-call demonstrations alone, then run greedy
episodes on held-out questions through the real search environment, and print exact match, tool calls per
episode, support recall and the seconds each part took.

python benchmarks/multihop_search.py [--steps 300] [--demos 2000] [--heldout 100] [--batch 32] [--eval-at 100,200]
    [--out FILE.json]

--eval-at also evaluates after those SFT steps (within the one run's warm-up + cosine schedule of --steps), so one
run gives the figures at several budgets.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import torch

from prefpipe.base.model import build_tiny_llama
from prefpipe.base.sft import encode_demonstrations, train_sft
from prefpipe.base.tokenizer import train_tokenizer
from prefpipe.config_checks import checked_pipeline
from prefpipe.data.synthetic_multihop import multihop_world
from prefpipe.data.verifier import score
from prefpipe.grpo.environments.base import EnvironmentRunner
from prefpipe.grpo.environments.registry import build_environment
from prefpipe.grpo.rollout.episodes.decode import EpisodeLimits, Sampling
from prefpipe.grpo.rollout.episodes.format import TagFormat
from prefpipe.grpo.rollout.episodes.generate import generate_episodes
from prefpipe.grpo.rollout.episodes.measures import support_recall, supporting_titles
from prefpipe.settings.pipeline import load_config

SEARCH = {"type": "search", "corpus": "row", "top_k": 1, "k1": 1.5, "b": 0.75}


def evaluate(model, tok, rows: list[dict], limits: EpisodeLimits) -> dict[str, float]:
    """Greedy episodes on `rows`: exact match, calls per episode, support recall, answered share."""
    batch = generate_episodes(
        model,
        tok,
        rows,
        [r["prompt"] for r in rows],
        1,
        lambda: EnvironmentRunner(build_environment(SEARCH), 400),
        TagFormat(),
        limits,
        Sampling(None, 1.0, 0, 1.0),
        None,
    )
    eps, n = batch.episodes, len(rows)
    em = [
        score("exact_match", r["answer"], e.answer or "", r["aliases"])
        for r, e in zip(rows, eps, strict=True)
    ]
    recall = [
        support_recall(supporting_titles(r), got or []) for r, got in zip(rows, batch.retrieved, strict=True)
    ]
    return {
        "exact_match": sum(em) / n,
        "calls_per_episode": sum(len(e.calls) for e in eps) / n,
        "support_recall": sum(recall) / n,
        "answered": sum(e.answer is not None for e in eps) / n,
        "example": tok.decode(eps[0].ids, skip_special_tokens=True),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--demos", type=int, default=2000)
    ap.add_argument("--heldout", type=int, default=100)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--shortcut", type=float, default=0.0, help="share of one-search shortcut demonstrations")
    ap.add_argument("--eval-at", default="", help="comma-separated SFT steps to evaluate at as well")
    ap.add_argument("--out", type=Path, default=None, help="also write the figures to this JSON file")
    args = ap.parse_args()
    torch.set_num_threads(2)
    base = checked_pipeline(load_config(), threads=2).base
    _, held, demos = multihop_world(0, 0, args.heldout, args.demos, 2, args.shortcut)
    t0 = time.perf_counter()
    texts = [d["prompt"] for d in demos] + [d["response"] for d in demos]
    tok = train_tokenizer(texts, base.tokenizer.vocab_size, base.model.max_position_embeddings)
    model = build_tiny_llama(base.model, tok, 0)
    data = encode_demonstrations(tok, demos, base.sft.max_length)
    lengths = sorted(len(ids) for ids, _ in data.examples)
    sft = dataclasses.replace(base.sft, steps=args.steps, batch_size=args.batch)
    print(
        f"tokenizer and encoding: {time.perf_counter() - t0:.1f} s; tokens median/max {lengths[len(lengths) // 2]}/{lengths[-1]}",
        flush=True,
    )
    limits = EpisodeLimits(max_turns=3, max_turn_tokens=24, max_episode_tokens=128)
    budgets: list[dict] = []
    eval_at = {int(x) for x in args.eval_at.split(",") if x}

    def at_step(step: int, **_) -> None:
        if step + 1 in eval_at and step + 1 < args.steps:
            t = time.perf_counter()
            got = evaluate(model, tok, held, limits)
            budgets.append({"steps": step + 1, **got, "eval_seconds": round(time.perf_counter() - t, 1)})
            print(json.dumps({k: v for k, v in budgets[-1].items() if k != "example"}), flush=True)

    loss = train_sft(model, data, sft, tok.pad_token_id, 0, log_step=at_step)
    print(f"sft: {time.perf_counter() - t0:.1f} s", flush=True)
    t_sft = time.perf_counter() - t0
    t1 = time.perf_counter()
    figures = evaluate(model.eval(), tok, held, limits)
    report = {
        "steps": args.steps,
        "demos": len(data.examples),
        "demo_tokens_median_max": [lengths[len(lengths) // 2], lengths[-1]],
        "sft_seconds": round(t_sft - sum(b["eval_seconds"] for b in budgets), 1),
        "eval_seconds": round(time.perf_counter() - t1, 1),
        "final_loss": loss.get("final_loss", loss.get("loss")),
        **figures,
        "earlier_budgets": budgets,
    }
    print(json.dumps(report, indent=1))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
