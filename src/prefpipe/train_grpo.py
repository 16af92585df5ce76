"""Stage 4: GRPO policy training.

python -m prefpipe.train_grpo --config '<json>' --data results/data --policy results/base/model \
    [--reward-model results/reward/<variant>/model] --out results/grpo/<run> [--run <run>]

The config is one resolved run config (`grpo.defaults` deep-merged with `grpo.runs.<run>`, as the workflow
passes it, with its name under `run`) or the whole `grpo` section (`defaults` + `runs`; the run is --run or
the --out folder's name). Outputs: policy/ (safetensors), metrics.jsonl, samples.jsonl,
summary.json, config.json, versions.json. SIGTERM writes <out>/checkpoint and exits 143; rerunning the same
command resumes from it. A checkpoint written with another config or other inputs is never resumed: the stage
exits 2 naming the folder, before writing anything.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from pathlib import Path

import torch

from prefpipe.common.checkpoint import check_fingerprint, content_digest
from prefpipe.common.config import ConfigError, load_config_arg
from prefpipe.common.logs import setup_logging
from prefpipe.common.run_record import RunRecord
from prefpipe.common.seeding import seed_everything
from prefpipe.grpo.config import GRPOConfig, resolve_run_config
from prefpipe.grpo.policy_eval import EvalConfig
from prefpipe.grpo.policy_io import load_policy, save_policy
from prefpipe.grpo.prompts import load_rl_prompts
from prefpipe.grpo.rewards import build_rewards
from prefpipe.grpo.train_state import run_fingerprint
from prefpipe.grpo.trainer import GRPOTrainer, Preempted

log = logging.getLogger("prefpipe.train_grpo")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", required=True, help="inline JSON or a .json/.yaml file")
    parser.add_argument("--data", required=True, help="folder with rl_prompts_train.jsonl")
    parser.add_argument("--policy", required=True, help="HF folder, hub id, or a LoRA adapter folder")
    parser.add_argument(
        "--reward-model", default=None, help="folder for prefpipe.reward.model.load_reward_model"
    )
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--run", default=None, help="run name under grpo.runs (default: the --out folder name)"
    )
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> dict:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError(
            "train_grpo is a single-process trainer: run it with `python -m` (one GPU or CPU), "
            "not under `accelerate launch` with several processes"
        )
    out = Path(args.out)
    raw = load_config_arg(args.config)
    run_name = args.run or raw.get("run") or out.name
    cfg_dict = resolve_run_config(raw, run_name)
    cfg = GRPOConfig.from_dict(cfg_dict)
    EvalConfig.from_run_config(cfg_dict)  # a typo in the eval settings fails now, not after training
    uses_rm = any(spec.get("type") == "reward_model" for spec in cfg.rewards)
    if uses_rm and not args.reward_model:
        raise ConfigError(f"grpo run {run_name!r} has a reward_model reward but no --reward-model was given")
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    seed_everything(cfg.seed)

    rows, skipped = load_rl_prompts(Path(args.data) / "rl_prompts_train.jsonl")
    policy, tokenizer, lora_state = load_policy(args.policy, cfg.lora, cfg.dtype, cfg.device)
    reward_model = None
    if uses_rm:
        from prefpipe.reward.model import load_reward_model

        reward_model = load_reward_model(args.reward_model, device=str(next(policy.parameters()).device))
    rewards = build_rewards(cfg.rewards, reward_model)

    run_fp = run_fingerprint(
        cfg_dict,
        {"policy": str(args.policy), "reward_model": args.reward_model, "rows": content_digest(rows)},
    )
    check_fingerprint(out / "checkpoint", run_fp)  # another run's checkpoint stops us before any output
    record = RunRecord(out, "train_grpo", {"run": run_name, **cfg_dict})
    trainer = GRPOTrainer(cfg, policy, tokenizer, lora_state, rows, rewards, out, record, run_fp)
    log.info(
        "run %s: %d prompts (%s skipped), policy %s (lora %s), reference %s",
        run_name,
        len(rows),
        skipped or "none",
        args.policy,
        lora_state,
        type(trainer.reference).__name__,
    )
    summary = trainer.train()
    save_policy(policy, tokenizer, out / "policy", merge_lora=cfg.save_merged)
    if not cfg.keep_checkpoint and trainer.checkpoint_dir.exists():
        shutil.rmtree(trainer.checkpoint_dir)
    summary.update(
        {
            "run": run_name,
            "prompts": len(rows),
            "skipped_rows": skipped,
            "policy_dir": "policy",
            "reward_model": args.reward_model,
            "reward_model_variant": cfg.reward_model,
        }
    )
    record.finish(summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        summary = run(parse_args(argv))
    except Preempted as stop:
        log.warning("%s", stop)
        return 143
    except ConfigError as err:
        log.error("config error: %s", err)
        return 2
    log.info("done: %d steps, %.2f s/step", summary["steps"], summary["seconds_per_step"] or 0.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
