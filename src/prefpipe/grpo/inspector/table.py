"""The one-step inspector's table: one GRPO step laid out token by token, recomputed from what
grpo/inspector/save.py kept (prefpipe.inspect_grpo runs it, report/inspect_step_page.py renders it).

For every completion and every scored token: the token, whether it carries loss, log pi and log pi_ref, the
ratio rho = exp(log pi - log pi_old) (1 on the step's first pass, where pi_old = pi), whether the clip is
active, the advantage, the per-token k3 KL, the sampling engine's importance weight w_t when an engine such as
vLLM sampled the step, and the token's contribution to the loss. The per-token loss
l_t = w_t * objective_t + beta * KL_t (objective_t of grpo.policy_objective, e.g. -min(rho A, clip(rho) A);
grpo/algorithm/objectives.py) is the trainer's own (grpo/algorithm/update.py `micro_batch_loss`); the
contribution is l_t times the weight d loss / d l_t of the configured aggregation (grpo.loss_type, from the
registry in grpo/algorithm/losses.py, taken by autograd): every aggregation is linear in the l_t, so the
contributions add up to the loss exactly. The spans (micro-batches, masks) are the trainer's own
(grpo/algorithm/spans.py), so the table's loss is the trainer's first-pass loss for that step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from prefpipe.grpo.algorithm.advantages import group_advantages
from prefpipe.grpo.algorithm.losses import BatchNorms, aggregate
from prefpipe.grpo.algorithm.reference import ReferencePolicy
from prefpipe.grpo.algorithm.spans import Span, loss_spans, plain_span
from prefpipe.grpo.algorithm.update import micro_batch_loss
from prefpipe.grpo.kl import per_token_kl
from prefpipe.grpo.rollout.completions import Rollout
from prefpipe.settings.grpo import GrpoSettings


@dataclass
class TokenRow:
    completion: int  # row of the batch (prompt-major: prompt = completion // G)
    position: int  # completion token index; negative for prompt tokens (with_prompt mask only)
    token: str
    role: str  # prompt | completion | post_eos
    mask: int
    logp: float
    ref_logp: float | None
    ratio: float
    clipped: str  # "" | low | high
    advantage: float
    kl_k3: float | None
    sampler_weight: float | None  # w_t of the engine's importance correction; None: the policy sampled
    loss: float  # per-token loss l_t (0 off the mask)
    contribution: float  # weight * l_t: the token's share of the step loss


@dataclass
class StepTable:
    step: int
    loss_type: str
    beta: float
    num_tokens: int
    num_sequences: int
    table_loss: float
    tokens: list[TokenRow] = field(default_factory=list)
    groups: list[dict[str, Any]] = field(default_factory=list)


def _groups(rows, rewards, parts, advantages, settings: GrpoSettings, texts) -> list[dict[str, Any]]:
    G = settings.num_generations
    adv = group_advantages(rewards, G, settings.scale_rewards, settings.advantage_eps)
    out = []
    for p, row in enumerate(rows):
        idx = range(p * G, (p + 1) * G)
        out.append(
            {
                "prompt_id": row["id"],
                "prompt": row["prompt"],
                "answer": row.get("answer"),
                "rewards": [float(rewards[i]) for i in idx],
                "parts": {name: [float(v[i]) for i in idx] for name, v in parts.items()},
                "mean": float(adv.group_mean[p]),
                "std": float(adv.group_std[p]),
                "advantages": [float(advantages[i]) for i in idx],
                "completions": [texts[i] for i in idx],
            }
        )
    return out


@dataclass
class SpanLoss:
    """One micro-batch's first-pass loss terms per scored token (span layout)."""

    logp: torch.Tensor
    ref: torch.Tensor | None
    clip: dict[str, torch.Tensor]
    k3: torch.Tensor | None
    weights: torch.Tensor | None  # the sampler's importance weights
    per_token: torch.Tensor
    contribution: torch.Tensor  # d loss / d l_t * l_t
    loss: float


def _span_loss(
    settings: GrpoSettings,
    learner: tuple[torch.nn.Module, ReferencePolicy | None],
    rollout: Rollout,
    sp: Span,
    adv: torch.Tensor,
    norms: BatchNorms,
) -> SpanLoss:
    """The trainer's loss on one span, computed by its own per-token loss, and each token's weight in it."""
    policy, reference = learner
    mb = plain_span(rollout, sp)
    with torch.no_grad():
        logp = mb.logprobs(policy, settings.temperature)[0]
        ref = reference.span_logprobs(mb, settings.temperature) if settings.kl_to_reference else None
    terms = micro_batch_loss(settings, rollout, mb, (logp, logp, ref), adv)  # first pass: pi_old = pi
    k3 = None if ref is None else per_token_kl(logp, ref, sp.mask, "k3", settings.log_ratio_clamp)
    leaf = terms.per_token.detach().clone().requires_grad_(True)
    span_loss = aggregate(leaf, sp.mask, settings.loss_type, norms)
    (weight,) = torch.autograd.grad(span_loss, leaf)
    contribution = weight * terms.per_token.detach()
    return SpanLoss(
        logp,
        ref,
        terms.clip,
        k3,
        terms.sampler_weights,
        terms.per_token,
        contribution,
        float(span_loss.detach()),
    )


def _role(rollout: Rollout, sp: Span, r: int, t: int) -> str | None:
    """prompt | completion | post_eos for scored token t of span row r; None for a token not shown (left
    padding, or post-EOS tokens without loss)."""
    row, position = sp.rows.start + r, t - sp.n_prompt
    if position < 0:
        return "prompt" if int(rollout.prompt_mask[row, t + 1]) else None
    role = "completion" if int(rollout.completion_mask[row, position]) else "post_eos"
    return None if role == "post_eos" and not int(sp.mask[r, t]) else role


def _token_rows(tokenizer, rollout: Rollout, sp: Span, adv: torch.Tensor, terms: SpanLoss) -> list[TokenRow]:
    span_ids = rollout.input_ids[sp.rows, sp.width - sp.n_scored : sp.width]
    out = []
    for r in range(span_ids.shape[0]):
        for t in range(sp.n_scored):
            role = _role(rollout, sp, r, t)
            if role is None:
                continue
            on = int(sp.mask[r, t])
            out.append(
                TokenRow(
                    completion=sp.rows.start + r,
                    position=t - sp.n_prompt,
                    token=tokenizer.decode([int(span_ids[r, t])], skip_special_tokens=False),
                    role=role,
                    mask=on,
                    logp=float(terms.logp[r, t]),
                    ref_logp=None if terms.ref is None else float(terms.ref[r, t]),
                    ratio=float(terms.clip["ratio"][r, t]),
                    clipped="low"
                    if terms.clip["low"][r, t]
                    else ("high" if terms.clip["high"][r, t] else ""),
                    advantage=float(adv[r]),
                    kl_k3=None if terms.k3 is None else float(terms.k3[r, t]),
                    sampler_weight=None if terms.weights is None else float(terms.weights[r, t]),
                    loss=float(terms.per_token[r, t]) * on,
                    contribution=float(terms.contribution[r, t]),
                )
            )
    return out


def step_table(
    settings: GrpoSettings,
    policy: torch.nn.Module,
    reference: ReferencePolicy | None,
    tokenizer,
    rollout: Rollout,
    advantages: torch.Tensor,
    step: int,
) -> StepTable:
    """Recompute the step's first-pass loss token by token with the trainer's own functions."""
    spans = loss_spans(
        rollout, settings.mask_mode_at(step), settings.mask_truncated_completions, settings.micro_batch_size
    )
    n = rollout.completion_ids.shape[0]
    norms = BatchNorms(n, sum(int(sp.mask.sum()) for sp in spans), len(spans), settings.sampled_tokens)
    table = StepTable(step, settings.loss_type, settings.beta, norms.num_tokens, n, 0.0)
    policy.train()  # the trainer scores in train mode
    for sp in spans:
        adv = advantages[sp.rows].float()
        terms = _span_loss(settings, (policy, reference), rollout, sp, adv, norms)
        table.table_loss += terms.loss
        table.tokens += _token_rows(tokenizer, rollout, sp, adv, terms)
    return table


def attach_groups(
    table: StepTable, rows, rewards, parts, advantages, settings: GrpoSettings, texts
) -> StepTable:
    table.groups = _groups(rows, rewards, parts, advantages, settings, texts)
    return table
