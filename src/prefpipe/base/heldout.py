"""Held-out verifier accuracy of a policy: one sampled and one greedy completion per held-out RL prompt.

Sampled accuracy (temperature 1 by default) is what RL starts from; greedy accuracy shows whether the correct
answer is the policy's mode. Greedy well above sampled means the answer is inside the policy's support and
GRPO has room to sharpen the distribution.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

from prefpipe.common.chat import format_prompt
from prefpipe.common.progress import progress
from prefpipe.data.verifier import verify
from prefpipe.generation.rl_prompts import NOT_APPLICABLE, has_answers
from prefpipe.generation.tokens import eos_token_ids
from prefpipe.settings.base import HeldoutEvalSettings


@torch.no_grad()
def generate_completions(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    max_new_tokens: int,
    greedy: bool,
    batch_size: int,
    temperature: float | None = None,
    top_p: float | None = None,
    seed: int | None = None,
) -> list[str]:
    """Decode one completion per prompt (chat-formatted, left-padded batches, special tokens skipped)."""
    model.eval()
    padding_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    if not greedy:  # sampling: same seed, same completions (greedy decoding draws nothing)
        torch.manual_seed(seed)
    out: list[str] = []
    try:
        starts = range(0, len(prompts), batch_size)
        label = "held-out decode " + ("greedy" if greedy else "sampled")
        for start in progress(starts, len(starts), label):
            texts = [format_prompt(tokenizer, p) for p in prompts[start : start + batch_size]]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(
                model.device
            )
            sampling = {} if greedy else {"temperature": temperature, "top_p": top_p, "top_k": 0}
            generated = model.generate(
                **enc,
                do_sample=not greedy,
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=eos_token_ids(tokenizer, model),  # chat end markers (<|im_end|>) included
                **sampling,
            )
            new_tokens = generated[:, enc["input_ids"].shape[1] :]
            out.extend(tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
    finally:
        tokenizer.padding_side = padding_side
    return out


def heldout_accuracy(
    model: Any, tokenizer: Any, rows: list[dict], eval_settings: HeldoutEvalSettings, seed: int
) -> tuple[dict[str, Any], list[dict]]:
    """Accuracy summary (overall and per kind, with counts) and one sample row per prompt.

    Prompts without answers (reward-model-only GRPO) cannot be graded: nothing is generated and the summary says
    accuracy does not apply (its accuracies are null)."""
    if not has_answers(rows):
        summary = {"n": len(rows), "accuracy_applicable": False, "not_applicable": NOT_APPLICABLE}
        return summary | {"sampled_accuracy": None, "greedy_accuracy": None, "per_kind": {}}, []
    prompts = [r["prompt"] for r in rows]
    common = {"max_new_tokens": eval_settings.max_new_tokens, "batch_size": eval_settings.batch_size}
    temperature = eval_settings.temperature
    sampled = generate_completions(
        model,
        tokenizer,
        prompts,
        greedy=False,
        temperature=temperature,
        top_p=eval_settings.top_p,
        seed=seed,
        **common,
    )
    greedy = generate_completions(model, tokenizer, prompts, greedy=True, **common)
    samples = [_graded(row, s, g) for row, s, g in zip(rows, sampled, greedy, strict=True)]
    n = len(rows)
    n_s = sum(s["sampled_correct"] for s in samples)
    n_g = sum(s["greedy_correct"] for s in samples)
    summary = {
        "n": n,
        "accuracy_applicable": True,
        "temperature": temperature,
        "sampled_correct": n_s,
        "sampled_accuracy": n_s / n if n else None,
        "greedy_correct": n_g,
        "greedy_accuracy": n_g / n if n else None,
        "per_kind": _per_kind(samples),
    }
    return summary, samples


def _graded(row: dict, sampled: str, greedy: str) -> dict[str, Any]:
    """One held-out sample row: both completions and whether the verifier accepts each."""
    aliases = row.get("aliases") or []
    return {
        "id": row["id"],
        "kind": row["kind"],
        "prompt": row["prompt"],
        "answer": row["answer"],
        "sampled": sampled,
        "sampled_correct": verify(row["kind"], row["answer"], sampled, aliases),
        "greedy": greedy,
        "greedy_correct": verify(row["kind"], row["answer"], greedy, aliases),
    }


def _per_kind(samples: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Counts and accuracies per task kind (kinds sorted)."""
    per_kind: dict[str, dict[str, int]] = defaultdict(
        lambda: {"n": 0, "sampled_correct": 0, "greedy_correct": 0}
    )
    for sample in samples:
        counts = per_kind[sample["kind"]]
        counts["n"] += 1
        counts["sampled_correct"] += sample["sampled_correct"]
        counts["greedy_correct"] += sample["greedy_correct"]
    return {
        k: {
            **v,
            "sampled_accuracy": v["sampled_correct"] / v["n"],
            "greedy_accuracy": v["greedy_correct"] / v["n"],
        }
        for k, v in sorted(per_kind.items())
    }
