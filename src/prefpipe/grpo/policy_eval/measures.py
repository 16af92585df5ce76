"""What is measured on a policy (the pieces grpo/policy_eval/stage.py puts together): completions for held-out
prompts, accuracy with its Wilson interval, KL to a reference policy."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import torch

from prefpipe.common.progress import progress
from prefpipe.common.stats import wilson_interval
from prefpipe.grpo.kl import kl_from_log_ratio, masked_log_ratio
from prefpipe.grpo.logprobs import completion_logprobs
from prefpipe.grpo.metric_names import ACCURACY, ACCURACY_CI95, KL_K3_TOKEN_MEAN, N
from prefpipe.grpo.rollout.completions import GenerationSettings, generate


@dataclass
class Completions:
    texts: list[str] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)

    def graded(self) -> list[str]:
        """What the verifier grades: the completion itself (an episode: its final answer)."""
        return self.texts


@torch.no_grad()
def complete(
    model,
    tokenizer,
    prompts: list[str],
    settings: GenerationSettings,
    batch_size: int,
    max_prompt_length: int | None,
    seed: int,
    label: str = "decode",
) -> Completions:
    """One completion per prompt, in batches; seeded per batch so the result does not depend on the order.
    `label` names the loop's progress in the log."""
    out = Completions()
    starts = range(0, len(prompts), batch_size)
    for b, start in enumerate(progress(starts, len(starts), label)):
        torch.manual_seed(seed * 100_003 + b)
        ro = generate(model, tokenizer, prompts[start : start + batch_size], 1, settings, max_prompt_length)
        out.texts.extend(ro.texts)
        out.lengths.extend(int(n) for n in ro.lengths)
        out.truncated.extend(bool(t) for t in ro.truncated)
    return out


@torch.no_grad()
def kl_to_reference(
    policy,
    reference,
    tokenizer,
    prompts: list[str],
    max_new_tokens: int,
    batch_size: int,
    max_prompt_length: int | None,
    seed: int,
    fast: bool,
) -> dict[str, float]:
    """KL(policy || reference) from completions sampled from the policy at temperature 1.

    Token means of k1 and k3 over completion tokens, and the sequence-level estimate (sum of k1 per
    completion, averaged), which is the KL between the two distributions over whole completions.
    """
    settings = GenerationSettings(
        max_new_tokens=max_new_tokens, temperature=1.0, top_p=1.0, top_k=0, fast=fast
    )
    sums: dict[str, float] = defaultdict(float)
    tokens = sequences = 0
    max_abs = 0.0
    starts = range(0, len(prompts), batch_size)
    for b, start in enumerate(progress(starts, len(starts), "KL to reference")):
        torch.manual_seed(seed * 100_003 + 50_000 + b)
        ro = generate(policy, tokenizer, prompts[start : start + batch_size], 1, settings, max_prompt_length)
        n = ro.completion_ids.shape[1]
        # KL(policy || reference) of the policies themselves: samples and scores at temperature 1
        logp, _ = completion_logprobs(policy, ro.input_ids, ro.attention_mask, n, 1.0)
        ref_logp, _ = completion_logprobs(reference, ro.input_ids, ro.attention_mask, n, 1.0)
        mask = ro.completion_mask
        log_ratio = masked_log_ratio(logp, ref_logp, mask)
        k1 = kl_from_log_ratio(log_ratio, "k1") * mask
        k3 = kl_from_log_ratio(log_ratio, "k3") * mask
        sums["k1"] += float(k1.sum())
        sums["k3"] += float(k3.sum())
        tokens += int(mask.sum())
        sequences += mask.shape[0]
        max_abs = max(max_abs, float(log_ratio.abs().max()))
    return {
        "k1_token_mean": sums["k1"] / max(tokens, 1),
        KL_K3_TOKEN_MEAN: sums["k3"] / max(tokens, 1),
        "k1_sequence_mean": sums["k1"] / max(sequences, 1),
        "k3_sequence_mean": sums["k3"] / max(sequences, 1),
        "max_abs_log_ratio": max_abs,
        "completions": sequences,
        "tokens": tokens,
    }


def decoding_settings(eval_settings, decoding: str, fast: bool) -> GenerationSettings:
    """How a policy is decoded for evaluation (grpo.<run>.eval): greedy, or sampled at eval.temperature."""
    return GenerationSettings(
        eval_settings.max_new_tokens,
        eval_settings.temperature,
        eval_settings.top_p,
        0,
        decoding == "sampled",
        fast=fast,
    )


def verifier_scores(rows: list[dict], texts: list[str]) -> list[float]:
    """The verifier's score of each completion against its row's answer (1.0 = accepted)."""
    from prefpipe.data.verifier import score

    return [score(r["kind"], r["answer"], t, r["aliases"]) for r, t in zip(rows, texts, strict=True)]


def accuracy_summary(correct: list[bool], kinds: list[str]) -> dict:
    n, k = len(correct), sum(correct)
    lo, hi = wilson_interval(k, n)
    per_kind: dict[str, list[bool]] = defaultdict(list)
    for ok, kind in zip(correct, kinds, strict=True):
        per_kind[kind].append(ok)
    return {
        ACCURACY: k / n if n else None,
        ACCURACY_CI95: [lo, hi],
        "correct": k,
        N: n,
        "per_kind": {kind: sum(v) / len(v) for kind, v in sorted(per_kind.items())},
    }
