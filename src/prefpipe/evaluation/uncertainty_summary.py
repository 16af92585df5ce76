"""Uncertainty table of finished evaluations (docs/findings/UNCERTAINTY.md): what each head's candidate uncertainties say about its
errors, about high-disagreement pairs (all, and familiar ones only) and about unfamiliar pairs, read from results/eval/<variant>/ and the
data stage's pairs_test.jsonl (the uncertainty world's `flip_rate` and `unfamiliar` fields, when present).

  python -m prefpipe.evaluation.uncertainty_summary --eval-dir results/eval --variants bgpm gpm bt \\
      --pairs results/data/pairs_test.jsonl --disagreement-at 0.2 --resamples 2000 --confidence 0.95 \\
      --seed 0 --calibration-bins 10 --compare bgpm gpm [--ensemble gpm-s0 gpm-s1 gpm-s2] --out uncertainty.json

The eval stage writes the same block into each summary (prefpipe.evaluation.uncertainty_block); this command
recomputes it for finished evaluations with other settings, adds the paired ECE difference of two heads, and
scores any set of point heads as a deep ensemble.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from prefpipe.evaluation.ensemble import ensemble_view, load_member
from prefpipe.evaluation.uncertainty import ece_difference, gaussian_preference
from prefpipe.evaluation.uncertainty_block import candidates, uncertainty_block
from prefpipe.settings.evaluation import UncertaintyEvalSettings


def head_candidates(frame: pd.DataFrame, tau: float) -> dict[str, np.ndarray]:
    """uncertainty_block.candidates of one head from its per-example table (the posterior measures are
    recomputed from score and variance, so tables written before the eval recorded them work too)."""
    m = frame["score_chosen_minus_rejected"].to_numpy(np.float64)
    variance = frame["variance"].to_numpy(np.float64)
    if np.all(np.isnan(variance)):
        return candidates(m, None, None)
    return candidates(m, variance, gaussian_preference(m, variance, tau))


def head_table(
    frame: pd.DataFrame, found: dict[str, np.ndarray], pairs: dict[str, dict] | None, args: argparse.Namespace
) -> dict:
    """The uncertainty block of one head's rows (pairs: the test pairs by id, for the world's targets)."""
    rows = [pairs[i] for i in frame["id"]] if pairs is not None else None
    settings = UncertaintyEvalSettings(args.resamples, args.confidence, args.disagreement_at)
    return uncertainty_block(
        frame["correct"].to_numpy(bool), found, rows, frame["subset"].tolist(), settings, args.seed
    )


def build(args: argparse.Namespace) -> dict[str, Any]:
    pairs = None
    if args.pairs:
        lines = Path(args.pairs).read_text(encoding="utf-8").splitlines()
        pairs = {row["id"]: row for row in map(json.loads, filter(str.strip, lines))}
    heads = {v: load_member(Path(args.eval_dir), v) for v in args.variants}
    out: dict[str, Any] = {
        "heads": {v: head_table(f, head_candidates(f, tau), pairs, args) for v, (f, tau) in heads.items()}
    }
    if args.ensemble:
        frame, found = ensemble_view({v: load_member(Path(args.eval_dir), v) for v in args.ensemble})
        out["heads"]["ensemble(" + ",".join(args.ensemble) + ")"] = head_table(frame, found, pairs, args)
    if args.compare:
        a, b = args.compare
        fa, fb = heads[a][0], heads[b][0].set_index("id").loc[heads[a][0]["id"]].reset_index()
        out["ece_difference"] = {
            "heads": [a, b],
            **ece_difference(
                fa["prob"], fa["correct"], fb["prob"], fb["correct"], fa["subset"].tolist(),
                n_bins=args.calibration_bins, resamples=args.resamples, confidence=args.confidence,
                seed=args.seed,
            ),
        }  # fmt: skip
    return out


def markdown(result: dict[str, Any]) -> str:
    """One line per head, target and candidate: AUROC [interval]; for errors also the AURC, the margin's AURC
    and the paired interval of their difference; then the paired ECE difference."""
    lines = [
        "| head | target | uncertainty | AUROC [95%] | AURC (margin's) | AURC - margin's [95%] |",
        "|---|---|---|---|---|---|",
    ]
    for head, table in result["heads"].items():
        for target, rows in table["auroc"].items():
            for name, a in rows.items():
                if name == "skipped":
                    continue
                sel = table["aurc_vs_margin"].get(name) if target == "errors" else None
                area = f"{sel['uncertainty']:.4f} ({sel['margin']:.4f})" if sel else ""
                d = sel["difference"] if sel else None
                diff = f"{d['value']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]" if d else ""
                interval = f"{a['value']:.3f} [{a['low']:.3f}, {a['high']:.3f}]"
                lines.append(f"| {head} | {target} | {name} | {interval} | {area} | {diff} |")
    if "ece_difference" in result:
        e = result["ece_difference"]
        d = e["difference"]
        lines.append(
            f"\nECE {e['heads'][0]} {e['a']:.4f}, {e['heads'][1]} {e['b']:.4f}, difference "
            f"{d['value']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}] (paired bootstrap)"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--eval-dir", required=True)
    p.add_argument("--variants", nargs="+", required=True)
    p.add_argument("--pairs", help="pairs_test.jsonl with flip_rate / unfamiliar fields (optional)")
    p.add_argument("--disagreement-at", type=float, required=True)
    p.add_argument("--resamples", type=int, required=True)
    p.add_argument("--confidence", type=float, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--calibration-bins", type=int, required=True)
    p.add_argument("--ensemble", nargs="+", help="point-head variants scored as one deep ensemble (K >= 2)")
    p.add_argument("--compare", nargs=2, metavar=("BAYESIAN", "POINT"), help="paired ECE difference")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    result = build(args)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(markdown(result), end="")


if __name__ == "__main__":
    main()
