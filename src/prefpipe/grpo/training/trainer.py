"""The GRPO recipe: sample G completions per prompt, score them, turn rewards into group-relative advantages
and take clipped policy-gradient steps, logging every diagnostic (grpo/algorithm/diagnostics.py).

One step = one batch of prompts_per_step prompts x num_generations completions (grpo/training/step_batch.py: prompts,
uniforms, rewards, advantages), followed by num_iterations optimizer updates on it (grpo/algorithm/update.py). Each step
is seeded from (seed, step), so a run resumed from a checkpoint replays the same prompts and samples as an
uninterrupted one. This module holds the loop: resume, checkpoints, stop signals, samples and the summary.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from prefpipe.common.chat import conversation
from prefpipe.common.interrupts import StageInterrupted, StopRequest
from prefpipe.common.io import write_jsonl
from prefpipe.common.progress import Progress
from prefpipe.common.run_record import RunRecord
from prefpipe.common.torch_runtime.phases import PhaseClock
from prefpipe.grpo.algorithm import diagnostics
from prefpipe.grpo.algorithm.reference import ReferencePolicy, build_reference
from prefpipe.grpo.algorithm.train_state import load_train_state, save_train_state
from prefpipe.grpo.algorithm.update import Learner, StepBatch, make_adamw, update
from prefpipe.grpo.analyses.hacking import overoptimisation
from prefpipe.grpo.analyses.risk import risk_summary
from prefpipe.grpo.data_parallel import DataParallel
from prefpipe.grpo.inspector import save as inspect_step_save
from prefpipe.grpo.logprobs import set_logprob_chunk_tokens
from prefpipe.grpo.metric_names import PHASE_PREFIX, REWARD_HACKING, REWARD_MEAN, RISK_PENALTY, STEP_TIME
from prefpipe.grpo.policy_eval.curve import LearningCurve
from prefpipe.grpo.rewards import RewardModelReward, WeightedReward, needs_reference_completions
from prefpipe.grpo.rollout.completions import GenerationSettings, generate
from prefpipe.grpo.rollout.engines import build_engine
from prefpipe.grpo.training.episode_steps import EpisodeSteps
from prefpipe.grpo.training.step_batch import reward_inputs, score_batch, select_prompts, step_uniforms
from prefpipe.settings.grpo import GrpoSettings

log = logging.getLogger(__name__)


class Preempted(StageInterrupted):
    """SIGTERM or SIGINT arrived; a checkpoint was written and the run can be resumed by running it again."""


class GRPOTrainer:
    def __init__(
        self,
        settings: GrpoSettings,
        policy: torch.nn.Module,
        tokenizer,
        lora_state: str,
        rows: list[dict],
        rewards: list[WeightedReward],
        out_dir: str | Path,
        record: RunRecord | None = None,
        run_fingerprint: str = "",
        data_parallel: DataParallel | None = None,
        curve_rows: list[dict] | None = None,
    ) -> None:
        self.settings, self.policy, self.tokenizer, self.rows, self.rewards = (
            settings,
            policy,
            tokenizer,
            rows,
            rewards,
        )
        self.out_dir = Path(out_dir)
        self.record = record
        self.fingerprint = run_fingerprint
        self.lora_state = lora_state
        self.device = next(policy.parameters()).device
        self.needs_ref_completions = needs_reference_completions(settings.rewards)
        # grpo.<run>.logprob_chunk_tokens on the policy before the reference: a frozen copy keeps the setting
        set_logprob_chunk_tokens(policy, settings.logprob_chunk_tokens)
        self.reference: ReferencePolicy | None = build_reference(
            policy,
            lora_state,
            settings.kl_to_reference or self.needs_ref_completions,
            settings.reference_mode,
        )
        self.params = [p for p in policy.parameters() if p.requires_grad]
        self.dp = data_parallel or DataParallel()
        self.optimizer = make_adamw(self.params, settings)
        # who samples the rollouts (grpo.<run>.rollout.engine); a separate engine gets the policy's weights now
        self.engine = build_engine(settings, policy, tokenizer, self.out_dir, self.dp)
        # multi-turn runs: episodes with the run's environment, on the run's engine (grpo/training/episode_steps.py)
        self.episodes = EpisodeSteps(settings, tokenizer) if settings.episodes.enabled else None
        self.metric_rows: list[dict[str, Any]] = []
        self.sample_rows: list[dict[str, Any]] = []
        self.ref_cache: dict[str, str] = {}
        self.policy_source: str | None = None  # the folder the policy started from (train.py sets it)
        self.stop = StopRequest()
        # the held-out learning curve (grpo/policy_eval/curve.py): measured by the main process only
        self.curve = LearningCurve(settings, curve_rows) if curve_rows and settings.eval.curve_every else None

    # ------------------------------------------------------------------------------------------ rollout
    def _lr(self, step: int) -> float:
        if self.settings.warmup_steps <= 0:
            return self.settings.learning_rate
        return self.settings.learning_rate * min(1.0, (step + 1) / self.settings.warmup_steps)

    def _reference_completions(self, rows: list[dict]) -> list[str]:
        """Greedy completions of pi_ref, one per prompt, cached by prompt id (deterministic, resume-safe)."""
        todo = [r for r in rows if r["id"] not in self.ref_cache]
        if todo:
            greedy = GenerationSettings(
                self.settings.max_new_tokens, do_sample=False, fast=self.settings.fast_paths
            )
            with self.reference.active() as model:
                out = generate(
                    model,
                    self.tokenizer,
                    [conversation(r) for r in todo],
                    1,
                    greedy,
                    self.settings.max_prompt_length,
                )
            self.ref_cache.update({r["id"]: text for r, text in zip(todo, out.texts, strict=True)})
        return [self.ref_cache[r["id"]] for r in rows]

    def _rollout(self, step: int, clock: PhaseClock | None = None) -> tuple[StepBatch, dict[str, float]]:
        settings, G = self.settings, self.settings.num_generations
        clock = clock or PhaseClock(self.device, PHASE_PREFIX)
        seed = settings.seed * 100_003 + step
        torch.manual_seed(seed)
        rows = [
            self.rows[i]
            for i in select_prompts(len(self.rows), step, settings.prompts_per_step, settings.seed)
        ]
        uniforms = step_uniforms(settings, len(rows), step)
        share = self.dp.share(len(rows))
        rows = rows[share]
        uniforms = uniforms[share.start * G : share.stop * G]
        prompts = [conversation(r) for r in rows]
        # rollout: the policy's samples, and the reference's greedy replies a reward needs
        answers, episode_metrics = None, {}
        with clock.phase("rollout"):
            if self.episodes is not None:
                decoder = self.episodes.decoder_of(self.engine, self.policy, seed, share.start)
                rollout, answers, episode_metrics = self.episodes.step(
                    self.policy, self.tokenizer, rows, uniforms, decoder
                )
            else:
                rollout = self.engine.generate(
                    self.policy,
                    self.tokenizer,
                    prompts,
                    uniforms,
                    seed,
                    share.start,
                )
            refs = None
            if self.needs_ref_completions:
                refs = [text for text in self._reference_completions(rows) for _ in range(G)]
        with clock.phase("reward"):  # an episode's reward scores its final answer
            sampled = (rows, rollout, reward_inputs(rows, rollout, G, refs, answers))
            batch, metrics = score_batch(settings, self.rewards, self.dp, share, sampled, self.device)
        return batch, {**metrics, **episode_metrics}

    # ------------------------------------------------------------------------------------------ update
    def _update(self, batch: StepBatch, clock: PhaseClock | None = None, step: int = 0) -> dict[str, float]:
        """The step's update under its loss mask (GrpoSettings.mask_mode_at); for episodes, what trained
        checked against the episodes' own segments."""
        settings = dataclasses.replace(self.settings, mask_mode=self.settings.mask_mode_at(step))
        learner = Learner(
            settings,
            self.policy,
            self.optimizer,
            self.params,
            self.reference,
            self.dp,
            self.device,
            clock,
        )
        metrics = update(learner, batch)
        if self.episodes is not None:
            metrics.update(self.episodes.audit(batch.rollout, settings))
        return metrics

    def _save_inspection(self, step: int, batch: StepBatch) -> None:
        meta = {"run": self.settings.run, "lora_state": self.lora_state, "policy_source": self.policy_source}
        inspect_step_save.save_step(
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
        G, out = self.settings.num_generations, []
        for p in range(min(self.settings.samples_per_log, len(batch.rows))):
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
        curve = self.curve.points if self.curve else []
        return {
            "metrics": self.metric_rows,
            "samples": self.sample_rows,
            "ref_cache": self.ref_cache,
            "curve": curve,
        }

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
        if self.curve is not None:
            self.curve.points = list(records.get("curve", []))
        if self.record is not None:
            for row in self.metric_rows:
                self.record.log(**row)
        log.info("resumed from %s at step %d", self.checkpoint_dir, step)
        return step

    def train(self, on_step_end: Callable[[int, dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Run (or resume) to settings.steps; returns the summary. Raises Preempted after SIGTERM or SIGINT
        (checkpointed)."""
        settings = self.settings
        start = self._resume()
        if start:  # the checkpoint's weights replaced the ones the engine was built with
            self.engine.sync(self.policy, start - 1)
        bar = Progress(settings.steps, "GRPO", start=start, enabled=self.dp.is_main)
        self._curve_point(start)
        with self.stop, bar:
            for step in range(start, settings.steps):
                row, batch = self._step(step)
                self._keep(step, row, batch)
                bar.step(
                    reward=row[REWARD_MEAN],
                    kl_k3=row.get("kl_k3_mean"),
                    length=row["completion_length_mean"],
                    lr=row["lr"],
                )
                if on_step_end is not None:
                    on_step_end(step, row)
                self._curve_point(step + 1)
                self._stop_or_checkpoint(step)
        if self.dp.is_main:
            write_jsonl(self.out_dir / "samples.jsonl", self.sample_rows)
            # always written (empty when the curve is off): the workflow declares it
            (self.curve or LearningCurve(settings, [])).write(self.out_dir)
        return self.summary(start)

    def _curve_point(self, steps_done: int) -> None:
        """The learning curve's point after `steps_done` updates, when one is due (main process only)."""
        if self.curve is None or not self.dp.is_main or not self.curve.due(steps_done):
            return
        point = self.curve.measure(self.policy, self.tokenizer, steps_done)
        self.curve.write(self.out_dir)
        log.info(
            "curve at step %d: greedy %.3f, sampled %.3f (%d prompts, %.1f s)",
            steps_done,
            point["greedy_accuracy"],
            point["sampled_accuracy"],
            point["n"],
            point["eval_time"],
        )

    def _step(self, step: int) -> tuple[dict[str, Any], StepBatch]:
        """One step: sample and score the batch, update the policy; the step's metrics row."""
        for group in self.optimizer.param_groups:
            group["lr"] = self._lr(step)
        clock = PhaseClock(self.device, PHASE_PREFIX)  # metric_names.PHASES: seconds and shares
        t0 = time.perf_counter()
        batch, metrics = self._rollout(step, clock)
        if step in self.settings.inspect_steps and self.dp.is_main:
            self._save_inspection(step, batch)
        metrics.update(self._update(batch, clock, step))
        with clock.phase("sync"):  # the next rollout samples the updated policy
            metrics.update(self.engine.sync(self.policy, step))
        step_time = time.perf_counter() - t0
        n_tokens = int(batch.rollout.attention_mask.sum())
        metrics.update(
            {
                "lr": self._lr(step),
                **clock.metrics(step_time),
                STEP_TIME: step_time,
                "num_tokens": n_tokens,
                "tokens_per_second": n_tokens / max(step_time, 1e-9),
            }
        )
        return {"step": step, **metrics}, batch

    def _keep(self, step: int, row: dict[str, Any], batch: StepBatch) -> None:
        """Record the step's row (metrics, inspection, samples); train() shows it in the log."""
        self.metric_rows.append(row)
        if step in self.settings.inspect_steps and self.dp.is_main:
            inspect_step_save.finish_step(self.out_dir, step, row)
        if self.record is not None:
            self.record.log(**row)
        if self.settings.sample_every and step % self.settings.sample_every == 0 and self.dp.is_main:
            self.sample_rows.extend(self._samples(step, batch))
            write_jsonl(self.out_dir / "samples.jsonl", self.sample_rows)

    def _stop_or_checkpoint(self, step: int) -> None:
        """Raise Preempted after a stop signal (checkpointed); else checkpoint every checkpoint_every steps."""
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
        every, steps = self.settings.checkpoint_every, self.settings.steps
        if every and (step + 1) % every == 0 and step + 1 < steps:
            self._save_checkpoint(step + 1)

    def _scalar_reward_model(self) -> bool:
        """Whether the reward model's head gives a scalar r(x, y) (True also when the run has none)."""
        models = [w.fn.rm for w in self.rewards if isinstance(w.fn, RewardModelReward)]
        return models[0].scalar_reward if models else True

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
            "inspect_steps": inspect_step_save.saved_steps(self.out_dir),
            REWARD_HACKING: overoptimisation(rows, self.settings.rewards, self._scalar_reward_model()),
            RISK_PENALTY: risk_summary(rows),
            "total_parameters": sum(p.numel() for p in self.policy.parameters()),
        }
