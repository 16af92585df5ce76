"""What the eval_ensemble stage does (entry: prefpipe.eval_ensemble): score a deep ensemble of reward variants
(K point heads trained alike from different seeds, `eval.ensembles`), the field's reference for reward-model
uncertainty (docs/findings/UNCERTAINTY.md).

The ensemble's decision is its members' mean score > 0; its uncertainties are the members' disagreement: the sd
of their scores, and the predictive entropy of the members taken as posterior samples with its two parts, the
mean of the members' entropies (aleatoric) and the mutual information (epistemic)
(prefpipe.evaluation.uncertainty.ensemble_preference), beside -|mean| (its point margin). Read from each
member's results/eval/<variant>/summary.json and per_example.parquet (the primary benchmark's rows, which must be
the same pairs for every member); written to <out>/summary.json, whose `uncertainty` block has the layout of an
eval summary's (prefpipe.evaluation.uncertainty_block). The ensemble is the one named by the --out folder.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from prefpipe.common.config import ConfigError, DataError
from prefpipe.common.run_record import RunRecord
from prefpipe.evaluation.summary_keys import (
    EXPECTED_ENTROPY,
    MARGIN,
    MEMBER_SD,
    MUTUAL_INFORMATION,
    PAIR_FIELDS,
    PREDICTIVE_ENTROPY,
    UNCERTAINTY,
)
from prefpipe.evaluation.uncertainty import ensemble_preference
from prefpipe.evaluation.uncertainty_block import uncertainty_block
from prefpipe.settings.build import to_mapping
from prefpipe.settings.evaluation import EvalSettings, UncertaintyEvalSettings

MEMBER_DISAGREEMENT = "member_disagreement"  # share of members whose decision differs from the ensemble's


def load_member(eval_dir: Path, variant: str) -> tuple[pd.DataFrame, float]:
    """The primary benchmark's per-example rows of one variant and its tau."""
    folder = eval_dir / variant
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    frame = pd.read_parquet(folder / "per_example.parquet")
    if "benchmark" in frame:
        frame = frame[frame["benchmark"] == summary["primary_benchmark"]].reset_index(drop=True)
    return frame, float(summary["tau"])


def ensemble_view(
    members: dict[str, tuple[pd.DataFrame, float]],
) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """(rows in the first member's order: id, subset, the pair fields and the ensemble's `correct`; candidates)
    of the ensemble. The members must be point heads with one tau, scored on the same pairs (matched by id)."""
    names = list(members)
    first, tau = members[names[0]]
    columns = []
    for name, (frame, own_tau) in members.items():
        if own_tau != tau:
            raise DataError(f"eval ensemble: member {name} has tau {own_tau}, {names[0]} has {tau}")
        if set(frame["id"]) != set(first["id"]) or len(frame) != len(first):
            raise DataError(f"eval ensemble: member {name} scored other pairs than {names[0]}")
        if not frame["variance"].isna().all():
            raise DataError(f"eval ensemble: member {name} is a Bayesian head (ensembles are of point heads)")
        aligned = frame.set_index("id").loc[first["id"], "score_chosen_minus_rejected"]
        columns.append(aligned.to_numpy(np.float64))
    view = ensemble_preference(np.stack(columns, axis=1), tau)
    rows = first[["id", "subset", *[f for f in PAIR_FIELDS if f in first]]].reset_index(drop=True)
    rows["correct"] = view["score"] > 0
    found = {
        MARGIN: -np.abs(view["score"]),
        MEMBER_SD: view["score_sd"],
        MEMBER_DISAGREEMENT: view["flip_probability"],
        PREDICTIVE_ENTROPY: view["predictive_entropy"],
        EXPECTED_ENTROPY: view["expected_entropy"],
        MUTUAL_INFORMATION: view["mutual_information"],
    }
    return rows, found


def ensemble_summary(
    name: str, members: dict[str, tuple[pd.DataFrame, float]], settings: UncertaintyEvalSettings, seed: int
) -> dict[str, Any]:
    """The ensemble's accuracy and uncertainty block."""
    rows, found = ensemble_view(members)
    correct = rows["correct"].to_numpy(bool)
    block = uncertainty_block(
        correct, found, rows.to_dict("records"), rows["subset"].tolist(), settings, seed
    )
    return {
        "ensemble": name,
        "members": list(members),
        "n_pairs": len(rows),
        "accuracy": float(correct.mean()),
        "member_accuracy": {m: float(f["correct"].mean()) for m, (f, _) in members.items()},
        UNCERTAINTY: block,
    }


def run(settings: EvalSettings, args: argparse.Namespace) -> dict[str, Any]:
    """Score the ensemble named by the --out folder from its members' evaluations under --eval."""
    out = Path(args.out)
    ensembles = settings.eval.ensembles
    if out.name not in ensembles:
        raise ConfigError(
            f"eval.ensembles has no ensemble {out.name!r} (the --out folder's name): {sorted(ensembles)}"
        )
    members = {v: load_member(Path(args.eval), v) for v in ensembles[out.name]}
    record = RunRecord(out, "eval_ensemble", to_mapping(settings))
    summary = ensemble_summary(out.name, members, settings.eval.uncertainty, settings.seed)
    record.finish(summary, timing={})
    return summary
