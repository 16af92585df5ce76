"""Which experiment a results folder belongs to, so one experiment never overwrites another's outputs.

Every stage leaves `config.json` ({"stage", "config": {"experiment", ...}}) beside its `summary.json`
(prefpipe.common.run_record), so the finished outputs already in a folder say which experiment made them.
The Snakefile calls `check` while it is parsed, before any job and before anything is deleted: a run whose
experiment differs from theirs stops naming both experiments and the folder, unless the config says
`replace_results: true`; then `remove` (called from `onstart:`, so never by a dry run) deletes the other
experiment's stage folders before the first job, and the folder holds one experiment again.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from prefpipe.common.config import ConfigError

log = logging.getLogger(__name__)

# The stage folders a results folder holds (one level: data/, base/...; two levels: reward/<variant>/...).
STAGE_FOLDERS = (
    "data",
    "base",
    "models",
    "reward",
    "eval",
    "eval_ensemble",
    "ablation",
    "grpo",
    "policy_eval",
    "grpo_hypotheses",
    "report",
)


@dataclass(frozen=True)
class FinishedOutput:
    folder: Path  # a stage's output folder (results/<experiment>/reward/bt)
    experiment: str


def _experiment_of(folder: Path) -> str | None:
    """The experiment a finished stage folder records (None: unfinished, or not a prefpipe run record)."""
    if not (folder / "summary.json").is_file():
        return None
    try:
        record = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    config = record.get("config") if isinstance(record, dict) else None
    experiment = config.get("experiment") if isinstance(config, dict) else None
    return experiment if isinstance(experiment, str) else None


def finished_outputs(results: str | Path) -> list[FinishedOutput]:
    """Every finished stage output under `results`, with the experiment that wrote it."""
    root = Path(results)
    found = []
    for stage in STAGE_FOLDERS:
        top = root / stage
        if not top.is_dir():
            continue
        for folder in [top, *sorted(p for p in top.iterdir() if p.is_dir())]:
            experiment = _experiment_of(folder)
            if experiment is not None:
                found.append(FinishedOutput(folder, experiment))
    return found


def check(results: str | Path, experiment: str, replace: bool) -> list[Path]:
    """The stage folders of other experiments under `results` (to remove when `replace`); without `replace`
    any such folder stops the run with a one-line message. Reads only; deletes nothing."""
    others = [out for out in finished_outputs(results) if out.experiment != experiment]
    if others and not replace:
        names = sorted({out.experiment for out in others})
        shown = ", ".join(str(out.folder.relative_to(results)) for out in others[:4])
        more = f" and {len(others) - 4} more" if len(others) > 4 else ""
        raise ConfigError(
            f"results_dir {str(results)!r} holds finished outputs of experiment {' and '.join(map(repr, names))} "
            f"({shown}{more}), and this run is experiment {experiment!r}: give this run its own results_dir "
            "(the default results/{experiment} does), or set replace_results: true "
            "(--config replace_results=True) to delete and replace them"
        )
    return [out.folder for out in others]


def remove(folders: list[Path]) -> None:
    """Delete the stage folders `check` returned (the replaced experiment's finished outputs)."""
    for folder in folders:
        log.warning("replace_results: deleting %s (another experiment's finished stage folder)", folder)
        shutil.rmtree(folder, ignore_errors=True)
