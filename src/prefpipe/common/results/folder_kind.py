"""What kind of folder a `prefpipe` command was given, read from what prefpipe leaves in it (a stage's run
record config.json {"stage": ...}, a command's output marker, a results tree's stage folders), so a command
given the wrong folder says what it got and what it wants ("this is a reward run, not a GRPO run") instead of
failing on a file it expected."""

from __future__ import annotations

import json
from pathlib import Path

from prefpipe.common.config import UserError
from prefpipe.common.results.outputs import MARKER, is_results_tree

# stage name (the run record's "stage") -> what a person calls its folder
STAGE_KINDS = {
    "prep_data": "a data folder (prep_data)",
    "build_base": "a base model folder (build_base)",
    "import_model": "an imported model folder (import_model)",
    "train_reward": "a reward run (train_reward)",
    "eval_rewardbench": "a reward model's evaluation (eval_rewardbench)",
    "eval_ensemble": "a deep ensemble's evaluation (eval_ensemble)",
    "ablation": "an ablation summary (ablation)",
    "train_grpo": "a GRPO run (train_grpo)",
    "eval_policy": "a policy evaluation (eval_policy)",
    "grpo_hypotheses": "the GRPO hypotheses summary (grpo_hypotheses)",
    "active_label": "an active-learning labelling round (active_label)",
    "active_score": "an active-learning scoring round (active_score)",
    "active_train": "an active-learning training round (active_train)",
    "active_curve": "the active-learning curve (active_curve)",
    "report": "a report folder (report)",
}


def _json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def kind_of(folder: str | Path) -> str:
    """The folder as a person would name it: 'a reward run (train_reward)', 'a workflow results folder',
    'the output of `prefpipe export`', 'a folder prefpipe did not write', 'a folder that does not exist'."""
    folder = Path(folder)
    if not folder.exists():
        return "a folder that does not exist"
    if not folder.is_dir():
        return "a file, not a folder"
    marker = _json(folder / MARKER)
    if isinstance(marker, dict):
        return f"the output of `prefpipe {marker.get('command')}`"
    record = _json(folder / "config.json")
    if isinstance(record, dict) and "stage" in record:
        return STAGE_KINDS.get(str(record["stage"]), f"a {record['stage']} stage folder")
    if is_results_tree(folder):
        return "a workflow results folder (results/<experiment>)"
    return "a folder prefpipe did not write (no run record config.json)"


def require_stage(folder: str | Path, stage: str, wanted: str) -> None:
    """UserError unless `folder` holds `stage`'s run record, saying what the folder is instead:
    'results/reward/bt: this is a reward run (train_reward), not a GRPO run (results/grpo/<run>)'."""
    record = _json(Path(folder) / "config.json")
    if isinstance(record, dict) and record.get("stage") == stage:
        return
    raise UserError(f"{folder}: this is {kind_of(folder)}, not {wanted}")


def require_results(folder: str | Path) -> None:
    """UserError unless `folder` is a workflow results folder (the report's input), saying what it is."""
    if not is_results_tree(Path(folder)):
        raise UserError(
            f"{folder}: this is {kind_of(folder)}, not a workflow results folder (results/<experiment>)"
        )
