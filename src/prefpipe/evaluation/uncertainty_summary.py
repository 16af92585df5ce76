"""Uncertainty table of finished evaluations (issue 33): what each head's candidate uncertainties say about its
errors, about high-disagreement pairs and about unfamiliar pairs, read from results/eval/<variant>/ and the
data stage's pairs_test.jsonl (the uncertainty world's `flip_rate` and `unfamiliar` fields, when present).

  python -m prefpipe.evaluation.uncertainty_summary --eval-dir results/eval --variants bgpm gpm bt \\
      --pairs results/data/pairs_test.jsonl --disagreement-at 0.2 --resamples 2000 --confidence 0.95 \\
      --seed 0 --calibration-bins 10 --compare bgpm gpm [--ensemble gpm-s0 gpm-s1 gpm-s2] --out uncertainty.json

Not part of the eval stage yet; the measures are prefpipe.evaluation.uncertainty.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from prefpipe.evaluation.uncertainty import (
    aurc_comparison,
    auroc_interval,
    binary_entropy,
    ece_difference,
    ensemble_preference,
    gaussian_preference,
)

MARGIN = "neg_abs_margin"  # -|m|: the point estimate's own ranking, the reference every candidate is held to


def candidates(frame: pd.DataFrame, tau: float) -> dict[str, np.ndarray]:
    """Uncertainty candidates of one head (higher = less sure), from its per-example table. Point heads have
    -|m| and the entropy of sigmoid(m / tau) (the same ranking); Bayesian heads also the raw variance, the
    flip probability, -|P - 0.5| of the recorded (probit) probability, and the predictive entropy and mutual
    information of s ~ N(m, variance)."""
    m = frame["score_chosen_minus_rejected"].to_numpy(np.float64)
    out = {MARGIN: -np.abs(m)}
    variance = frame["variance"].to_numpy(np.float64)
    if np.all(np.isnan(variance)):
        out["predictive_entropy"] = binary_entropy(1.0 / (1.0 + np.exp(-m / tau)))
        return out
    posterior = gaussian_preference(m, variance, tau)
    out |= {
        "variance": variance,
        "flip_probability": posterior["flip_probability"],
        "neg_abs_p_minus_half": -np.abs(frame["prob"].to_numpy(np.float64) - 0.5),
        "predictive_entropy": posterior["predictive_entropy"],
        "mutual_information": posterior["mutual_information"],
    }
    return out


def targets(
    frame: pd.DataFrame, pairs: dict[str, dict] | None, disagreement_at: float
) -> dict[str, np.ndarray]:
    """Binary targets an uncertainty should flag: the head's errors, and where the test pairs record them,
    pairs with flip_rate >= disagreement_at and unfamiliar pairs."""
    out = {"errors": ~frame["correct"].to_numpy(bool)}
    if pairs is None:
        return out
    rows = [pairs[i] for i in frame["id"]]
    if all("flip_rate" in r for r in rows):
        out["disagreement"] = np.array([r["flip_rate"] >= disagreement_at for r in rows])
    if all("unfamiliar" in r for r in rows):
        out["unfamiliar"] = np.array([bool(r["unfamiliar"]) for r in rows])
    return out


def head_table(
    frame: pd.DataFrame, found: dict[str, np.ndarray], pairs: dict[str, dict] | None, args: argparse.Namespace
) -> dict:
    """AUROC (with interval) of every candidate for every target, and each candidate's AURC against -|m|."""
    boot = {"resamples": args.resamples, "confidence": args.confidence, "seed": args.seed}
    correct = frame["correct"].to_numpy(bool)
    auroc: dict[str, dict[str, Any]] = {}
    for target, positive in targets(frame, pairs, args.disagreement_at).items():
        if positive.all() or not positive.any():
            auroc[target] = {"skipped": f"{int(positive.sum())} of {len(positive)} pairs are positive"}
            continue
        auroc[target] = {name: auroc_interval(u, positive, **boot) for name, u in found.items()}
    subsets = frame["subset"].tolist()
    selective = {
        name: aurc_comparison(correct, u, found[MARGIN], subsets, **boot)
        for name, u in found.items()
        if name != MARGIN
    }
    return {"n": len(frame), "accuracy": float(correct.mean()), "auroc": auroc, "aurc_vs_margin": selective}


def ensemble_head(members: list[tuple[pd.DataFrame, float]]) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """The deep ensemble of point heads (same pairs, same tau): its decisions (mean score > 0) and candidates
    -|mean|, the members' sd, the share of members that disagree, predictive entropy and mutual information."""
    taus = {tau for _, tau in members}
    if len(taus) != 1:
        raise ValueError(f"ensemble members need one tau, got {sorted(taus)}")
    first = members[0][0]
    scores = np.stack(
        [
            f.set_index("id").loc[first["id"], "score_chosen_minus_rejected"].to_numpy(np.float64)
            for f, _ in members
        ],
        axis=1,
    )
    view = ensemble_preference(scores, taus.pop())
    frame = pd.DataFrame({"id": first["id"], "subset": first["subset"], "correct": view["score"] > 0})
    found = {
        MARGIN: -np.abs(view["score"]),
        "score_sd": view["score_sd"],
        "member_disagreement": view["flip_probability"],
        "predictive_entropy": view["predictive_entropy"],
        "mutual_information": view["mutual_information"],
    }
    return frame, found


def load_head(eval_dir: Path, variant: str) -> tuple[pd.DataFrame, float]:
    """The primary benchmark's per-example rows of one variant and its tau."""
    summary = json.loads((eval_dir / variant / "summary.json").read_text(encoding="utf-8"))
    frame = pd.read_parquet(eval_dir / variant / "per_example.parquet")
    if "benchmark" in frame:
        frame = frame[frame["benchmark"] == summary["primary_benchmark"]].reset_index(drop=True)
    return frame, float(summary["tau"])


def build(args: argparse.Namespace) -> dict[str, Any]:
    pairs = None
    if args.pairs:
        lines = Path(args.pairs).read_text(encoding="utf-8").splitlines()
        pairs = {row["id"]: row for row in map(json.loads, filter(str.strip, lines))}
    heads = {v: load_head(Path(args.eval_dir), v) for v in args.variants}
    out: dict[str, Any] = {
        "heads": {v: head_table(f, candidates(f, tau), pairs, args) for v, (f, tau) in heads.items()}
    }
    if args.ensemble:
        frame, found = ensemble_head([load_head(Path(args.eval_dir), v) for v in args.ensemble])
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
