"""Group-relative advantages: each completion's reward minus the mean reward of its prompt's group.

scale_rewards:
  group  divide by the group's std + eps (GRPO; a group of equal rewards gets zero advantages, never 0/0)
  batch  divide by the std of all rewards in the batch + eps (one scale for every prompt)
  none   no scaling (Dr. GRPO: avoids up-weighting prompts whose rewards barely differ)
Std is the unbiased (n - 1) sample std, as torch.std and TRL use it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SCALE_MODES = ("group", "batch", "none")


@dataclass
class Advantages:
    advantages: torch.Tensor  # (B*G,) one per completion, prompt-major order
    group_mean: torch.Tensor  # (B,)
    group_std: torch.Tensor  # (B,)
    frac_zero_std: float  # share of groups whose rewards are all equal (no learning signal)


def group_advantages(rewards: torch.Tensor, group_size: int, scale_rewards: str, eps: float) -> Advantages:
    """Advantages for rewards laid out prompt-major: rewards[i*G:(i+1)*G] belong to prompt i."""
    if scale_rewards not in SCALE_MODES:
        raise ValueError(f"grpo.scale_rewards must be one of {SCALE_MODES}, got {scale_rewards!r}")
    rewards = rewards.float()
    if rewards.ndim != 1 or rewards.numel() % group_size != 0:
        raise ValueError(f"rewards of shape {tuple(rewards.shape)} do not split into groups of {group_size}")
    if group_size < 2:
        raise ValueError("grpo.num_generations must be at least 2: a group of one has no baseline")
    grouped = rewards.view(-1, group_size)
    mean = grouped.mean(dim=1)
    std = grouped.std(dim=1)
    centred = (grouped - mean[:, None]).reshape(-1)
    if scale_rewards == "group":
        centred = centred / (std.repeat_interleave(group_size) + eps)
    elif scale_rewards == "batch":
        centred = centred / (rewards.std() + eps)
    zero_std = torch.isclose(std, torch.zeros_like(std), atol=1e-6)
    return Advantages(centred, mean, std, float(zero_std.float().mean()))
