"""A GRPO step's batch: which prompts, the uniforms that fix its samples, its rewards and group-relative
advantages. Each step is seeded from (seed, step), so a run resumed from a checkpoint replays the same prompts
and samples as an uninterrupted one, and a data-parallel process draws exactly its rows' share.
"""

from __future__ import annotations

import torch

from prefpipe.common.chat import conversation
from prefpipe.grpo.algorithm import diagnostics
from prefpipe.grpo.algorithm.advantages import group_advantages
from prefpipe.grpo.algorithm.update import StepBatch
from prefpipe.grpo.analyses import risk
from prefpipe.grpo.data_parallel import DataParallel
from prefpipe.grpo.metric_names import FRAC_REWARD_ZERO_STD
from prefpipe.grpo.rewards import RewardInputs, WeightedReward, compute_rewards
from prefpipe.grpo.rewards import verifier_reward as verifier_scores
from prefpipe.grpo.rollout.completions import Rollout
from prefpipe.settings.grpo import GrpoSettings


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


def step_uniforms(settings: GrpoSettings, n_rows: int, step: int) -> torch.Tensor:
    """One uniform per (row, token) of the whole batch, seeded by (seed, step): a process's rows draw exactly
    the tokens they would draw in a one-process run."""
    return torch.rand(
        n_rows * settings.num_generations,
        settings.sampled_tokens,
        generator=torch.Generator().manual_seed(settings.seed * 100_003 + step),
    )


def reward_inputs(
    rows: list[dict],
    rollout: Rollout,
    group_size: int,
    refs: list[str] | None,
    scored: list[str] | None = None,
) -> RewardInputs:
    """The reward functions' view of a rollout: each prompt's fields repeated for its G completions; `scored`
    replaces the texts the rewards read (a multi-turn episode's final answer)."""
    G = group_size
    return RewardInputs(
        prompts=[conversation(r) for r in rows for _ in range(G)],
        completions=rollout.texts if scored is None else scored,
        answers=[r["answer"] for r in rows for _ in range(G)],
        kinds=[r["kind"] for r in rows for _ in range(G)],
        aliases=[r.get("aliases", []) for r in rows for _ in range(G)],
        terminated=(~rollout.truncated).tolist(),
        group_size=G,
        reference_completions=refs,
    )


def score_batch(
    settings: GrpoSettings,
    rewards: list[WeightedReward],
    dp: DataParallel,
    share: slice,
    sampled: tuple[list[dict], Rollout, RewardInputs],
    device: torch.device,
) -> tuple[StepBatch, dict[str, float]]:
    """Rewards, the verifier's un-optimised signal and advantages over the whole batch (gathered from every
    process; `share`: this process's prompts of it); the batch keeps this process's rows."""
    rows, rollout, inputs = sampled
    G = settings.num_generations
    total, parts = compute_rewards(rewards, inputs)
    local = slice(share.start * G, share.stop * G)
    if dp.enabled:  # advantages and reward metrics over the whole batch
        total = dp.gather_rows(total.float())
        parts = {name: dp.gather_rows(v.float()) for name, v in parts.items()}
    verifier = {}
    if all(r["answer"] is not None for r in rows):  # the un-optimised verifier signal (reward hacking)
        verifier = diagnostics.verifier_metrics(
            dp.gather_rows(torch.as_tensor(verifier_scores(inputs), dtype=torch.float))
        )
    adv = group_advantages(total, G, settings.scale_rewards, settings.advantage_eps)
    batch = StepBatch(
        rows,
        rollout,
        total[local] if dp.enabled else total,
        {name: v[local] for name, v in parts.items()} if dp.enabled else parts,
        adv.advantages[local].to(device) if dp.enabled else adv.advantages.to(device),
    )
    metrics = {
        **diagnostics.reward_metrics(total, parts, G),
        **verifier,
        FRAC_REWARD_ZERO_STD: adv.frac_zero_std,
        **diagnostics.advantage_metrics(adv.advantages),
        **diagnostics.length_metrics(rollout, dp.gather_rows),
        **risk.step_metrics(rewards, G, dp.gather_rows),
    }
    return batch, metrics
