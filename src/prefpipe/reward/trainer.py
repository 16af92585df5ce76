"""Reward-model training loop on `accelerate`: one loop for single-process CPU, multi-GPU DDP or DeepSpeed
(launch with `accelerate launch --config_file ...`).

Data order is a pure function of (seed, step): epoch e uses a permutation seeded by (seed, e) and step t takes
pairs [t*B, (t+1)*B) of the concatenated permutations, so a resumed run sees exactly the batches an
uninterrupted one would. Checkpoints hold model, optimizer, scheduler, RNG, step and metric history; SIGTERM
or SIGINT (Ctrl-C) triggers a checkpoint at the end of the current optimizer step (several processes: at the
next metrics read, where they agree on it), then TrainingInterrupted. A step never waits for the device: its
metrics are read every train.metrics_every steps (reward/fast/step_metrics.py), and a non-finite loss stops the run
there, naming its step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, set_seed

from prefpipe.common import checkpoint as ckpt
from prefpipe.common.config import ConfigError
from prefpipe.common.interrupts import StageInterrupted, StopRequest, signal_name
from prefpipe.common.io import atomic_write_json, read_json
from prefpipe.common.progress import Progress
from prefpipe.reward import head_fit
from prefpipe.reward.collate import TokenizedRow
from prefpipe.reward.fast import packed, shared_prompt
from prefpipe.reward.fast.step_metrics import StepMetrics, first_non_finite, host_read, non_finite_error
from prefpipe.reward.heads.disentangle import pair_lengths, split_pairs
from prefpipe.reward.metrics import ACCURACY, GRAD_NORM, LOSS, STEP, SUMMED
from prefpipe.reward.network import RewardModel
from prefpipe.reward.pairs import Pair
from prefpipe.reward.train_setup import (
    clip_gradients,
    deepspeed_param_dtype,
    execution_setup,
    full_precision,
    head_grad_norm,
    length_buckets_for,
    make_accelerator,
    make_optimizer,
    make_scheduler,
    metrics_every_for,
    precision_setup,
    to_device,
    total_steps,
)
from prefpipe.settings.reward import RewardSettings

log = logging.getLogger(__name__)

# Settings that never change the trajectory: a rerun may change them and still resume its checkpoint.
BOOKKEEPING = (
    "eval",
    "wandb",
    "torch_threads",
    "train.checkpoint_every",
    "train.metrics_every",
    "train.cuda_metrics_every",
    "train.keep_checkpoints",
    "train.resume",
)
RESUME_HINT = ", or set train.resume: never"  # how to start afresh, appended to checkpoint errors
TRAINER_STATE = "trainer_state.json"  # step, history, data position (beside accelerate's save_state files)


class TrainingInterrupted(StageInterrupted):
    """Raised after the stop-signal checkpoint is written; rerunning the stage resumes from it."""

    def __init__(self, step: int, path: Path, signum: int) -> None:
        super().__init__(
            f"interrupted by {signal_name(signum)} after step {step}; checkpoint at {path} "
            "(rerun the same command to resume)",
            signum,
        )
        self.step = step
        self.path = path


@dataclass
class TrainResult:
    steps: int
    final_metrics: dict[str, Any]
    resumed_from: int | None
    truncated_rows: dict[str, int]
    truncated_pairs: int
    history: list[dict[str, Any]] = field(default_factory=list)
    head_fit: dict[str, Any] = field(default_factory=dict)  # before / after: head_fit.fit_head's metrics
    # The head's weights as fine-tuned, before the refit (main process; None without a refit).
    finetuned_head: dict[str, torch.Tensor] | None = None


class RewardTrainer:
    def __init__(
        self,
        rm: RewardModel,
        settings: RewardSettings,
        pairs: list[Pair],
        out_dir: str | Path,
        log_fn: Callable[..., None] | None = None,
        on_step_end: Callable[[int, dict[str, Any]], None] | None = None,
        accelerator: tuple[Accelerator, int] | None = None,
        inputs: dict[str, Any] | None = None,
    ) -> None:
        self.rm = rm
        self._given_accelerator = accelerator  # from make_accelerator(); made in train() when None
        self.settings = settings
        self.pairs = pairs
        self.ckpt_root = Path(out_dir) / "checkpoints"
        self.log_fn = log_fn
        self.on_step_end = on_step_end
        self.steps = total_steps(settings, len(pairs))
        self.lengths = pair_lengths([p.chosen for p in pairs], [p.rejected for p in pairs])  # (2, N)
        # Stored with every checkpoint; a rerun with another config or other inputs refuses to resume.
        self.fingerprint = ckpt.fingerprint(settings.to_dict(), inputs, ignore=BOOKKEEPING)
        self._perms: dict[int, list[int]] = {}
        self.stop = StopRequest()

    # ------------------------------------------------------------------ data order
    def _perm(self, epoch: int) -> list[int]:
        if epoch not in self._perms:
            g = torch.Generator().manual_seed(self.settings.seed * 100_003 + epoch)
            self._perms[epoch] = torch.randperm(len(self.pairs), generator=g).tolist()
        return self._perms[epoch]

    def batch_indices(self, step: int) -> list[int]:
        """Pair indices of global batch `step` (a pure function of seed and step)."""
        size, n = self.settings.train.batch_size, len(self.pairs)
        out: list[int] = []
        pos = step * size
        while len(out) < size:
            epoch, offset = divmod(pos, n)
            take = min(size - len(out), n - offset)
            out.extend(self._perm(epoch)[offset : offset + take])
            pos += take
        return out

    # ------------------------------------------------------------------ setup
    def _tokenize(self) -> tuple[list[TokenizedRow], list[TokenizedRow], int]:
        """Tokenise every pair once, in one batched call (tokenize_batch: the rows and counts of per-row
        tokenize()); returns chosen rows, rejected rows and the number of truncated pairs."""
        prompts = [p.prompt for p in self.pairs]
        n = len(self.pairs)
        rows = self.rm.encoder.tokenize_batch(
            prompts + prompts, [p.chosen for p in self.pairs] + [p.rejected for p in self.pairs]
        )
        chosen, rejected = rows[:n], rows[n:]
        truncated_pairs = sum(1 for c, r in zip(chosen, rejected, strict=True) if c.cut or r.cut)
        if truncated_pairs:
            log.warning(
                "%d of %d pairs truncated to data.max_length=%d (%s)",
                truncated_pairs,
                len(self.pairs),
                self.rm.encoder.max_length,
                dict(self.rm.encoder.truncated),
            )
        return chosen, rejected, truncated_pairs

    # ------------------------------------------------------------------ loop
    def _micro_batch(self, chosen: list[TokenizedRow], rejected: list[TokenizedRow]) -> dict[str, Any]:
        """The model inputs of one micro-batch: packed without padding (train.packing, where it applies), or
        chosen and rejected behind one copy of their shared start
        (train.share_prompt, where the model allows it and likelihood summaries, if used, are cached), else
        both rows in one forward; either way in length-sorted chunks (train.length_buckets at most, on CUDA
        train.cuda_length_buckets, cut where a pass saves more than train.bucket_pass_cost padded tokens)."""
        t = self.settings.train
        buckets = length_buckets_for(next(self.rm.parameters()).device, t)  # where the model runs
        uncached = self.rm.spec.likelihood_features and chosen[0].likelihood is None
        if t.packing and packed.applies(self.rm) and not uncached:  # train.packing: no padding computed
            pad = self.rm.tokenizer.pad_token_id
            return {"packed": packed.pack_rows(chosen + rejected, pad, t.packing_row_tokens)}
        if t.share_prompt and self.rm.shares_prompts and not uncached:
            return shared_prompt.pack_pairs(
                chosen, rejected, self.rm.tokenizer.pad_token_id, buckets, t.bucket_pass_cost
            )
        return self.rm.encoder.pad_buckets(chosen + rejected, buckets, t.bucket_pass_cost)

    def _step(self, step: int, model: Any, optimizer: Any, scheduler: Any, rows: tuple) -> None:
        """One optimizer step (ga micro-batches per process); its metrics stay on the device (self.metrics)
        until the next read: nothing here waits for the device."""
        t, acc = self.settings.train, self.acc
        chosen, rejected = rows
        self.metrics.begin_step()
        per_proc = t.batch_size // acc.num_processes
        idx = self.batch_indices(step)[acc.process_index * per_proc : (acc.process_index + 1) * per_proc]
        model.train()
        sums = torch.zeros(len(SUMMED), dtype=torch.float64, device=acc.device)
        grad_norm, head_norm, lr, beta = None, None, scheduler.get_last_lr()[0], 0.0
        for m in range(self.ga):
            micro = idx[m * t.micro_batch_size : (m + 1) * t.micro_batch_size]
            n = len(micro)
            batch = self._micro_batch([chosen[i] for i in micro], [rejected[i] for i in micro])
            with acc.accumulate(model):
                out = model(**to_device(batch, acc.device))
                parts = self.rm.head.loss(*split_pairs(out, self.lengths[:, micro]), step)
                acc.backward(parts.loss)
                if acc.sync_gradients:  # accelerate's optimizer skips the other micro-batches too
                    head_norm = head_grad_norm(acc.unwrap_model(model))
                    grad_norm = clip_gradients(acc, model, optimizer, t.max_grad_norm)
                    optimizer.step()
                    optimizer.zero_grad()
            beta = parts.kl_beta
            values = [
                parts.preference_loss * n,
                parts.kl_loss * n,
                parts.loss * n,
                parts.prob.sum(),
                (parts.score > 0).sum(),
            ]
            sums += torch.stack([v.detach().double() for v in values])
        scheduler.step()
        epoch = round((step + 1) * t.batch_size / len(self.pairs), 4)
        self.metrics.add(step + 1, sums, [grad_norm, head_norm], kl_beta=beta, lr=lr, epoch=epoch)

    def _read(self, history: list[dict[str, Any]], bar: Progress) -> int:
        """The host read of the steps since the last one: log their rows (history, progress, log_fn,
        on_step_end), stop on a non-finite loss or gradient norm (rows up to that step are logged, as a
        per-step read would), and return the stop signal every process agrees on (max of their signal numbers;
        several processes compare at the reads, the same steps everywhere)."""
        rows = self.metrics.read()
        bad = first_non_finite(rows)
        for row in rows if bad is None else rows[: bad[0] + 1]:
            history.append(row)
            bar.step(loss=row[LOSS], accuracy=row[ACCURACY], lr=row["lr"], grad_norm=row[GRAD_NORM])
            if self.log_fn and self.acc.is_main_process:
                self.log_fn(**row)
            if self.on_step_end is not None:
                self.on_step_end(row[STEP], row)
        if bad is not None:
            raise non_finite_error(rows[bad[0]], bad[1], self.metrics.every)
        if self.acc.num_processes == 1:
            return self.stop.signum or 0
        flag = torch.tensor(float(self.stop.signum or 0), device=self.acc.device)
        with host_read(self.acc.device):
            self.metrics.reads += 1
            return int(self.acc.reduce(flag, reduction="max"))

    def checkpoint_to_resume(self) -> Path | None:
        """The checkpoint train() will resume from (None: start fresh). Raises CheckpointMismatch when the
        folder holds a run with another config, so a stage can check before it writes any output."""
        if self.settings.train.resume != "auto":
            return None
        return ckpt.check_fingerprint(self.ckpt_root, self.fingerprint, hint=RESUME_HINT)

    def _resume(self) -> tuple[int, list[dict[str, Any]], int | None]:
        latest = self.checkpoint_to_resume()
        if latest is None:
            return 0, [], None
        with ckpt.loading(latest, hint=RESUME_HINT):
            self.acc.load_state(str(latest))  # model, optimizer, scheduler and RNG states, in place
            state = read_json(latest / TRAINER_STATE)
        log.info("resumed from %s at step %d", latest, state["step"])
        # The pre-training head fit ran before the checkpoint: its record comes back with it, so the resumed
        # run's summary equals an uninterrupted run's (checkpoints written before this key carry none).
        saved_fit = state.get("head_fit")  # absent in checkpoints written before head fitting existed
        if saved_fit:
            self.head_fit.update(saved_fit)
        if self.log_fn and self.acc.is_main_process:
            for row in state["history"]:
                self.log_fn(**row)
        return state["step"], state["history"], state["step"]

    def _checkpoint(self, step: int, fingerprint: str, history: list[dict[str, Any]]) -> Path:
        consumed = step * self.settings.train.batch_size
        state = {
            "step": step,
            "fingerprint": fingerprint,
            "history": history,
            "head_fit": self.head_fit,  # main process only (where it is written); restored by _resume
            "data_position": {
                "pairs_consumed": consumed,
                "epoch": consumed // len(self.pairs),
                "offset": consumed % len(self.pairs),
            },
        }

        def write(tmp: Path) -> None:  # collective: every process saves its shard / RNG state
            self.acc.save_state(str(tmp))
            if self.acc.is_main_process:
                atomic_write_json(tmp / TRAINER_STATE, state)

        main, barrier = self.acc.is_main_process, self.acc.wait_for_everyone
        return ckpt.save_checkpoint(self.ckpt_root, step, fingerprint, write, is_main=main, barrier=barrier)

    def _head_fit(self, rows: tuple, when: str) -> None:
        """Head fitting on the main process only (train.head_fit; standardisation buffers before training).
        Before training, DDP's construction in prepare() then broadcasts rank 0's head to every rank; after
        training only the main process saves the model. DeepSpeed partitions the head: refused."""
        s, fit = self.settings, self.settings.train.head_fit
        steps = fit.before_steps if when == "before" else fit.after_steps
        standardize = when == "before" and s.head.standardize
        if not (steps or standardize):
            return
        if self.acc.distributed_type == DistributedType.DEEPSPEED:
            raise ConfigError(
                "train.head_fit / head.standardize: not supported under DeepSpeed (the head is partitioned); "
                "set train.head_fit.before_steps and after_steps to 0 and head.standardize to false"
            )
        if self.acc.is_main_process:
            rm = self.rm if when == "before" else self.acc.unwrap_model(self.prepared_model)
            step = 0 if when == "before" else self.steps
            fit = head_fit.fit_stage(rm, s, rows, self.lengths, steps, step, standardize, when)
            self.head_fit[when] = fit
        self.acc.wait_for_everyone()

    def train(self) -> TrainResult:
        s, t = self.settings, self.settings.train
        self.acc, self.ga = self._given_accelerator or make_accelerator(s)
        set_seed(s.seed, device_specific=True)  # distinct sampling/dropout noise per process, reproducible
        chosen, rejected, truncated_pairs = self._tokenize()
        if self.acc.distributed_type != DistributedType.DEEPSPEED:  # ZeRO-3 partitions the frozen model too
            self.rm.cache_likelihood(chosen + rejected, t.micro_batch_size, self.acc.is_main_process)
        half = deepspeed_param_dtype(self.acc)
        if half is not None:  # ZeRO-3 init built the backbone in half precision; one dtype for all params
            self.rm.head.to(half)
        precision_setup(self.rm, s)  # bf16_master: bf16 backbone weights
        self.execution = execution_setup(self.rm, s, self.acc.device)  # backbone.kernels / compile
        self.head_fit: dict[str, Any] = {}
        if self.checkpoint_to_resume() is None:  # a resumed run restores the fitted head and its buffers
            self._head_fit((chosen, rejected), "before")
        optimizer = make_optimizer(self.rm, s, self.acc)
        scheduler = make_scheduler(optimizer, s, self.steps)
        model, optimizer, scheduler = self.acc.prepare(self.rm, optimizer, scheduler)
        self.metrics = StepMetrics(metrics_every_for(self.acc.device, t), t.batch_size, self.acc.reduce)
        start, history, resumed_from = self._resume()
        bar = Progress(self.steps, "reward training", start=start, enabled=self.acc.is_main_process)
        with self.stop, bar:
            for step in range(start, self.steps):
                self._step(step, model, optimizer, scheduler, (chosen, rejected))
                done, every = step + 1, t.checkpoint_every
                checkpoint = every and done % every == 0 and done < self.steps
                alone = self.acc.num_processes == 1 and self.stop.signum  # one process: stop at this step
                if not (self.metrics.due(done, self.steps) or checkpoint or alone):
                    continue
                signum = self._read(history, bar)
                if signum or checkpoint:
                    path = self._checkpoint(done, self.fingerprint, history)
                    if signum:
                        raise TrainingInterrupted(done, path, signum)
        self.acc.wait_for_everyone()
        full_precision(self.rm, optimizer)  # bf16_master: the fp32 master copies from here on
        self.prepared_model, self.optimizer = model, optimizer
        finetuned_head = None
        if t.head_fit.after_steps and self.acc.is_main_process:  # kept so evaluation can score it too
            head = self.acc.unwrap_model(model).head
            finetuned_head = {k: v.detach().clone() for k, v in head.state_dict().items()}
        self._head_fit((chosen, rejected), "after")
        return TrainResult(
            steps=self.steps,
            final_metrics=history[-1] if history else {},
            resumed_from=resumed_from,
            truncated_rows=dict(self.rm.encoder.truncated),
            truncated_pairs=truncated_pairs,
            history=history,
            head_fit=self.head_fit,
            finetuned_head=finetuned_head,
        )

    def cleanup(self) -> None:
        """Delete checkpoints once the final model is safely saved (unless train.keep_checkpoints)."""
        if not self.settings.train.keep_checkpoints and self.acc.is_main_process:
            ckpt.remove_checkpoints(self.ckpt_root)
