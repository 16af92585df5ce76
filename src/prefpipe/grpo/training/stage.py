"""What the train_grpo stage does: one GRPO run from the base policy, with checkpoints (see prefpipe.train_grpo).

The config is one run's settings (prefpipe.settings.grpo.GrpoSettings: `grpo.defaults` deep-merged with
`grpo.runs.<run>`, the run's name under `run`). Outputs: policy/ (safetensors), metrics.jsonl, samples.jsonl,
summary.json, config.json, versions.json. SIGTERM writes <out>/checkpoint and exits 143; rerunning the same
command resumes from it. A checkpoint written with another config or other inputs is never resumed: the stage
exits 2 naming the folder, before writing anything.
"""

from __future__ import annotations

import argparse
import logging
import shutil
from pathlib import Path

import torch

from prefpipe.common.checkpoint import check_fingerprint, content_digest
from prefpipe.common.config import ConfigError
from prefpipe.common.run_record import RunRecord
from prefpipe.common.torch_runtime.seeding import seed_everything
from prefpipe.generation.rl_prompts import has_answers
from prefpipe.grpo.algorithm.train_state import run_fingerprint
from prefpipe.grpo.data_parallel import DataParallel
from prefpipe.grpo.policy_eval.curve import CURVE_FILE
from prefpipe.grpo.policy_io import load_policy, save_policy
from prefpipe.grpo.rewards import WeightedReward, answer_reward_keys, build_rewards
from prefpipe.grpo.splits import evaluation_rows, training_rows
from prefpipe.grpo.training.trainer import GRPOTrainer
from prefpipe.reward.ensemble import folders_label
from prefpipe.settings.build import to_mapping
from prefpipe.settings.grpo import GrpoSettings

log = logging.getLogger("prefpipe.train_grpo")


def run(settings: GrpoSettings, args: argparse.Namespace) -> None:
    if settings.uses_reward_model() and not args.reward_model:
        raise ConfigError(
            f"grpo run {settings.run!r} has a reward_model reward but no --reward-model was given"
        )
    if settings.torch_threads:
        torch.set_num_threads(settings.torch_threads)
    seed_everything(settings.seed)
    summary = train(settings, args)
    log.info("done: %d steps, %.2f s/step", summary["steps"], summary["seconds_per_step"] or 0.0)


def _train_prompts(settings: GrpoSettings, data: str) -> tuple[list[dict], dict[str, int]]:
    """The RL training prompts (less the validation prompts) and the skipped-row counts; ConfigError when a
    reward needs answers they lack."""
    rows, skipped = training_rows(data, settings.validation_prompts)
    needs_answers = answer_reward_keys(settings.rewards)
    if needs_answers and not has_answers(rows):
        raise ConfigError(
            f"{', '.join(needs_answers)} of run {settings.run!r} needs prompt answers, but the RL prompts have none "
            "(data.prompts.verifier: none): use reward_model (or format) rewards only"
        )
    return rows, skipped


def _rewards(
    settings: GrpoSettings, reward_model_dirs: list[str] | None, device: torch.device
) -> list[WeightedReward]:
    """The run's weighted rewards, with its reward model (one folder) or deep ensemble (several: its members,
    reward.ensemble) loaded on `device` when a reward reads one."""
    reward_model = None
    if settings.uses_reward_model():
        from prefpipe.reward.ensemble import load_reward

        reward_model = load_reward(reward_model_dirs, device=str(device), fast_paths=settings.fast_paths)
    return build_rewards(settings.rewards, reward_model)


def _curve_rows(settings: GrpoSettings, args: argparse.Namespace) -> list[dict] | None:
    """The learning curve's prompts (eval.split, its first eval.curve_prompts), or None when it is off."""
    ev = settings.eval
    if not ev.curve_every:
        return None
    rows, _ = evaluation_rows(args.data, ev.split, settings.validation_prompts, ev.curve_prompts)
    return rows if has_answers(rows) else None


def _facts(settings: GrpoSettings, args, rows: list[dict], skipped: dict, trainer: GRPOTrainer) -> dict:
    """What summary.json says about the run beside the trainer's own summary."""
    curve = trainer.curve
    return {
        "run": settings.run,
        "prompts": len(rows),
        "skipped_rows": skipped,
        "policy_dir": "policy",
        "reward_model": folders_label(args.reward_model),
        "reward_model_variant": settings.reward_model,
        "curve": {"file": CURVE_FILE, "points": len(curve.points)} if curve else None,
    }


def train(settings: GrpoSettings, args: argparse.Namespace) -> dict:
    out = Path(args.out)
    rows, skipped = _train_prompts(settings, args.data)
    dp = DataParallel()  # under `accelerate launch`: one process per GPU (or gloo processes on CPU)
    policy, tokenizer, lora_state = load_policy(
        args.policy, settings.lora, settings.dtype, dp.device(settings.device)
    )
    rewards = _rewards(settings, args.reward_model, next(policy.parameters()).device)
    settings_map = to_mapping(settings)
    run_fp = run_fingerprint(
        settings_map,
        {
            "policy": str(args.policy),
            "reward_model": folders_label(args.reward_model),
            "rows": content_digest(rows),
        },
    )
    check_fingerprint(out / "checkpoint", run_fp)  # another run's checkpoint stops us before any output
    record = RunRecord(out, "train_grpo", settings_map) if dp.is_main else None
    trainer = GRPOTrainer(
        settings,
        policy,
        tokenizer,
        lora_state,
        rows,
        rewards,
        out,
        record,
        run_fp,
        dp,
        _curve_rows(settings, args),
    )
    trainer.policy_source = str(args.policy)
    log.info(
        "run %s: %d prompts (%s skipped), policy %s (lora %s), reference %s",
        settings.run,
        len(rows),
        skipped or "none",
        args.policy,
        lora_state,
        type(trainer.reference).__name__,
    )
    summary = trainer.train()
    trainer.engine.close()
    summary["processes"] = dp.world_size
    if not dp.is_main:
        dp.close()
        return summary
    save_policy(policy, tokenizer, out / "policy", merge_lora=settings.save_merged)
    if not settings.keep_checkpoint and trainer.checkpoint_dir.exists():
        shutil.rmtree(trainer.checkpoint_dir)
    summary.update(_facts(settings, args, rows, skipped, trainer))
    record.finish(summary)
    dp.close()
    return summary
