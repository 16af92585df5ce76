"""One GRPO policy update: num_iterations optimizer passes over a step's batch (old log-probs stored once when
num_iterations > 1; otherwise the ratio is 1 with the gradient of log pi), and the metrics of the first pass.

The batch is cut into the trainer's micro-batches (`grpo/algorithm/spans.py`; with `fast_paths` each group's prompt is
forwarded once, `grpo/algorithm/fast/packing.py`); the loss of every micro-batch is normalised by batch-wide counts
(`losses.BatchNorms`, summed over data-parallel processes), so the accumulated gradient is the whole batch's.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from prefpipe.common.config import ConfigError
from prefpipe.common.optim.master_weights import MasterWeights, needs_master_weights
from prefpipe.common.torch_runtime.phases import PhaseClock
from prefpipe.common.torch_runtime.transformers_api import set_activation_checkpointing, unwrap_peft
from prefpipe.grpo.algorithm import diagnostics
from prefpipe.grpo.algorithm.fast.packing import SharedPromptSpan, share_prompt_span
from prefpipe.grpo.algorithm.losses import BatchNorms, TokenLoss, aggregate_loss, per_token_loss
from prefpipe.grpo.algorithm.reference import ReferencePolicy
from prefpipe.grpo.algorithm.spans import (
    PackedSpan,
    Span,
    completion_loss_mask,
    environment_loss_tokens,
    loss_spans,
    plain_span,
    ratio_mask,
)
from prefpipe.grpo.data_parallel import DataParallel
from prefpipe.grpo.metric_names import (
    CLIP_RATIO_REGION,
    ENTROPY,
    ENV_LOSS_SHARE,
    GRAD_NORM,
    LOSS_FIRST_ITERATION,
    PROMPT_LOSS_SHARE,
)
from prefpipe.grpo.rollout.completions import Rollout
from prefpipe.grpo.rollout.engines import correction
from prefpipe.settings.grpo import GrpoSettings

log = logging.getLogger(__name__)
MicroBatch = PackedSpan | SharedPromptSpan


@dataclass
class StepBatch:
    rows: list[dict]
    rollout: Rollout
    rewards: torch.Tensor
    parts: dict[str, torch.Tensor]
    advantages: torch.Tensor


@dataclass
class Learner:
    """What an update changes or reads: the policy, its optimizer and trainable parameters, the reference."""

    settings: GrpoSettings
    policy: torch.nn.Module
    optimizer: torch.optim.Optimizer | MasterWeights
    params: list[torch.nn.Parameter]
    reference: ReferencePolicy | None
    dp: DataParallel
    device: torch.device
    clock: PhaseClock | None = None  # the trainer's per-phase timing (log-probs, update); None: untimed

    def phase(self, name: str) -> contextlib.AbstractContextManager[None]:
        return self.clock.phase(name) if self.clock is not None else contextlib.nullcontext()


@dataclass
class FirstPass:
    """Completion-token views of the first pass for the metrics (KL, entropy): the last n_completion scored
    positions of each micro-batch, in rollout rows."""

    logp: torch.Tensor
    ref: torch.Tensor | None
    entropy: torch.Tensor

    @classmethod
    def zeros(cls, n: int, width: int, device: torch.device, with_reference: bool) -> FirstPass:
        ref = torch.zeros(n, width, device=device) if with_reference else None
        return cls(torch.zeros(n, width, device=device), ref, torch.zeros(n, width, device=device))

    def record(
        self, mb: MicroBatch, logp: torch.Tensor, ent: torch.Tensor, ref_logp: torch.Tensor | None
    ) -> None:
        c = mb.span.n_completion
        if c:
            self.logp[mb.rows, :c] = logp.detach()[:, -c:]
            self.entropy[mb.rows, :c] = ent[:, -c:]
            if self.ref is not None:
                self.ref[mb.rows, :c] = ref_logp[:, -c:]


def make_adamw(params: list[torch.nn.Parameter], settings: GrpoSettings) -> torch.optim.AdamW | MasterWeights:
    """AdamW with the fused kernel where torch has one for these parameters (CPU and CUDA), else foreach: one
    kernel over all tensors instead of a Python loop per parameter (equal updates, tested). Half-precision
    parameters (dtype bfloat16/float16) are stepped through fp32 master copies (common/optim/master_weights.py)."""
    if needs_master_weights(params):
        return MasterWeights(params, lambda master: _adamw(master, settings))
    return _adamw(params, settings)


def _adamw(params: list[torch.Tensor], settings: GrpoSettings) -> torch.optim.AdamW:
    kwargs = {
        "lr": settings.learning_rate,
        "betas": settings.adam_betas,
        "weight_decay": settings.weight_decay,
    }
    try:
        return torch.optim.AdamW(params, fused=True, **kwargs)
    except (RuntimeError, ValueError):
        return torch.optim.AdamW(params, foreach=True, **kwargs)


def micro_batches(rollout: Rollout, spans: list[Span], settings: GrpoSettings) -> list[MicroBatch]:
    """fast_paths: each group's prompt forwarded once (only rows with a loss token, no padding columns);
    with_prompt, and every span without fast_paths, stays padded (grpo/algorithm/fast/packing.py)."""
    return [
        share_prompt_span(rollout, sp, settings.num_generations)
        if settings.fast_paths and sp.n_scored == sp.n_completion
        else plain_span(rollout, sp)
        for sp in spans
    ]


def frozen_logprobs(
    learner: Learner, micro: list[MicroBatch]
) -> tuple[list[torch.Tensor | None], list[torch.Tensor | None]]:
    """(old log-probs when num_iterations > 1, reference log-probs with a KL term) per micro-batch."""
    s = learner.settings
    old_logp: list[torch.Tensor | None] = [None] * len(micro)
    ref_logp: list[torch.Tensor | None] = [None] * len(micro)
    with torch.no_grad():
        for i, mb in enumerate(micro):
            if s.num_iterations > 1:
                old_logp[i] = mb.logprobs(learner.policy, s.temperature)[0]
            if s.kl_to_reference:
                ref_logp[i] = learner.reference.span_logprobs(mb, s.temperature)
    return old_logp, ref_logp


def _iteration(
    learner: Learner,
    batch: StepBatch,
    micro: list[MicroBatch],
    frozen: tuple[list, list],
    norms: BatchNorms,
    first: FirstPass | None,
) -> torch.Tensor:
    """One optimizer pass's gradients (accumulated over micro-batches); returns [loss, policy_loss, kl_loss,
    clipped low, clipped high] summed as tensors (one host sync per pass, not per micro-batch)."""
    s = learner.settings
    old_logp, ref_logp = frozen
    sums = torch.zeros(5, dtype=torch.float64, device=learner.device)
    for i, mb in enumerate(micro):
        logp, ent = mb.logprobs(learner.policy, s.temperature, with_entropy=first is not None)
        old = old_logp[i] if old_logp[i] is not None else logp.detach()
        terms = micro_batch_loss(s, batch.rollout, mb, (logp, old, ref_logp[i]), batch.advantages[mb.rows])
        out = aggregate_loss(terms, mb.mask, s.loss_type, norms)
        out.loss.backward()
        sums += torch.stack(
            [
                out.loss.detach().double(),
                out.policy_loss.double(),
                out.kl_loss.double() if out.kl_loss is not None else sums.new_zeros(()),
                out.clip_low.sum().double(),
                out.clip_high.sum().double(),
            ]
        )
        if first is not None:
            first.record(mb, logp, ent, ref_logp[i])
    return sums


def _sampler_weights(
    s: GrpoSettings, rollout: Rollout, mb: MicroBatch, old: torch.Tensor, policy_tokens: torch.Tensor
) -> torch.Tensor | None:
    """Importance weights for a separate sampling engine's mismatch (None: the policy sampled)."""
    if rollout.sampler_logprobs is None:
        return None
    sampler = correction.span_sampler_logprobs(mb, rollout.sampler_logprobs, old)
    return correction.importance_weights(
        old, sampler, policy_tokens, s.rollout.importance_correction, s.rollout.importance_cap
    )


def micro_batch_loss(
    s: GrpoSettings,
    rollout: Rollout,
    mb: MicroBatch,
    logprobs: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None],
    advantages: torch.Tensor,
) -> TokenLoss:
    """The trainer's per-token loss of one micro-batch from (log pi, log pi_old, log pi_ref): the configured
    policy objective and KL, weighted for a sampling engine's mismatch; sequence-level ratios and weights run
    over the policy's own tokens. The one-step inspector calls it too."""
    logp, old, ref_logp = logprobs
    policy_tokens = ratio_mask(rollout, mb, s.mask_truncated_completions)
    return per_token_loss(
        logp,
        old,
        advantages,
        mb.mask,
        eps_low=s.epsilon_low,
        eps_high=s.epsilon_high,
        beta=s.beta,
        ref_logp=ref_logp,
        kl_estimator=s.kl_estimator,
        log_ratio_clamp=s.log_ratio_clamp,
        objective=s.policy_objective,
        ratio_mask=policy_tokens,
        sampler_weights=_sampler_weights(s, rollout, mb, old, policy_tokens),
    )


def _step_optimizer(learner: Learner, it: int, it_sums: torch.Tensor) -> float:
    """Check the pass's sums, all-reduce the gradients, clip and step; the norm before clipping."""
    if not torch.isfinite(it_sums[:3]).all():
        raise FloatingPointError(
            f"non-finite GRPO loss at iteration {it}: policy_loss={float(it_sums[1])}, "
            f"kl_loss={float(it_sums[2]) if learner.settings.kl_to_reference else None}; check max_abs_log_ratio"
        )
    learner.dp.sum_gradients(learner.params)
    grad_norm = torch.nn.utils.clip_grad_norm_(learner.params, learner.settings.max_grad_norm)
    if not torch.isfinite(grad_norm):
        raise FloatingPointError(f"non-finite gradient norm at iteration {it}")
    learner.optimizer.step()
    return float(grad_norm)


@contextlib.contextmanager
def checkpointed(policy: torch.nn.Module, on: bool) -> Iterator[None]:
    """grpo.gradient_checkpointing: the policy's layers recompute their activations in the backward while the
    training passes run, and only then; rollouts, old/reference log-probs and the learning curve (all without
    gradients, which checkpointing would not shrink) keep their KV cache. The shared-prompt micro-batches fall
    back to one packed call when the model returns no cache (grpo/algorithm/fast/shared_prompt.py)."""
    if not on:
        yield
        return
    if not getattr(unwrap_peft(policy), "supports_gradient_checkpointing", False):
        raise ConfigError(
            f"grpo.gradient_checkpointing: {type(unwrap_peft(policy)).__name__} does not support it"
        )
    set_activation_checkpointing(policy, True)
    try:
        yield
    finally:
        set_activation_checkpointing(policy, False)


def update(learner: Learner, batch: StepBatch) -> dict[str, float]:
    """num_iterations optimizer passes over the batch; the step's update metrics."""
    s, dp, ro = learner.settings, learner.dp, batch.rollout
    spans = loss_spans(ro, s.mask_mode, s.mask_truncated_completions, s.micro_batch_size)
    micro = micro_batches(ro, spans, s)
    n, width = ro.completion_ids.shape
    counts = [
        n,
        sum(int(sp.mask.sum()) for sp in spans),
        len(spans),
        sum(sp.prompt_loss_tokens() for sp in spans),
        environment_loss_tokens(ro, spans),
    ]
    totals = dp.sum(torch.tensor(counts, dtype=torch.long)).tolist()
    n_global, loss_tokens, n_spans, prompt_tokens, env_tokens = totals
    if not loss_tokens:
        log.warning("no completion token carries loss this step (all truncated and masked): no update")
        return {"update_skipped": 1.0, "num_loss_tokens": 0, PROMPT_LOSS_SHARE: 0.0, ENV_LOSS_SHARE: 0.0}
    norms = BatchNorms(n_global, loss_tokens, n_spans, s.sampled_tokens)
    with learner.phase("logprobs"):  # old (num_iterations > 1) and reference log-probs, without gradients
        frozen = frozen_logprobs(learner, micro)
    first = FirstPass.zeros(n, width, learner.device, s.kl_to_reference)
    sums = torch.zeros(5, dtype=torch.float64, device=learner.device)
    first_iteration_loss, grad_norms = 0.0, []
    learner.policy.train()
    with learner.phase("update"), checkpointed(learner.policy, s.gradient_checkpointing):
        for it in range(s.num_iterations):
            learner.optimizer.zero_grad(set_to_none=True)
            it_sums = dp.sum(_iteration(learner, batch, micro, frozen, norms, first if it == 0 else None))
            sums += it_sums
            if it == 0:
                first_iteration_loss = float(it_sums[0])
            grad_norms.append(_step_optimizer(learner, it, it_sums))
    metrics = _metrics(learner, batch, (sums, first_iteration_loss), norms, grad_norms, prompt_tokens, first)
    metrics[ENV_LOSS_SHARE] = env_tokens / max(norms.num_tokens, 1)
    if s.num_iterations > 1:
        metrics["max_abs_log_ratio_old"] = _max_change(learner, batch, micro, frozen[0], first)
    return metrics


def _metrics(
    learner: Learner,
    batch: StepBatch,
    losses: tuple[torch.Tensor, float],
    norms: BatchNorms,
    grad_norms: list[float],
    prompt_tokens: int,
    first: FirstPass,
) -> dict[str, float]:
    s, dp = learner.settings, learner.dp
    comp_mask = completion_loss_mask(batch.rollout, s.mask_truncated_completions)
    k = s.num_iterations
    tokens = max(norms.num_tokens, 1) * k
    sums, first_iteration_loss = losses
    loss, policy_loss, kl_loss, low, high = sums.tolist()
    ent_sum = dp.sum(torch.stack([(first.entropy * comp_mask).sum(), comp_mask.sum()]).double())
    metrics = {
        "loss": loss / k,
        LOSS_FIRST_ITERATION: first_iteration_loss,
        "policy_loss": policy_loss / k,
        "clip_ratio_low": low / tokens,
        "clip_ratio_high": high / tokens,
        CLIP_RATIO_REGION: (low + high) / tokens,
        ENTROPY: float(ent_sum[0] / ent_sum[1].clamp(min=1.0)),
        GRAD_NORM: sum(grad_norms) / k,
        "grad_norm_max": max(grad_norms),
        "num_loss_tokens": norms.num_tokens,
        PROMPT_LOSS_SHARE: prompt_tokens / max(norms.num_tokens, 1),
    }
    if batch.rollout.sampler_logprobs is not None:  # engine vs trainer log-probs at the rollout weights
        metrics.update(
            correction.gap_metrics(
                first.logp,
                batch.rollout.sampler_logprobs,
                comp_mask,
                s.rollout.importance_correction,
                s.rollout.importance_cap,
                dp,
            )
        )
    if first.ref is not None:  # KL diagnostics over every process's loss tokens
        metrics["kl_loss"] = kl_loss / k
        metrics.update(diagnostics.kl_metrics(first.logp, first.ref, comp_mask, dp.sum, dp.max))
    return metrics


def _max_change(
    learner: Learner, batch: StepBatch, micro: list[MicroBatch], old_logp: list, first: FirstPass
) -> float:
    """The largest |log pi - log pi_old| over completion tokens (num_iterations > 1), over all processes."""
    n, width = first.logp.shape
    comp_mask = completion_loss_mask(batch.rollout, learner.settings.mask_truncated_completions)
    old_full = torch.zeros(n, width, device=learner.device)
    for i, mb in enumerate(micro):
        c = mb.span.n_completion
        if c:
            old_full[mb.rows, :c] = old_logp[i][:, -c:]
    diff = float(((first.logp - old_full) * comp_mask).abs().max()) if n else 0.0
    return float(learner.dp.max(torch.tensor(diff)))
