"""What the eval_policy stage does: base vs trained policy on held-out prompts (entry: prefpipe.eval_policy;
the measures themselves: grpo/policy_eval/measures.py).

Reports, for each policy: verifier accuracy with a 95% Wilson interval (and per task kind), mean completion
length and truncation; with a reward model: mean score (BT) and the win/tie/loss rate of trained over base
(s(trained > base | x) > 0, any head); KL(trained || base) as k1 and k3 means over completion tokens of
completions sampled from the trained policy. Writes summary.json and per_example.jsonl.

A multi-turn run (grpo.<run>.episodes.enabled) is evaluated on whole episodes through its environment
(grpo/policy_eval/episodes.py): accuracy is the exact match of the final answer, and each decoding adds an
`episodes` block (token F1, tool calls per episode, support recall, each trained - base paired over questions).
Its KL estimate still reads single-turn continuations of the prompt (the first policy turn's distribution).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import torch

from prefpipe.common.chat import conversation
from prefpipe.common.io import write_jsonl
from prefpipe.common.run_record import RunRecord
from prefpipe.common.stats import paired_difference
from prefpipe.common.torch_runtime.seeding import seed_everything
from prefpipe.generation.rl_prompts import NOT_APPLICABLE, has_answers
from prefpipe.grpo.analyses.paired import BASE, TRAINED, correct_key
from prefpipe.grpo.metric_names import (
    DECODING,
    DECODINGS,
    DECODINGS_KEY,
    KL_TO_BASE,
    PAIRED,
    REWARD_MODEL,
    WIN_RATE,
)
from prefpipe.grpo.policy_eval.episodes import complete_episodes, episode_columns, episode_comparison
from prefpipe.grpo.policy_eval.measures import (
    Completions,
    accuracy_summary,
    complete,
    decoding_settings,
    kl_to_reference,
    verifier_scores,
)
from prefpipe.grpo.policy_io import load_for_inference
from prefpipe.grpo.splits import evaluation_rows
from prefpipe.settings.build import to_mapping
from prefpipe.settings.grpo import GrpoSettings

log = logging.getLogger("prefpipe.eval_policy")


def _policy_block(name: str, comp, rows: list[dict], graded: bool) -> dict[str, Any]:
    """Accuracy (verifier score 1) with its interval and the mean verifier score; prompts without answers get
    `accuracy_applicable: false` and only the length figures."""
    n = len(rows)
    lengths = {"mean_length": sum(comp.lengths) / n, "truncated_ratio": sum(comp.truncated) / n}
    if not graded:
        block = {"accuracy": None, "accuracy_applicable": False, "not_applicable": NOT_APPLICABLE, "n": n}
        return block | lengths | {"_correct": [None] * n}
    scores = verifier_scores(rows, comp.graded())
    correct = [s >= 1.0 for s in scores]
    block = accuracy_summary(correct, [r["kind"] for r in rows])
    block.update({"accuracy_applicable": True, "mean_score": sum(scores) / n, **lengths})
    log.info("%s: accuracy %.3f [%.3f, %.3f]", name, block["accuracy"], *block["accuracy_ci95"])
    return block | {"_correct": correct}


def _compare_block(
    run_settings: GrpoSettings, decoding: str, comps: dict, rows: list[dict], graded: bool
) -> dict[str, Any]:
    """Accuracy of base and trained under one decoding, the difference paired over prompts (its bootstrap
    interval and McNemar's exact p) and whether the two Wilson intervals overlap."""
    blocks = {name: _policy_block(f"{name} ({decoding})", c, rows, graded) for name, c in comps.items()}
    correct = {name: block.pop("_correct") for name, block in blocks.items()}
    if not graded:
        return {**blocks, "accuracy_delta": None, "intervals_overlap": None, "_correct": correct}
    (b_lo, b_hi), (t_lo, t_hi) = blocks["base"]["accuracy_ci95"], blocks["trained"]["accuracy_ci95"]
    ev = run_settings.eval
    paired = paired_difference(
        [float(c) for c in correct["trained"]],
        [float(c) for c in correct["base"]],
        ev.bootstrap_samples,
        ev.confidence,
        run_settings.seed,
    )
    return {
        **blocks,
        "accuracy_delta": blocks["trained"]["accuracy"] - blocks["base"]["accuracy"],
        PAIRED: paired,
        "intervals_overlap": not (t_lo > b_hi or b_lo > t_hi),
        **(
            {"episodes": episode_comparison(run_settings, comps, rows, correct)}
            if run_settings.episodes.enabled
            else {}
        ),
        "_correct": correct,
    }


def _reward_model_block(
    rm, rows: list[dict], base_texts: list[str], trained_texts: list[str], batch_size: int
) -> dict[str, Any]:
    prompts = [conversation(r) for r in rows]
    enc_base = rm.encode(prompts, base_texts, batch_size=batch_size)
    enc_trained = rm.encode(prompts, trained_texts, batch_size=batch_size)
    score, var = rm.compare(enc_trained, enc_base)
    n = len(rows)
    out: dict[str, Any] = {
        "head_type": rm.head_type,
        WIN_RATE: float((score > 0).sum()) / n,
        "tie_rate": float((score == 0).sum()) / n,
        "loss_rate": float((score < 0).sum()) / n,
        "mean_score_trained_over_base": float(score.mean()),
    }
    if var is not None:
        out["mean_score_std"] = float(var.clamp(min=0).sqrt().mean())
    if rm.scalar_reward:
        out["base_mean_reward"] = float(rm.rewards(enc_base).mean())
        out["trained_mean_reward"] = float(rm.rewards(enc_trained).mean())
    return out | {"_scores": score.tolist()}


Policy = tuple[Any, Any]  # (model, tokenizer)


def _decode_all(
    run_settings: GrpoSettings, policies: dict[str, Policy], rows: list[dict]
) -> dict[str, dict[str, Completions]]:
    """{decoding: {"base" | "trained": completions}} for every decoding (greedy and sampled); whole episodes
    for a multi-turn run."""
    eval_settings = run_settings.eval
    prompts = [conversation(r) for r in rows]
    comps: dict[str, dict[str, Completions]] = {}
    for decoding in DECODINGS:
        if run_settings.episodes.enabled:
            comps[decoding] = {
                name: complete_episodes(
                    model, tok, rows, run_settings, decoding, f"episodes {decoding} ({name})"
                )
                for name, (model, tok) in policies.items()
            }
            continue
        settings = decoding_settings(eval_settings, decoding, run_settings.fast_paths)
        comps[decoding] = {
            name: complete(
                model,
                tok,
                prompts,
                settings,
                eval_settings.batch_size,
                eval_settings.max_prompt_length,
                run_settings.seed,
                f"decode {decoding} ({name})",
            )
            for name, (model, tok) in policies.items()
        }
    return comps


def _kl_block(run_settings: GrpoSettings, policies: dict[str, Policy], prompts: list[str]) -> dict[str, Any]:
    (base, base_tok), (trained, trained_tok) = policies["base"], policies["trained"]
    if base_tok.get_vocab() != trained_tok.get_vocab():
        return {"skipped": "base and trained tokenizers differ"}
    eval_settings = run_settings.eval
    return kl_to_reference(
        trained,
        base,
        trained_tok,
        prompts,
        eval_settings.max_new_tokens,
        eval_settings.batch_size,
        eval_settings.max_prompt_length,
        run_settings.seed,
        run_settings.fast_paths,
    )


def _per_example(
    rows: list[dict],
    texts: dict[str, list[str]],
    correct: dict[str, dict[str, list]],
    primary: str,
    scores: list[float] | None,
    episodes: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """One row per prompt: the primary decoding's texts and grades, every decoding's grades (paired.correct_key
    columns, what the report's paired comparisons read) and, for episodes, each side's answer, F1, calls and
    support recall."""
    return [
        {
            "id": r["id"],
            "kind": r["kind"],
            "prompt": r["prompt"],
            "answer": r["answer"],
            "base": texts["base"][i],
            "trained": texts["trained"][i],
            "base_correct": correct[primary]["base"][i],
            "trained_correct": correct[primary]["trained"][i],
            **{
                correct_key(side, decoding): by_side[side][i]
                for decoding, by_side in correct.items()
                for side in (BASE, TRAINED)
            },
            **({"score_trained_over_base": scores[i]} if scores is not None else {}),
            **episodes[i],
        }
        for i, r in enumerate(rows)
    ]


def evaluate(run_settings: GrpoSettings, args: argparse.Namespace) -> dict[str, Any]:
    eval_settings = run_settings.eval
    if run_settings.torch_threads:
        torch.set_num_threads(run_settings.torch_threads)
    seed_everything(run_settings.seed)
    out = Path(args.out)
    rows, skipped = evaluation_rows(
        args.data, eval_settings.split, run_settings.validation_prompts, eval_settings.max_prompts
    )
    record = RunRecord(out, "eval_policy", to_mapping(run_settings))
    policies = {
        "base": load_for_inference(args.base, run_settings.device),
        "trained": load_for_inference(args.policy, run_settings.device),
    }
    prompts = [conversation(r) for r in rows]
    graded = has_answers(rows)
    comps = _decode_all(run_settings, policies, rows)
    decodings = {
        decoding: _compare_block(run_settings, decoding, c, rows, graded) for decoding, c in comps.items()
    }
    correct = {decoding: block.pop("_correct") for decoding, block in decodings.items()}
    primary = decodings[eval_settings.primary]
    summary: dict[str, Any] = {
        "n_prompts": len(rows),
        "skipped_rows": skipped,
        "accuracy_applicable": graded,
        DECODING: eval_settings.primary,
        **primary,
        DECODINGS_KEY: decodings,
    }
    texts = {name: c.texts for name, c in comps[eval_settings.primary].items()}
    scores = None
    if args.reward_model:
        from prefpipe.reward.ensemble import folders_label, load_reward

        device = str(next(policies["trained"][0].parameters()).device)
        rm = load_reward(args.reward_model, device=device, fast_paths=run_settings.fast_paths)
        rm_block = _reward_model_block(
            rm, rows, texts["base"], texts["trained"], eval_settings.reward_batch_size
        )
        scores = rm_block.pop("_scores")
        summary[REWARD_MODEL] = rm_block | {"folder": folders_label(args.reward_model)}
    if eval_settings.kl_estimate:
        summary[KL_TO_BASE] = _kl_block(run_settings, policies, prompts)
    columns = episode_columns(rows, comps[eval_settings.primary])
    per_example = _per_example(rows, texts, correct, eval_settings.primary, scores, columns)
    write_jsonl(out / "per_example.jsonl", per_example)
    record.log(step=None, **{k: v for k, v in summary.items() if isinstance(v, int | float)})
    record.finish(summary)
    return summary


def run(run_settings: GrpoSettings, args: argparse.Namespace) -> None:
    summary = evaluate(run_settings, args)
    if not summary["accuracy_applicable"]:
        log.info("accuracy: %s", NOT_APPLICABLE)
        return
    log.info(
        "accuracy base %.3f -> trained %.3f (delta %+.3f, intervals overlap: %s)",
        summary["base"]["accuracy"],
        summary["trained"]["accuracy"],
        summary["accuracy_delta"],
        summary["intervals_overlap"],
    )
