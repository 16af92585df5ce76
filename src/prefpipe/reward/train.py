"""What the train_reward_model stage does: train one variant, save it, score a sanity accuracy (see prefpipe.train_reward).

Reads <data>/pairs_train.jsonl and pairs_test.jsonl; writes <out>/model/ (see prefpipe.reward.model),
config.json, versions.json, metrics.jsonl and summary.json (train/test accuracy per subset as a sanity
figure; the eval stage does the official scoring). Multi-GPU / DeepSpeed: run the same command under
`accelerate launch --config_file <file> -m prefpipe.train_reward ...`. On SIGTERM a checkpoint is written
to <out>/checkpoints and the stage exits 143; rerunning it resumes from there. A checkpoint written with
another config or other inputs (base, training pairs) is never resumed: the stage exits 2 naming the folder,
before writing anything.
"""

from __future__ import annotations

import argparse
import logging
import random
from pathlib import Path

import torch
from accelerate.utils import DistributedType

from prefpipe.common.run_record import RunRecord
from prefpipe.common.torch_runtime.device import resolve_device
from prefpipe.common.torch_runtime.seeding import seed_everything
from prefpipe.reward.length_balance import balance_by_length
from prefpipe.reward.model import build_reward_model, load_reward_model, save_reward_model
from prefpipe.reward.pairs import pairs_digest, read_pairs
from prefpipe.reward.sanity_accuracy import pair_accuracy
from prefpipe.reward.train_setup import make_accelerator
from prefpipe.reward.trainer import RewardTrainer
from prefpipe.settings.reward import RewardSettings

log = logging.getLogger("prefpipe.train_reward")


def sanity_eval(model_dir: Path, settings: RewardSettings, train_pairs: list, test_pairs: list) -> dict:
    """Score test pairs (eval.test_pairs) and a fixed sample of train pairs (eval.train_pairs) with the SAVED
    model through the shared loader; {} when both are off (nothing is loaded)."""
    if not (settings.eval.test_pairs or settings.eval.train_pairs):
        return {}
    device = str(resolve_device("auto"))
    rm = load_reward_model(model_dir, device=device, fast_paths=settings.fast_paths)
    result = {}
    if settings.eval.test_pairs:
        result["test"] = pair_accuracy(rm, test_pairs, settings.eval.batch_size)
    if settings.eval.train_pairs:
        sample = train_pairs
        if settings.eval.train_pairs < len(train_pairs):
            sample = random.Random(settings.seed).sample(train_pairs, settings.eval.train_pairs)
        result["train"] = pair_accuracy(rm, sample, settings.eval.batch_size)
    return result


def _outside_zero3(acc, fn, *args):
    """Run fn (after training) with transformers' ZeRO-3 hook unset, so a model it loads is whole rather than
    partitioned across DeepSpeed ranks."""
    if acc.distributed_type == DistributedType.DEEPSPEED:
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config

        unset_hf_deepspeed_config()
    return fn(*args)


def train(settings: RewardSettings, data_dir: Path, base: str, out_dir: Path) -> dict:
    if settings.torch_threads:
        torch.set_num_threads(settings.torch_threads)
    seed_everything(settings.seed)
    train_pairs, skipped_train = read_pairs(data_dir / "pairs_train.jsonl")
    test_pairs, skipped_test = read_pairs(data_dir / "pairs_test.jsonl")
    balance = None
    if settings.train.length_balance:
        train_pairs, balance = balance_by_length(train_pairs, settings.seed)
        log.info("length-balanced training pairs: %s", balance)
    accelerator = make_accelerator(settings)  # before the backbone loads (DeepSpeed ZeRO-3 init)
    rm = build_reward_model(base, settings)
    inputs = {"base": str(base), "pairs_train": pairs_digest(train_pairs)}
    trainer = RewardTrainer(rm, settings, train_pairs, out_dir, accelerator=accelerator, inputs=inputs)
    trainer.checkpoint_to_resume()  # a checkpoint of another run stops us here, before any output is touched
    is_main = accelerator[0].is_main_process
    record = RunRecord(out_dir, "train_reward", settings.to_dict()) if is_main else None
    trainer.log_fn = record.log if record else None
    result = trainer.train()
    acc = trainer.acc
    state = acc.get_state_dict(trainer.prepared_model)
    summary: dict = {}
    if acc.is_main_process:
        model = acc.unwrap_model(trainer.prepared_model)
        save_reward_model(model, out_dir / "model", state_dict=state, finetuned_head=result.finetuned_head)
        summary = {
            "head_type": settings.head.type,
            "steps": result.steps,
            "resumed_from_step": result.resumed_from,
            "train_pairs": len(train_pairs),
            "test_pairs": len(test_pairs),
            "skipped_rows": {"train": dict(skipped_train), "test": dict(skipped_test)},
            "truncated": {"pairs": result.truncated_pairs, "rows": result.truncated_rows},
            "length_balance": balance,
            "final_metrics": result.final_metrics,
            "head_fit": result.head_fit,
            "accuracy": _outside_zero3(
                acc, sanity_eval, out_dir / "model", settings, train_pairs, test_pairs
            ),
        }
        record.finish(summary)
        trainer.cleanup()
    acc.wait_for_everyone()
    return summary


def run(settings: RewardSettings, args: argparse.Namespace) -> None:
    summary = train(settings, Path(args.data), args.base, Path(args.out))
    for split, block in (summary.get("accuracy") or {}).items():
        per_subset = {k: round(v["accuracy"], 3) for k, v in block["subsets"].items()}
        log.info("done: %s accuracy %.3f %s", split, block["overall"], per_subset)
