"""One GRPO step, token by token: `python -m prefpipe.inspect_grpo RUN_DIR --step N`.

RUN_DIR is a train_grpo output (results/grpo/<run>): its config.json gives the run's settings. A step named in
the run's `grpo.inspect_steps` was saved by the trainer (batch + pre-update weights, prefpipe.grpo.inspector.save):
the table is recomputed from them and its loss is compared with the loss the trainer logged. `--fresh` instead
samples a new batch for step N's prompts from a policy (default RUN_DIR/policy, the trained one) against a
reference (`--reference`, e.g. results/base/model; required when beta > 0): nothing to compare the loss with.

Writes step-N.html, step-N.md and step-N.json (the loss check and every token row) to --out (default
prefpipe-inspect/<run>-step-N, or <run>-fresh-N, in the current folder): a new folder, never one inside the
results tree's stage folders (prefpipe.common.results.outputs). Exit 2 on a user error.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path

import torch

from prefpipe.common.config import UserError
from prefpipe.common.io import atomic_write_json, atomic_write_text, read_json
from prefpipe.common.logs import setup_logging
from prefpipe.common.results.folder_kind import require_stage
from prefpipe.common.results.outputs import check_output, command_output, path_argument, path_text
from prefpipe.grpo.algorithm.reference import ReferencePolicy, build_reference, frozen_copy
from prefpipe.grpo.inspector import save as inspect_step_save
from prefpipe.grpo.inspector.table import StepTable, attach_groups, step_table
from prefpipe.grpo.metric_names import LOSS_FIRST_ITERATION
from prefpipe.grpo.policy_io import load_policy
from prefpipe.report.html import render_html
from prefpipe.report.inspect_step_page import build_page
from prefpipe.report.markdown import render_markdown
from prefpipe.settings.grpo import GrpoSettings

log = logging.getLogger("prefpipe.inspect_grpo")
DEFAULT_OUT = Path("prefpipe-inspect")
DESCRIPTION = (
    "One GRPO step, token by token: the per-token table of a step the run saved (grpo.inspect_steps), recomputed "
    "from its batch and pre-update weights, with its loss checked against the loss the trainer logged; or, with "
    "--fresh, of a new batch for that step's prompts. Writes step-N.html, step-N.md and step-N.json."
)


def run_settings(run_dir: Path) -> GrpoSettings:
    path = run_dir / "config.json"
    require_stage(run_dir, "train_grpo", "a GRPO run (results/grpo/<run>, a train_grpo output folder)")
    return GrpoSettings.from_stage_config(read_json(path)["config"], str(path))


def _load_trainable(policy: torch.nn.Module, weights: dict[str, torch.Tensor], where: str) -> None:
    params = dict(policy.named_parameters())
    missing = sorted(set(weights) - set(params))
    if missing:
        raise UserError(f"{where}: weights not in the policy: {missing[:3]} (another policy folder?)")
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value)


def saved(args, settings: GrpoSettings) -> tuple[StepTable, float | None, str]:
    step = inspect_step_save.load_step(args.run_dir, args.step)
    source = args.policy or step.record.get("policy_source")
    if not source or not Path(source).exists():
        raise UserError(f"the run's starting policy {source!r} is not there; pass --policy FOLDER")
    torch.manual_seed(
        settings.seed
    )  # a fresh LoRA adapter's initial A matrices (B = 0, so outputs do not depend on it)
    policy, tok, lora_state = load_policy(source, settings.lora, settings.dtype, "cpu")
    reference = build_reference(policy, lora_state, settings.kl_to_reference, settings.reference_mode)
    _load_trainable(policy, step.weights, str(inspect_step_save.step_dir(args.run_dir, args.step)))
    table = step_table(settings, policy, reference, tok, step.rollout, step.advantages, args.step)
    attach_groups(
        table, step.record["rows"], step.rewards, step.parts, step.advantages, settings, step.rollout.texts
    )
    trainer_loss = step.trainer.get(LOSS_FIRST_ITERATION, step.trainer.get("loss"))
    return (
        table,
        trainer_loss,
        f"Saved batch of step {args.step}, weights before its update (policy {source}).",
    )


def fresh(args, settings: GrpoSettings) -> tuple[StepTable, None, str]:
    from prefpipe.generation.rl_prompts import load_rl_prompts
    from prefpipe.grpo.rewards import build_rewards
    from prefpipe.grpo.training.trainer import GRPOTrainer

    if args.data is None:
        raise UserError("--fresh needs --data (the folder with rl_prompts_train.jsonl)")
    policy_dir = args.policy or str(args.run_dir / "policy")
    policy, tok, lora_state = load_policy(policy_dir, None, settings.dtype, "cpu")
    rows, _ = load_rl_prompts(Path(args.data) / "rl_prompts_train.jsonl")
    reward_model = None
    if settings.uses_reward_model():
        if args.reward_model is None:
            raise UserError(f"run {settings.run!r} has a reward_model reward: pass --reward-model FOLDER")
        from prefpipe.reward.ensemble import load_reward

        reward_model = load_reward(args.reward_model, device="cpu", fast_paths=settings.fast_paths)
    fresh_settings = dataclasses.replace(
        settings, beta=0.0, inspect_steps=[]
    )  # the reference is attached below
    trainer = GRPOTrainer(
        fresh_settings, policy, tok, lora_state, rows, build_rewards(settings.rewards, reward_model), "."
    )
    batch, _ = trainer._rollout(args.step)
    reference = None
    if settings.kl_to_reference:
        if args.reference is None:
            raise UserError(
                f"run {settings.run!r} has beta {settings.beta}: pass --reference FOLDER (e.g. results/base/model)"
            )
        ref_model, _, _ = load_policy(args.reference, None, settings.dtype, "cpu")
        reference = ReferencePolicy(frozen_copy(ref_model), via_disable_adapter=False)
    table = step_table(settings, policy, reference, tok, batch.rollout, batch.advantages, args.step)
    attach_groups(
        table, batch.rows, batch.rewards, batch.parts, batch.advantages, settings, batch.rollout.texts
    )
    return (
        table,
        None,
        f"Fresh batch for step {args.step}'s prompts from {policy_dir} (reference {args.reference}).",
    )


def write(table: StepTable, settings: GrpoSettings, trainer_loss, source: str, out: Path, limit) -> None:
    doc = build_page(table, settings.run, trainer_loss, source, limit)
    stem = f"step-{table.step}"
    atomic_write_text(out / f"{stem}.html", render_html(doc))
    atomic_write_text(out / f"{stem}.md", render_markdown(doc, figure_dir=None))
    atomic_write_json(
        out / f"{stem}.json",
        {
            "run": settings.run,
            "step": table.step,
            "table_loss": table.table_loss,
            "trainer_loss": trainer_loss,
            "loss_type": table.loss_type,
            "num_tokens": table.num_tokens,
            "groups": table.groups,
            "tokens": [dataclasses.asdict(t) for t in table.tokens],
        },
    )


def parser(prog: str = "python -m prefpipe.inspect_grpo") -> argparse.ArgumentParser:
    """The inspector's arguments (also `prefpipe inspect`'s, prefpipe.cli)."""
    p = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    p.add_argument("run_dir", type=path_argument, help="a train_grpo output folder (results/grpo/<run>)")
    p.add_argument(
        "--step", type=int, required=True, help="the step (a saved one: listed in grpo.inspect_steps)"
    )
    p.add_argument("--fresh", action="store_true", help="sample a new batch instead of reading a saved one")
    p.add_argument(
        "--policy",
        type=path_text,
        help="saved: the starting policy folder; --fresh: the policy (default RUN_DIR/policy)",
    )
    p.add_argument(
        "--reference", type=path_text, help="--fresh: the reference policy folder (needed when beta > 0)"
    )
    p.add_argument("--data", type=path_text, help="--fresh: folder with rl_prompts_train.jsonl")
    p.add_argument(
        "--reward-model",
        dest="reward_model",
        nargs="+",
        type=path_text,
        help="--fresh: reward model folder (several: a deep ensemble's members)",
    )
    p.add_argument("--completions", type=int, help="token tables for the first K completions only")
    p.add_argument(
        "--out",
        type=path_argument,
        help=f"output folder, new or this command's own (default {DEFAULT_OUT}/<run>-step-N or <run>-fresh-N)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    return run(parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Inspect the step `args` name; exit code 0, or 2 after a one-line user error."""
    setup_logging()
    mode = "fresh" if args.fresh else "step"
    out = args.out or DEFAULT_OUT / f"{args.run_dir.name}-{mode}-{args.step}"
    command = f"inspect{' --fresh' if args.fresh else ''} --step {args.step}"
    try:
        check_output(out, command, [args.run_dir])  # before any work
        settings = run_settings(args.run_dir)
        table, trainer_loss, source = (fresh if args.fresh else saved)(args, settings)
        with command_output(out, command, [args.run_dir]) as tmp:
            write(table, settings, trainer_loss, source, tmp, args.completions)
    except UserError as err:
        log.error("inspect_grpo: %s", err)
        return 2
    log.info(
        "step %d: table loss %.8g, trainer loss %s -> %s", args.step, table.table_loss, trainer_loss, out
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
