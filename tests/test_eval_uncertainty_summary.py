"""The uncertainty table of finished evaluations (prefpipe.evaluation.uncertainty_summary) on small made-up
evaluation folders: every number is the measure recomputed directly on the same rows."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from prefpipe.evaluation import uncertainty_summary
from prefpipe.evaluation.uncertainty import aurc, auroc, ece_difference, gaussian_preference


def _write_eval(root, variant, frame, tau):
    folder = root / variant
    folder.mkdir(parents=True)
    frame.to_parquet(folder / "per_example.parquet")
    (folder / "summary.json").write_text(json.dumps({"tau": tau, "primary_benchmark": "synthetic"}))


@pytest.fixture
def evals(tmp_path):
    rng = np.random.default_rng(0)
    n = 80
    ids = [f"p{i}" for i in range(n)]
    subsets = ["a"] * 40 + ["b"] * 40
    m_b, m_g = rng.normal(0.5, 0.6, n), rng.normal(0.5, 0.6, n)
    v = rng.uniform(0.001, 0.05, n)
    bayes = pd.DataFrame(
        {"id": ids, "subset": subsets, "score_chosen_minus_rejected": m_b, "variance": v,
         "prob": gaussian_preference(m_b, v, 0.1)["prob"], "correct": m_b > 0, "benchmark": "synthetic"}
    )  # fmt: skip
    point = pd.DataFrame(
        {"id": ids[::-1], "subset": subsets[::-1], "score_chosen_minus_rejected": m_g[::-1], "variance": np.nan,
         "prob": 1 / (1 + np.exp(-m_g[::-1] / 0.1)), "correct": m_g[::-1] > 0, "benchmark": "synthetic"}
    )  # fmt: skip
    other = bayes.assign(benchmark="other")  # a second benchmark's rows are left out
    _write_eval(tmp_path / "eval", "bgpm", pd.concat([bayes, other]), 0.1)
    _write_eval(tmp_path / "eval", "gpm", point, 0.1)
    _write_eval(tmp_path / "eval", "gpm-s1", point.assign(score_chosen_minus_rejected=m_b[::-1]), 0.1)
    pairs = [
        {"id": i, "flip_rate": 0.3 if s == "a" else 0.0, "unfamiliar": True}
        for i, s in zip(ids, subsets, strict=True)
    ]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    return tmp_path, bayes, point


def test_table_recomputes_each_measure(evals):
    root, bayes, point = evals
    out = root / "u.json"
    uncertainty_summary.main(
        ["--eval-dir", str(root / "eval"), "--variants", "bgpm", "gpm", "--pairs", str(root / "pairs.jsonl"),
         "--disagreement-at", "0.2", "--resamples", "50", "--confidence", "0.9", "--seed", "1",
         "--calibration-bins", "5", "--compare", "bgpm", "gpm", "--ensemble", "gpm", "gpm-s1", "--out", str(out)]
    )  # fmt: skip
    result = json.loads(out.read_text())
    table = result["heads"]["bgpm"]
    m, v, ok = bayes["score_chosen_minus_rejected"], bayes["variance"], bayes["correct"].to_numpy()
    assert table["n"] == 80
    assert table["auroc"]["errors"]["variance"]["value"] == pytest.approx(auroc(v, ~ok))
    assert table["auroc"]["errors"]["neg_abs_margin"]["value"] == pytest.approx(auroc(-np.abs(m), ~ok))
    post = gaussian_preference(m, v, 0.1)
    for name in ("predictive_entropy", "expected_entropy"):
        assert table["auroc"]["disagreement"][name]["value"] == pytest.approx(
            auroc(post[name], np.arange(80) < 40)
        )
    assert "skipped" in table["auroc"]["unfamiliar"]  # every pair is unfamiliar: no AUROC
    assert "skipped" in table["auroc"]["disagreement_familiar"]  # and no familiar pair
    assert table["aurc_vs_margin"]["variance"]["uncertainty"] == pytest.approx(aurc(ok, v))
    assert set(result["heads"]["gpm"]["auroc"]["errors"]) == {"neg_abs_margin"}  # = its entropy ranking
    aligned = point.set_index("id").loc[bayes["id"]]
    expected = ece_difference(
        bayes["prob"], ok, aligned["prob"], aligned["correct"], bayes["subset"].tolist(),
        n_bins=5, resamples=50, confidence=0.9, seed=1,
    )  # fmt: skip
    assert result["ece_difference"]["difference"] == pytest.approx(expected["difference"])
    shown = uncertainty_summary.markdown(result)
    assert "| bgpm | errors | variance |" in shown and "| bgpm | disagreement | expected_entropy |" in shown
    ensemble = result["heads"]["ensemble(gpm,gpm-s1)"]
    gpm_scores = point.set_index("id").loc[bayes["id"], "score_chosen_minus_rejected"].to_numpy()
    members = np.stack([gpm_scores, m.to_numpy()])  # gpm-s1 holds the Bayesian scores in gpm's row order
    mean = members.mean(axis=0)
    assert ensemble["accuracy"] == pytest.approx(np.mean(mean > 0))
    assert ensemble["auroc"]["errors"]["score_sd"]["value"] == pytest.approx(
        auroc(np.std(members, axis=0, ddof=1), mean <= 0)
    )
