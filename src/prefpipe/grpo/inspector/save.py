"""What the trainer keeps of a step named in `grpo.inspect_steps`, for the one-step inspector
(grpo/inspector/table.py recomputes the step from it).

<out>/inspect/step-NNNNNNNN/
  batch.safetensors    the rollout (prompt/completion ids and masks, truncation, the sampling engine's own log-probs
                       when an engine such as vLLM sampled), rewards, advantages, reward parts
  weights.safetensors  the trainable parameters BEFORE the step's update (what produced the step's loss); left
                       out at step 0 of full fine-tuning, where they are the starting folder's
  batch.json           prompts (id, prompt, answer, kind), decoded completions, reward part names, lora state,
                       the policy folder the run started from
  trainer.json         written after the update: the step's metrics as the trainer logged them (loss, ...)
The first three are written together (one atomic folder); trainer.json follows once the step is done.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from prefpipe.common.config import UserError
from prefpipe.common.io import atomic_dir, atomic_write_json, read_json
from prefpipe.grpo.algorithm.train_state import trainable_state
from prefpipe.grpo.rollout.completions import Rollout

INSPECT_DIR = "inspect"
ROLLOUT_FIELDS = (
    "prompt_ids",
    "prompt_mask",
    "completion_ids",
    "completion_mask",
    "env_mask",
    "truncated",
    "prompt_truncated",
)
SAMPLER_FIELD = "sampler_logprobs"  # kept only when an engine reported its own log-probs


def step_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / INSPECT_DIR / f"step-{step:08d}"


def saved_steps(run_dir: str | Path) -> list[int]:
    root = Path(run_dir) / INSPECT_DIR
    if not root.is_dir():
        return []
    return sorted(int(p.name.split("-")[1]) for p in root.glob("step-*") if (p / "trainer.json").is_file())


def save_step(
    run_dir: str | Path,
    step: int,
    rollout: Rollout,
    rewards: torch.Tensor,
    advantages: torch.Tensor,
    parts: dict[str, torch.Tensor],
    rows: list[dict],
    policy: torch.nn.Module,
    meta: dict[str, Any],
) -> Path:
    """Write the batch and the pre-update trainable weights of `step` (before the update runs)."""
    tensors = {name: getattr(rollout, name).detach().cpu().contiguous() for name in ROLLOUT_FIELDS}
    if rollout.sampler_logprobs is not None:  # a separate engine sampled: its log-probs weight the loss
        tensors[SAMPLER_FIELD] = rollout.sampler_logprobs.detach().float().cpu().contiguous()
    tensors["rewards"] = rewards.detach().float().cpu().contiguous()
    tensors["advantages"] = advantages.detach().float().cpu().contiguous()
    names = list(parts)
    for i, name in enumerate(names):
        tensors[f"part_{i}"] = parts[name].detach().float().cpu().contiguous()
    # full fine-tuning at step 0: the weights are the starting folder's (policy_source); nothing to copy
    skip_weights = step == 0 and meta.get("lora_state") == "none" and meta.get("policy_source")
    weights = {} if skip_weights else {k: v.cpu().contiguous() for k, v in trainable_state(policy).items()}
    record = {
        "step": step,
        "rows": [{k: r.get(k) for k in ("id", "prompt", "answer", "kind")} for r in rows],
        "texts": rollout.texts,
        "parts": names,
        **meta,
    }
    folder = step_dir(run_dir, step)
    with atomic_dir(folder) as tmp:
        save_file(tensors, str(tmp / "batch.safetensors"))
        if weights:
            save_file(weights, str(tmp / "weights.safetensors"))
        atomic_write_json(tmp / "batch.json", record)
    return folder


def finish_step(run_dir: str | Path, step: int, metrics: dict[str, Any]) -> None:
    atomic_write_json(step_dir(run_dir, step) / "trainer.json", metrics)


@dataclass
class SavedStep:
    rollout: Rollout
    rewards: torch.Tensor
    advantages: torch.Tensor
    parts: dict[str, torch.Tensor]
    record: dict[str, Any]
    weights: dict[str, torch.Tensor]  # empty: the policy_source folder's weights are the step's
    trainer: dict[str, Any]


def load_step(run_dir: str | Path, step: int) -> SavedStep:
    folder = step_dir(run_dir, step)
    if not (folder / "trainer.json").is_file():
        have = saved_steps(run_dir)
        raise UserError(
            f"{folder}: step {step} was not saved (saved: {have or 'none'}); add it to grpo.runs.<run>."
            "inspect_steps and rerun, or use --fresh"
        )
    t = load_file(str(folder / "batch.safetensors"))
    record = read_json(folder / "batch.json")
    rollout = Rollout(
        **{name: t[name] for name in ROLLOUT_FIELDS},
        texts=record["texts"],
        sampler_logprobs=t.get(SAMPLER_FIELD),
    )
    parts = {name: t[f"part_{i}"] for i, name in enumerate(record["parts"])}
    return SavedStep(
        rollout,
        t["rewards"],
        t["advantages"],
        parts,
        record,
        load_file(str(folder / "weights.safetensors")) if (folder / "weights.safetensors").is_file() else {},
        read_json(folder / "trainer.json"),
    )
