"""The GRPO recipe: sample G completions per prompt, score them, turn rewards into group-relative advantages
and take clipped policy-gradient steps, logging every diagnostic the seed notes ask for.

One step = one batch of prompts_per_step prompts x num_generations completions, followed by num_iterations
optimizer updates on it (old log-probs stored once when num_iterations > 1; otherwise the ratio is 1 with the
gradient of log pi). Each step is seeded from (seed, step), so a run resumed from a checkpoint replays the
same prompts and samples as an uninterrupted one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from prefpipe.common.interrupts import StageInterrupted, StopRequest
from prefpipe.common.io import write_jsonl
from prefpipe.common.run_record import RunRecord
from prefpipe.grpo import diagnostics, inspect_record
from prefpipe.grpo.advantages import group_advantages
from prefpipe.grpo.data_parallel import DataParallel
from prefpipe.grpo.fast.packing import SharedPromptSpan, share_prompt_span
from prefpipe.grpo.hacking import overoptimisation
from prefpipe.grpo.losses import BatchNorms, grpo_loss
from prefpipe.grpo.metric_names import (
    CLIP_RATIO_REGION,
    ENTROPY,
    FRAC_REWARD_ZERO_STD,
    GRAD_NORM,
    LOSS_FIRST_ITERATION,
    PROMPT_LOSS_SHARE,
    REWARD_HACKING,
    STEP_TIME,
)
from prefpipe.grpo.reference import ReferencePolicy, build_reference
from prefpipe.grpo.rewards import (
    RewardInputs,
    WeightedReward,
    compute_rewards,
    needs_reference_completions,
)
from prefpipe.grpo.rewards import (
    verifier_reward as verifier_scores,
)
from prefpipe.grpo.rollout import GenerationSettings, Rollout, generate
from prefpipe.grpo.spans import PackedSpan, completion_loss_mask, loss_spans, plain_span
from prefpipe.grpo.train_state import load_train_state, save_train_state
from prefpipe.settings.grpo import GrpoSettings

log = logging.getLogger(__name__)


class Preempted(StageInterrupted):
    """SIGTERM or SIGINT arrived; a checkpoint was written and the run can be resumed by running it again."""


@dataclass
class StepBatch:
    rows: list[dict]
    rollout: Rollout
    rewards: torch.Tensor
    parts: dict[str, torch.Tensor]
    advantages: torch.Tensor


def make_adamw(params: list[torch.nn.Parameter], cfg: GrpoSettings) -> torch.optim.AdamW:
    """AdamW with the fused kernel where torch has one for these parameters (CPU and CUDA), else foreach: one
    kernel over all tensors instead of a Python loop per parameter (equal updates, tested)."""
    kwargs = {"lr": cfg.learning_rate, "betas": cfg.adam_betas, "weight_decay": cfg.weight_decay}
    try:
        return torch.optim.AdamW(params, fused=True, **kwargs)
    except (RuntimeError, ValueError):
        return torch.optim.AdamW(params, foreach=True, **kwargs)


def select_prompts(num_rows: int, step: int, per_step: int, seed: int) -> list[int]:
    """Prompt indices for a step: consecutive slices of a per-epoch permutation seeded by (seed, epoch)."""
    perms: dict[int, torch.Tensor] = {}
    picked = []
    for k in range(step * per_step, (step + 1) * per_step):
        epoch, pos = divmod(k, num_rows)
        if epoch not in perms:
            perms[epoch] = torch.randperm(
                num_rows, generator=torch.Generator().manual_seed(seed * 7919 + epoch)
            )
        picked.append(int(perms[epoch][pos]))
    return picked


class GRPOTrainer:
    def __init__(
        self,
        cfg: GrpoSettings,
        policy: torch.nn.Module,
        tokenizer,
        lora_state: str,
        rows: list[dict],
        rewards: list[WeightedReward],
        out_dir: str | Path,
        record: RunRecord | None = None,
        run_fingerprint: str = "",
        data_parallel: DataParallel | None = None,
    ) -> None:
        self.cfg, self.policy, self.tokenizer, self.rows, self.rewards = cfg, policy, tokenizer, rows, rewards
        self.out_dir = Path(out_dir)
        self.record = record
        self.fingerprint = run_fingerprint
        self.lora_state = lora_state
        self.device = next(policy.parameters()).device
        self.needs_ref_completions = needs_reference_completions(cfg.rewards)
        self.reference: ReferencePolicy | None = build_reference(
            policy, lora_state, cfg.kl_to_reference or self.needs_ref_completions, cfg.reference_mode
        )
        self.params = [p for p in policy.parameters() if p.requires_grad]
        self.dp = data_parallel or DataParallel()
        self.optimizer = make_adamw(self.params, cfg)
        self.gen = GenerationSettings(
            cfg.max_new_tokens, cfg.temperature, cfg.top_p, cfg.top_k, True, fast=cfg.fast_paths
        )
        self.metric_rows: list[dict[str, Any]] = []
        self.sample_rows: list[dict[str, Any]] = []
        self.ref_cache: dict[str, str] = {}
        self.policy_source: str | None = None  # the folder the policy started from (train.py sets it)
        self.stop = StopRequest()

    # ------------------------------------------------------------------------------------------ rollout
    def _lr(self, step: int) -> float:
        if self.cfg.warmup_steps <= 0:
            return self.cfg.learning_rate
        return self.cfg.learning_rate * min(1.0, (step + 1) / self.cfg.warmup_steps)

    def _reference_completions(self, rows: list[dict]) -> list[str]:
        """Greedy completions of pi_ref, one per prompt, cached by prompt id (deterministic, resume-safe)."""
        todo = [r for r in rows if r["id"] not in self.ref_cache]
        if todo:
            greedy = GenerationSettings(self.cfg.max_new_tokens, do_sample=False, fast=self.cfg.fast_paths)
            with self.reference.active() as model:
                out = generate(
                    model, self.tokenizer, [r["prompt"] for r in todo], 1, greedy, self.cfg.max_prompt_length
                )
            self.ref_cache.update({r["id"]: text for r, text in zip(todo, out.texts, strict=True)})
        return [self.ref_cache[r["id"]] for r in rows]

    def _rollout(self, step: int) -> tuple[StepBatch, dict[str, float]]:
        cfg, G = self.cfg, self.cfg.num_generations
        torch.manual_seed(cfg.seed * 100_003 + step)
        rows = [self.rows[i] for i in select_prompts(len(self.rows), step, cfg.prompts_per_step, cfg.seed)]
        # one uniform per (row, token) of the whole batch, seeded by (seed, step): this process's rows draw
        # exactly the tokens they would draw in a one-process run
        uniforms = torch.rand(
            len(rows) * G,
            cfg.max_new_tokens,
            generator=torch.Generator().manual_seed(cfg.seed * 100_003 + step),
        )
        share = self.dp.share(len(rows))
        rows = rows[share]
        uniforms = uniforms[share.start * G : share.stop * G]
        t0 = time.perf_counter()
        rollout = generate(
            self.policy,
            self.tokenizer,
            [r["prompt"] for r in rows],
            G,
            self.gen,
            cfg.max_prompt_length,
            uniforms=uniforms,
        )
        t1 = time.perf_counter()
        refs = None
        if self.needs_ref_completions:
            refs = [text for text in self._reference_completions(rows) for _ in range(G)]
        inputs = RewardInputs(
            prompts=[r["prompt"] for r in rows for _ in range(G)],
            completions=rollout.texts,
            answers=[r["answer"] for r in rows for _ in range(G)],
            kinds=[r["kind"] for r in rows for _ in range(G)],
            aliases=[r.get("aliases", []) for r in rows for _ in range(G)],
            terminated=(~rollout.truncated).tolist(),
            group_size=G,
            reference_completions=refs,
        )
        total, parts = compute_rewards(self.rewards, inputs)
        local = slice(share.start * G, share.stop * G)
        if self.dp.enabled:  # advantages and reward metrics over the whole batch
            total = self.dp.gather_rows(total.float())
            parts = {name: self.dp.gather_rows(v.float()) for name, v in parts.items()}
        verifier = {}
        if all(r["answer"] is not None for r in rows):  # the un-optimised verifier signal (reward hacking)
            verifier = diagnostics.verifier_metrics(
                self.dp.gather_rows(torch.as_tensor(verifier_scores(inputs), dtype=torch.float))
            )
        adv = group_advantages(total, G, cfg.scale_rewards, cfg.advantage_eps)
        t2 = time.perf_counter()
        batch = StepBatch(
            rows,
            rollout,
            total[local] if self.dp.enabled else total,
            {name: v[local] for name, v in parts.items()} if self.dp.enabled else parts,
            adv.advantages[local].to(self.device) if self.dp.enabled else adv.advantages.to(self.device),
        )
        metrics = {
            **diagnostics.reward_metrics(total, parts, G),
            **verifier,
            FRAC_REWARD_ZERO_STD: adv.frac_zero_std,
            **diagnostics.advantage_metrics(adv.advantages),
            **diagnostics.length_metrics(rollout),
            "gen_time": t1 - t0,
            "score_time": t2 - t1,
        }
        return batch, metrics

    # ------------------------------------------------------------------------------------------ update
    def _update(self, batch: StepBatch) -> dict[str, float]:
        cfg, dp = self.cfg, self.dp
        ro = batch.rollout
        comp_mask = completion_loss_mask(ro, cfg.mask_truncated_completions)
        spans = loss_spans(ro, cfg.mask_mode, cfg.mask_truncated_completions, cfg.micro_batch_size)
        # fast_paths: micro-batches with each group's prompt forwarded once (only rows with a loss token, no
        # padding columns); with_prompt, and every span without fast_paths, stays padded (grpo/fast/packing.py)
        micro: list[PackedSpan | SharedPromptSpan] = [
            share_prompt_span(ro, sp, cfg.num_generations)
            if cfg.fast_paths and sp.n_scored == sp.n_completion
            else plain_span(ro, sp)
            for sp in spans
        ]
        n, width = ro.completion_ids.shape
        counts = dp.sum(
            torch.tensor(
                [
                    n,
                    sum(int(sp.mask.sum()) for sp in spans),
                    len(spans),
                    sum(sp.prompt_loss_tokens() for sp in spans),
                ],
                dtype=torch.long,
            )
        ).tolist()
        n_global, loss_tokens, n_spans, prompt_tokens = counts
        if not loss_tokens:
            log.warning("no completion token carries loss this step (all truncated and masked): no update")
            return {"update_skipped": 1.0, "num_loss_tokens": 0, PROMPT_LOSS_SHARE: 0.0}
        norms = BatchNorms(n_global, loss_tokens, n_spans, cfg.max_new_tokens)

        old_logp: list[torch.Tensor | None] = [None] * len(micro)
        ref_logp: list[torch.Tensor | None] = [None] * len(micro)
        with torch.no_grad():
            for i, mb in enumerate(micro):
                if cfg.num_iterations > 1:
                    old_logp[i] = mb.logprobs(self.policy, cfg.temperature)[0]
                if cfg.kl_to_reference:
                    ref_logp[i] = self.reference.span_logprobs(mb, cfg.temperature)

        # completion-token views for the metrics (KL, entropy): the last n_completion scored positions
        cur_logp = torch.zeros(n, width, device=self.device)
        ref_full = torch.zeros(n, width, device=self.device) if cfg.kl_to_reference else None
        entropy = torch.zeros(n, width, device=self.device)
        # loss, policy_loss, kl_loss, low, high summed as tensors: one host sync per iteration, not per micro-batch
        sums = torch.zeros(5, dtype=torch.float64, device=self.device)
        first_iteration_loss = 0.0
        grad_norms = []
        self.policy.train()
        for it in range(cfg.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            it_sums = torch.zeros(5, dtype=torch.float64, device=self.device)
            for i, mb in enumerate(micro):
                logp, ent = mb.logprobs(self.policy, cfg.temperature, with_entropy=it == 0)
                out = grpo_loss(
                    logp,
                    old_logp[i] if old_logp[i] is not None else logp.detach(),
                    batch.advantages[mb.rows],
                    mb.mask,
                    norms,
                    loss_type=cfg.loss_type,
                    eps_low=cfg.epsilon_low,
                    eps_high=cfg.epsilon_high,
                    beta=cfg.beta,
                    ref_logp=ref_logp[i],
                    kl_estimator=cfg.kl_estimator,
                    log_ratio_clamp=cfg.log_ratio_clamp,
                )
                out.loss.backward()
                it_sums += torch.stack(
                    [
                        out.loss.detach().double(),
                        out.policy_loss.double(),
                        out.kl_loss.double() if out.kl_loss is not None else it_sums.new_zeros(()),
                        out.clip_low.sum().double(),
                        out.clip_high.sum().double(),
                    ]
                )
                if it == 0:
                    c = mb.span.n_completion
                    if c:
                        cur_logp[mb.rows, :c] = logp.detach()[:, -c:]
                        entropy[mb.rows, :c] = ent[:, -c:]
                        if ref_full is not None:
                            ref_full[mb.rows, :c] = ref_logp[i][:, -c:]
            it_sums = dp.sum(it_sums)
            if not torch.isfinite(it_sums[:3]).all():
                raise FloatingPointError(
                    f"non-finite GRPO loss at iteration {it}: policy_loss={float(it_sums[1])}, "
                    f"kl_loss={float(it_sums[2]) if cfg.kl_to_reference else None}; check max_abs_log_ratio"
                )
            sums += it_sums
            if it == 0:
                first_iteration_loss = float(it_sums[0])
            dp.sum_gradients(self.params)
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
            if not torch.isfinite(grad_norm):
                raise FloatingPointError(f"non-finite gradient norm at iteration {it}")
            grad_norms.append(float(grad_norm))
            self.optimizer.step()

        k = cfg.num_iterations
        tokens = max(norms.num_tokens, 1) * k
        loss, policy_loss, kl_loss, low, high = sums.tolist()
        ent_sum = dp.sum(torch.stack([(entropy * comp_mask).sum(), comp_mask.sum()]).double())
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
        if ref_full is not None:  # KL diagnostics over this process's rows
            metrics["kl_loss"] = kl_loss / k
            metrics.update(diagnostics.kl_metrics(cur_logp, ref_full, comp_mask))
        if cfg.num_iterations > 1:
            old_full = torch.zeros(n, width, device=self.device)
            for i, mb in enumerate(micro):
                c = mb.span.n_completion
                if c:
                    old_full[mb.rows, :c] = old_logp[i][:, -c:]
            diff = float(((cur_logp - old_full) * comp_mask).abs().max()) if n else 0.0
            metrics["max_abs_log_ratio_old"] = float(dp.max(torch.tensor(diff)))
        return metrics

    def _save_inspection(self, step: int, batch: StepBatch) -> None:
        meta = {"run": self.cfg.run, "lora_state": self.lora_state, "policy_source": self.policy_source}
        inspect_record.save_step(
            self.out_dir,
            step,
            batch.rollout,
            batch.rewards,
            batch.advantages,
            batch.parts,
            batch.rows,
            self.policy,
            meta,
        )

    # ------------------------------------------------------------------------------------------ samples
    def _samples(self, step: int, batch: StepBatch) -> list[dict[str, Any]]:
        G, out = self.cfg.num_generations, []
        for p in range(min(self.cfg.samples_per_log, len(batch.rows))):
            row_idx = p * G
            out.append(
                {
                    "step": step,
                    "id": batch.rows[p]["id"],
                    "prompt": batch.rows[p]["prompt"],
                    "answer": batch.rows[p]["answer"],
                    "completion": batch.rollout.texts[row_idx],
                    "truncated": bool(batch.rollout.truncated[row_idx]),
                    "reward": float(batch.rewards[row_idx]),
                    "rewards": {name: float(v[row_idx]) for name, v in batch.parts.items()},
                    "advantage": float(batch.advantages[row_idx]),
                    "audit": diagnostics.token_audit(self.tokenizer, batch.rollout, row_idx),
                }
            )
        return out

    # ------------------------------------------------------------------------------------------ loop
    @property
    def checkpoint_dir(self) -> Path:
        return self.out_dir / "checkpoint"

    def _records(self) -> dict[str, Any]:
        return {"metrics": self.metric_rows, "samples": self.sample_rows, "ref_cache": self.ref_cache}

    def _save_checkpoint(self, next_step: int) -> None:
        if not self.dp.is_main:  # every process holds the same weights and optimizer state
            return
        save_train_state(
            self.checkpoint_dir, self.policy, self.optimizer, next_step, self.fingerprint, self._records()
        )
        log.info("checkpoint written at step %d", next_step)

    def _resume(self) -> int:
        restored = load_train_state(self.checkpoint_dir, self.policy, self.optimizer, self.fingerprint)
        if restored is None:
            return 0
        step, records = restored
        self.metric_rows, self.sample_rows = records["metrics"], records["samples"]
        self.ref_cache = records.get("ref_cache", {})
        if self.record is not None:
            for row in self.metric_rows:
                self.record.log(**row)
        log.info("resumed from %s at step %d", self.checkpoint_dir, step)
        return step

    def train(self, on_step_end: Callable[[int, dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Run (or resume) to cfg.steps; returns the summary. Raises Preempted after SIGTERM or SIGINT
        (checkpointed)."""
        cfg = self.cfg
        start = self._resume()
        with self.stop:
            for step in range(start, cfg.steps):
                for group in self.optimizer.param_groups:
                    group["lr"] = self._lr(step)
                t0 = time.perf_counter()
                batch, metrics = self._rollout(step)
                if step in cfg.inspect_steps and self.dp.is_main:
                    self._save_inspection(step, batch)
                t1 = time.perf_counter()
                metrics.update(self._update(batch))
                step_time = time.perf_counter() - t0
                n_tokens = int(batch.rollout.attention_mask.sum())
                metrics.update(
                    {
                        "lr": self._lr(step),
                        "train_time": time.perf_counter() - t1,
                        STEP_TIME: step_time,
                        "num_tokens": n_tokens,
                        "tokens_per_second": n_tokens / max(step_time, 1e-9),
                    }
                )
                row = {"step": step, **metrics}
                self.metric_rows.append(row)
                if step in cfg.inspect_steps and self.dp.is_main:
                    inspect_record.finish_step(self.out_dir, step, row)
                if self.record is not None:
                    self.record.log(**row)
                if cfg.sample_every and step % cfg.sample_every == 0 and self.dp.is_main:
                    self.sample_rows.extend(self._samples(step, batch))
                    write_jsonl(self.out_dir / "samples.jsonl", self.sample_rows)
                log.info(
                    "step %d reward %.3f kl_k3 %s len %.1f %.2fs",
                    step,
                    metrics["reward_mean"],
                    metrics.get("kl_k3_mean"),
                    metrics["completion_length_mean"],
                    step_time,
                )
                if on_step_end is not None:
                    on_step_end(step, row)
                # every process stops at the same step when any one was signalled (max: the signal number)
                if self.dp.enabled:
                    self.stop.signum = int(self.dp.max(torch.tensor(self.stop.signum or 0))) or None
                if self.stop.requested:
                    self._save_checkpoint(step + 1)
                    raise Preempted(
                        f"stopped by {self.stop.name} after step {step}; checkpoint at {self.checkpoint_dir} "
                        "(rerun the same command to resume)",
                        self.stop.signum,
                    )
                if cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.steps:
                    self._save_checkpoint(step + 1)
        if self.dp.is_main:
            write_jsonl(self.out_dir / "samples.jsonl", self.sample_rows)
        return self.summary(start)

    def summary(self, resumed_from: int) -> dict[str, Any]:
        rows = self.metric_rows
        head, tail = rows[: min(5, len(rows))], rows[-min(5, len(rows)) :]

        def mean(key: str, part: list[dict]) -> float | None:
            vals = [r[key] for r in part if r.get(key) is not None]
            return sum(vals) / len(vals) if vals else None

        reward_keys = sorted({k for r in rows for k in r if k.startswith("reward")})
        numeric = [v for r in rows for v in r.values() if isinstance(v, float)]
        return {
            "steps": len(rows),
            "resumed_from_step": resumed_from or None,
            "seconds_per_step": mean("step_time", rows),
            "first_steps": {k: mean(k, head) for k in reward_keys},
            "last_steps": {k: mean(k, tail) for k in reward_keys},
            "final": rows[-1] if rows else None,
            "all_finite": all(v == v and abs(v) != float("inf") for v in numeric),
            "lora_state": self.lora_state,
            "reference": "none"
            if self.reference is None
            else ("disable_adapter" if self.reference.via_disable_adapter else "frozen_copy"),
            "trainable_parameters": sum(p.numel() for p in self.params),
            "inspect_steps": inspect_record.saved_steps(self.out_dir),
            REWARD_HACKING: overoptimisation(rows, self.cfg.rewards),
            "total_parameters": sum(p.numel() for p in self.policy.parameters()),
        }
