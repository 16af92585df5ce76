"""Export one trained reward run: pick the form, write the folder and its model card atomically."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from prefpipe.common.config import UserError
from prefpipe.common.io import atomic_write_json, atomic_write_text, read_json
from prefpipe.common.results.folder_kind import kind_of
from prefpipe.common.results.outputs import check_output, command_output
from prefpipe.export.card import model_card
from prefpipe.export.head_folder import write_head_folder
from prefpipe.export.sequence_classification import (
    exportable_config,
    why_not_standard,
    write_sequence_classification,
)
from prefpipe.reward.spec import HEAD_CONFIG

log = logging.getLogger(__name__)
FORMS = ("auto", "sequence-classification", "head-folder")
SUMMARY = "export.json"


def _optional_json(path: Path) -> dict[str, Any]:
    return read_json(path) if path.exists() else {}


def export_reward(
    run_dir: str | Path,
    out_dir: str | Path,
    form: str = "auto",
    eval_summary: str | Path | None = None,
    in_results: bool = False,
) -> dict[str, Any]:
    """Write run_dir/model (a prefpipe reward model) to out_dir: AutoModelForSequenceClassification where
    faithful (form auto or sequence-classification; the latter refuses, saying why, where it is not), else the
    head folder with its loader. Returns what export.json holds. out_dir follows prefpipe.common.results.outputs (never
    the run, a stage folder or a folder another command wrote); `in_results`: the workflow rule's own declared
    output inside the results tree."""
    from prefpipe.reward.model import load_reward_model

    if form not in FORMS:
        raise ValueError(f"--format {form!r}: expected one of {', '.join(FORMS)}")
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    check_output(out_dir, "export", [run_dir], in_results)  # before loading the model
    model_dir = run_dir / "model"
    if not (model_dir / HEAD_CONFIG).is_file():
        raise UserError(
            f"{run_dir}: this is {kind_of(run_dir)}, not a reward run (results/reward/<variant>, with model/)"
        )
    rm = load_reward_model(model_dir)
    reason = why_not_standard(rm)
    if form == "sequence-classification" and reason is not None:
        raise ValueError(
            f"{model_dir}: not exportable as AutoModelForSequenceClassification: {reason}; "
            f"a model trained with {exportable_config()} is"
        )
    standard = reason is None and form != "head-folder"
    config = _optional_json(run_dir / "config.json").get("config", {})
    model_type = rm.config.model_type
    with command_output(out_dir, "export", [run_dir], in_results) as tmp:
        info = write_sequence_classification(rm, tmp) if standard else write_head_folder(rm, tmp)
        info |= {
            "source": str(model_dir),
            "model_type": model_type,
            "why_not_sequence_classification": reason,
        }
        summary = read_json(eval_summary) if eval_summary is not None else None
        spec = read_json(model_dir / HEAD_CONFIG)
        card = model_card(
            config.get("variant", run_dir.name),
            info,
            spec,
            config,
            _optional_json(run_dir / "summary.json"),
            summary,
        )
        atomic_write_text(tmp / "README.md", card)
        atomic_write_json(tmp / SUMMARY, info)
    log.info("exported %s as %s to %s", model_dir, info["format"], out_dir)
    return info
