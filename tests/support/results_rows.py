"""The made-up but internally consistent numbers of the report tests' results tree (see results_tree.py):
per-variant quality, planted GRPO problems, and the summary / metrics rows each stage would write."""

from __future__ import annotations

import math
from typing import Any

SYNTHETIC_SECTIONS = {
    "chat": ["chat-arith", "chat-instruct"],
    "chat_hard": ["chathard-arith", "chathard-instruct"],
    "safety": ["safety-refuse", "safety-comply"],
    "reasoning": ["reasoning-multistep"],
}
REAL_SECTIONS = {  # a few official subsets only: every section is partial
    "chat": ["alpacaeval-easy", "mt-bench-easy"],
    "chat_hard": ["llmbar-natural"],
    "safety": ["refusals-dangerous", "donotanswer"],
    "reasoning": ["hep-python"],
}
REAL_MISSING = {
    "chat": ["alpacaeval-length", "alpacaeval-hard", "mt-bench-med"],
    "chat_hard": ["mt-bench-hard", "llmbar-adver-neighbor"],
    "safety": ["refusals-offensive", "xstest-should-refuse", "xstest-should-respond"],
    "reasoning": ["math-prm", "hep-cpp"],
}
QUALITY = {
    "bt": 0.70,
    "gpm": 0.85,
    "bgpm": 0.83,
    "bgpm-broken": 0.52,
    "bgpm-broken+warmup": 0.61,
    "bgpm-broken+klweight": 0.76,
}
CYCLIC = {
    "bt": 0.62,
    "gpm": 0.97,
    "bgpm": 0.95,
    "bgpm-broken": 0.48,
    "bgpm-broken+warmup": 0.7,
    "bgpm-broken+klweight": 0.9,
}
FIXED_BAYES = {
    "kl_warmup_steps": 1000,
    "max_kl_weight": 1e-4,
    "prior_variance": 10.0,
    "logvar_init_scale": 0.1,
    "kl_mean_space": "normalized",
}
BROKEN_BAYES = {
    "kl_warmup_steps": 0,
    "max_kl_weight": 1.0,
    "prior_variance": 1.0,
    "logvar_init_scale": 1.0,
    "kl_mean_space": "raw",
}
RUNS = {"gpm-verifier": "gpm", "bgpm-riskaverse": "bgpm"}
# Planted GRPO problems (run -> check -> first step), with default report thresholds.
PLANTED = {
    "gpm-verifier": {"zero-std groups": 0},
    "bgpm-riskaverse": {
        "KL above limit": 17,
        "KL spike": 17,
        "log-ratio blow-up": 17,
        "grad norm above limit": 18,
        "grad norm spike": 18,
        "truncation": 22,
        "non-finite": 25,
    },
}
EVIL = '<script>alert("x")</script> <img src="http://evil.example/x.png"> & done'
VERSIONS = {
    "packages": {
        "python": "3.11.2",
        "prefpipe": "0.1.0",
        "torch": "2.13.0",
        "transformers": "5.23.0",
        "pandas": "3.1.1",
    },
    "device": {"platform": "Linux-x86_64", "cpu_count": 2, "torch_threads": 2, "cuda": False},
    "argv": ["python", "-m", "prefpipe.stage"],
}


def _benchmark(
    variant: str, sections: dict[str, list[str]], n: int, shift: float, missing: dict
) -> dict[str, Any]:
    """One benchmark summary in the evaluation stage's shape, plus the expected section/overall values."""
    q = QUALITY[variant] + shift
    subsets, secs = {}, {}
    for s_index, (section, names) in enumerate(sections.items()):
        for i, name in enumerate(names):
            p = min(0.99, max(0.01, q + 0.04 * (i - s_index % 2)))
            k = round(p * n)
            acc = k / n
            subsets[name] = {
                "accuracy": acc,
                "n": n,
                "n_correct": k,
                "stderr": math.sqrt(acc * (1 - acc) / n),
                "section": section,
            }
        # independent computation: count-weighted mean (all weights = n here) and its binomial stderr
        accs = [subsets[s]["accuracy"] for s in names]
        score = sum(a * n for a in accs) / (n * len(names))
        stderr = math.sqrt(sum((1 / len(names)) ** 2 * subsets[s]["stderr"] ** 2 for s in names))
        secs[section] = {
            "title": section,
            "score": score,
            "stderr": stderr,
            "n": n * len(names),
            "partial": bool(missing.get(section)),
            "missing_subsets": missing.get(section, []),
            "subsets": names,
        }
    overall = sum(s["score"] for s in secs.values()) / len(secs)
    cyc = round((CYCLIC[variant] + shift) * n) / n
    bins = []  # top-label confidence bins on [0.5, 1] as the evaluation stage writes them; the last one empty
    for b in range(5):
        conf = 0.55 + 0.1 * b if b < 4 else None
        acc = None if conf is None else min(1, conf + (q - 0.75) * 0.3)
        bins.append(
            {
                "lower": 0.5 + 0.1 * b,
                "upper": 0.6 + 0.1 * b,
                "confidence": conf,
                "accuracy": acc,
                "count": 0 if conf is None else 20 + 5 * b,
            }
        )
    selective = [
        {"coverage": c, "accuracy": min(1.0, q + 0.1 * (1 - c)), "n": int(c * n)}
        for c in (0.2, 0.4, 0.6, 0.8, 1.0)
    ]
    return {
        "subsets": subsets,
        "sections": secs,
        "overall": overall,
        "overall_stderr": math.sqrt(sum(s["stderr"] ** 2 for s in secs.values())) / len(secs),
        "overall_definition": "plain mean of the sections present",
        "cyclic": {
            "subsets": {"cyclic-rps": {"accuracy": cyc, "n": n}},
            "accuracy": cyc,
            "n": n,
            "missing_subsets": [],
        },
        "calibration": {
            "ece": round(abs(0.9 - q) / 3, 4),
            "brier": round(0.25 - (q - 0.5) * 0.3, 4),
            "nll": round(0.69 - (q - 0.5) * 0.8, 4),
            "mean_confidence": round(0.6 + (q - 0.5) * 0.5, 4),
            "reliability": bins,
            "selective_criterion": (
                "abstain on the largest posterior probability of a flipped decision, Phi(-|m| / sd)"
            )
            if variant.startswith("bgpm")
            else "abstain on the smallest |P - 0.5|",
            "selective": selective,
        },
        "pairs_per_second": 120.0,
        "n_pairs": n * sum(len(v) for v in sections.values()),
    }


def _reward_rows(variant: str, steps: int) -> list[dict[str, Any]]:
    q = QUALITY[variant]
    bayes = variant.startswith("bgpm")
    cfg = BROKEN_BAYES if "broken" in variant else FIXED_BAYES
    rows = []
    for t in range(steps):
        data = 0.69 * math.exp(-3 * (q - 0.5) * t / steps) + 0.01 * math.sin(t)
        beta = (
            min(1.0, t / cfg["kl_warmup_steps"]) * cfg["max_kl_weight"]
            if cfg["kl_warmup_steps"]
            else cfg["max_kl_weight"]
        )
        kl = 2.0 * math.exp(-t / steps) if bayes else 0.0
        row = {
            "step": t,
            "time": 0.3 * t,
            "preference_loss": data,
            "kl_loss": kl,
            "kl_beta": beta if bayes else 0.0,
        }
        row.update(
            loss=data + (beta * kl if bayes else 0.0),
            prob=0.5 + (q - 0.5) * t / steps,
            accuracy=0.5 + (q - 0.5) * t / steps,
        )
        row.update(grad_norm=1.0 + 0.1 * math.cos(t), lr=1e-3)
        rows.append(row)
    return rows


def _grpo_rows(run: str, steps: int) -> list[dict[str, Any]]:
    rows = []
    bad = run == "bgpm-riskaverse"
    for t in range(steps):
        k3 = 0.01 + 0.001 * t
        log_ratio = 0.5
        grad = 2.0 + 0.1 * math.sin(t)
        if bad and t >= 17:
            k3, log_ratio = 5.0 + t, 13.0
        if bad and t >= 18:
            grad = 500.0
        row = {"step": t, "time": 2.0 * t, "reward_mean": 0.2 + 0.02 * t, "reward_std": 0.3}
        row["frac_reward_zero_std"] = 0.75 if (not bad and t < 3) else 0.1
        row.update(
            entropy=1.5 - 0.02 * t,
            grad_norm=grad,
            truncated_ratio=0.4 if (bad and t >= 22) else 0.05,
            prompt_loss_share=0.0,
            env_loss_share=0.0,
        )
        row.update(step_time=1.8, loss=0.01, custom_debug_value=1)
        phases = {"rollout": 1.0, "reward": 0.2, "logprobs": 0.1, "update": 0.4, "sync": 0.0, "other": 0.1}
        row.update(
            {f"phase/{p}_s": v for p, v in phases.items()}
            | {f"phase/{p}_share": v / 1.8 for p, v in phases.items()}
        )
        kl = {"k1": k3 * 0.9, "k2": k3 * 0.8, "k3": k3}
        # the names train_grpo writes (prefpipe.grpo.algorithm.diagnostics / trainer)
        row.update({"reward/verifier_mean": 0.1 + 0.02 * t, "reward/verifier_std": 0.4})
        row.update({"reward/gpm_mean": 0.05 * math.sin(t), "reward/gpm_std": 0.2})
        row.update(adv_abs_mean=0.7, adv_abs_max=1.9, max_abs_log_ratio=log_ratio, kl_loss=0.001)
        row.update({f"kl_{k}_mean": v for k, v in kl.items()} | {f"kl_{k}_max": 3 * v for k, v in kl.items()})
        row.update(clip_ratio_low=0.01, clip_ratio_high=0.02, clip_ratio_region=0.03, grad_norm_max=grad)
        row.update(completion_length_mean=20 + 0.3 * t, completion_length_min=5, completion_length_max=32)
        row.update(prompt_truncation_rate=0.0, tokens_per_second=900.0, num_tokens=1800, policy_loss=0.01)
        if bad and t == 25:
            row["loss"] = float("nan")
        rows.append(row)
    return rows


def _sample(run: str, rm: str, step: int, j: int) -> dict[str, Any]:
    row = {"step": step, "prompt": f"What is {step} + {j}?", "answer": str(step + j)}
    row.update(
        completion=f"The answer is {step + j}. {EVIL}",
        reward=0.5 + 0.1 * j,
        rewards={"verifier": 1.0, rm: 0.1 * j},
    )
    marked = f"[[The]] [[answer]] [[is]] [[{step + j}]]"
    if run == "gpm-verifier":  # train_grpo's shape: the token audit nested under "audit"
        row.update(
            id=f"p{j}", truncated=False, advantage=0.25 * j - 0.4, audit={"tokens": ["The"], "marked": marked}
        )
    else:
        row["marked"] = marked
    return row


def _policy_summary(run: str, base: float, trained: float) -> dict[str, Any]:
    """eval_policy's summary shape for gpm-verifier; an older flat spelling for the other run."""
    if run != "gpm-verifier":
        side = {"reward_score": -0.12, "length_mean": 18.5}
        return {
            "n_prompts": 200,
            "base": {"verifier_accuracy": base, "verifier_accuracy_ci95": [base - 0.06, base + 0.07], **side},
            "trained": {
                "verifier_accuracy": trained,
                "verifier_accuracy_ci95": [trained - 0.07, trained + 0.07],
                **side,
                "reward_score": 0.41,
                "kl_k3": 0.051,
                "kl_k1": 0.047,
            },
            "win_rate": 0.64,
            "win_rate_ci95": [0.57, 0.70],
        }

    def block(acc: float, lo: float, hi: float, length: float) -> dict[str, Any]:
        return {"accuracy": acc, "accuracy_ci95": [lo, hi], "correct": round(acc * 200), "n": 200}

    def compare(b: float, t: float) -> dict[str, Any]:
        base_block = {**block(b, b - 0.06, b + 0.07, 18.5), "mean_length": 18.5, "truncated_ratio": 0.1}
        trained_block = {**block(t, t - 0.07, t + 0.07, 21.0), "mean_length": 21.0, "truncated_ratio": 0.02}
        return {
            "base": base_block,
            "trained": trained_block,
            "accuracy_delta": t - b,
            "intervals_overlap": False,
        }

    primary = compare(base, trained)
    return {
        "n_prompts": 200,
        "skipped_rows": {},
        "decoding": "sampled",
        **primary,
        "decodings": {"sampled": primary, "greedy": compare(base + 0.1, trained + 0.05)},
        "reward_model": {
            "head_type": "gpm",
            "win_rate": 0.64,
            "tie_rate": 0.01,
            "loss_rate": 0.35,
            "mean_score_trained_over_base": 0.33,
            "folder": "results/reward/gpm/model",
        },
        "kl_to_base": {
            "k1_token_mean": 0.047,
            "k3_token_mean": 0.051,
            "k1_sequence_mean": 0.9,
            "k3_sequence_mean": 1.0,
        },
    }
