"""Who a stage's wandb run is: id, name, group, job type and tags, all derived from the run's own settings.

Why: runs of one experiment and seed belong together (group), stages of the same kind compare across
experiments (job type), and a SLURM job that is requeued must continue its run, not start a second one. The
id is therefore a hash of (experiment, seed, stage, member), where the member is the reward variant or GRPO run
(else the output folder's name): the same stage of the same run gets the same id on every start, and
`resume="allow"` makes wandb continue it. Nothing machine- or time-specific enters the id.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Stage (RunRecord's name) -> wandb job type; a stage not listed uses its own name.
JOB_TYPES = {
    "prep_data": "data",
    "build_base": "base",
    "import_model": "base",
    "train_reward": "reward",
    "eval_rewardbench": "eval",
    "train_grpo": "grpo",
    "eval_policy": "policy_eval",
    "grpo_hypotheses": "hypotheses",
    "ablation": "ablation",
    "report": "report",
}
ID_PREFIX = "pp-"
ID_HEX_CHARS = 24  # 96 bits: no two (experiment, seed, stage, member) of a project collide in practice


@dataclass(frozen=True)
class WandbIdentity:
    id: str
    name: str
    group: str
    job_type: str
    tags: tuple[str, ...]


def member_of(config: dict[str, Any], out_dir: Path) -> str:
    """The reward variant or GRPO run of the config, else the output folder's name (the variant for
    eval_rewardbench, the run for eval_policy): what tells the runs of one stage apart."""
    return str(config.get("variant") or config.get("run") or out_dir.name)


def wandb_identity(stage: str, config: dict[str, Any], out_dir: Path) -> WandbIdentity:
    """The run's identity; `config` is the stage's settings mapping (experiment and seed are run-wide keys)."""
    experiment, seed, member = config.get("experiment"), config.get("seed"), member_of(config, out_dir)
    key = json.dumps([experiment, seed, stage, member])
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:ID_HEX_CHARS]
    seed_part = None if seed is None else f"seed{seed}"
    job_type = JOB_TYPES.get(stage, stage)
    shown = None if member in (stage, job_type) else member  # the folder of a one-per-run stage says nothing
    name = "/".join(str(p) for p in (experiment, stage, shown, seed_part) if p is not None and p != "")
    group = "-".join(str(p) for p in (experiment or "prefpipe", seed_part) if p)
    tags = tuple(dict.fromkeys(t[:64] for t in (member, job_type, str(experiment or "")) if t))
    return WandbIdentity(ID_PREFIX + digest, name, group, job_type, tags)
