"""The eval stage's uncertainty block, the deep-ensemble stage and the settings behind them (issue 33): every
recorded number is the measure recomputed directly (prefpipe.evaluation.uncertainty's AUROC and AURC, tested
against their own definitions in test_eval_uncertainty.py) on the rows written beside it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from support.eval_args import SETTINGS, evaluate, section_table
from support.settings import pipeline, stage_json
from support.stages import run_main

from prefpipe.common.config import ConfigError
from prefpipe.common.results.results_owner import finished_outputs
from prefpipe.eval_ensemble import main as ensemble_main
from prefpipe.evaluation.calibration import binary_entropy, sigmoid
from prefpipe.evaluation.uncertainty import aurc, auroc, gaussian_preference
from prefpipe.evaluation.uncertainty_block import uncertainty_block
from prefpipe.settings.evaluation import UncertaintyEvalSettings

UNCERTAINTY = SETTINGS.eval.uncertainty  # resamples 1000, confidence 0.95, disagreement_at 0.2


class TableScorer:
    """Scores read from the rows themselves (`m`, `v`): a Bayesian head when `v` is set, else a point head."""

    head_type, tau = "bgpm", 0.1

    def __init__(self, rows: list[dict], bayesian: bool) -> None:
        self.by_text = {r["chosen"]: r for r in rows}
        self.bayesian = bayesian

    def encode(self, prompts, responses, batch_size):
        import torch

        return {"text_id": torch.tensor([hash(r) % 2**40 for r in responses], dtype=torch.int64)}

    def compare(self, enc_a, enc_b):
        raise AssertionError("replaced per test")


def _rows(n: int = 120) -> list[dict]:
    rng = np.random.default_rng(3)
    rows = []
    for i in range(n):
        subset = ["chat-a", "chat-b", "safety-c"][i % 3]
        rows.append(
            {
                "id": f"r{i}",
                "prompt": f"p{i}",
                "chosen": f"c{i}",
                "rejected": f"x{i}",
                "subset": subset,
                "flip_rate": 0.3 if subset == "chat-b" else 0.0,
                "unfamiliar": subset == "safety-c",
                "m": float(rng.normal(0.3, 0.5)),
                "v": float(rng.uniform(0.0005, 0.05)),
            }
        )
    return rows


def _scorer(rows: list[dict], bayesian: bool):
    import torch

    scorer = TableScorer(rows, bayesian)
    m = torch.tensor([r["m"] for r in rows], dtype=torch.float64)
    v = torch.tensor([r["v"] for r in rows], dtype=torch.float64)
    scorer.compare = lambda a, b: (m, v if bayesian else None)
    return scorer


@pytest.mark.parametrize("bayesian", [True, False])
def test_eval_block_and_columns_recompute_from_the_rows(bayesian):
    rows = _rows()
    frame, summary = evaluate(
        _scorer(rows, bayesian), rows, section_table({}), uncertainty=UNCERTAINTY, mc_samples=0
    )
    m, v = np.array([r["m"] for r in rows]), np.array([r["v"] for r in rows])
    wrong = m <= 0
    assert frame["flip_rate"].tolist() == [r["flip_rate"] for r in rows]
    assert frame["unfamiliar"].tolist() == [r["unfamiliar"] for r in rows]
    block = summary["uncertainty"]
    assert block["n"] == len(rows) and block["disagreement_at"] == UNCERTAINTY.disagreement_at
    targets = {
        "errors": wrong,
        "disagreement": np.arange(120) % 3 == 1,
        "unfamiliar": np.arange(120) % 3 == 2,
    }
    margin = block["auroc"]
    for target, positive in targets.items():
        got = margin[target]["neg_abs_margin"]
        assert got["value"] == pytest.approx(auroc(-np.abs(m), positive))
        assert got["low"] <= got["value"] <= got["high"]
        assert got["positives"] == positive.sum()
    prob = gaussian_preference(m, v, 0.1)["prob"] if bayesian else 1 / (1 + np.exp(-m / 0.1))
    _check_ece(block["ece"], prob, ~wrong, np.arange(120) % 3, summary["calibration"]["ece"])
    familiar = np.arange(120) % 3 != 2
    assert margin["disagreement_familiar"]["neg_abs_margin"]["value"] == pytest.approx(
        auroc(-np.abs(m)[familiar], targets["disagreement"][familiar])
    )
    assert margin["disagreement_familiar"]["neg_abs_margin"]["negatives"] == 40  # chat-a only
    if not bayesian:
        assert set(margin["errors"]) == {"neg_abs_margin"} and frame["mutual_information"].isna().all()
        assert block["aurc_vs_margin"] == {}
        return
    post = gaussian_preference(m, v, 0.1)
    np.testing.assert_allclose(frame["prob"], post["prob"])
    np.testing.assert_allclose(frame["predictive_entropy"], post["predictive_entropy"])
    np.testing.assert_allclose(frame["mutual_information"], post["mutual_information"])
    for target, positive in targets.items():
        for name in ("predictive_entropy", "expected_entropy", "mutual_information", "variance"):
            u = v if name == "variance" else post[name]
            assert margin[target][name]["value"] == pytest.approx(auroc(u, positive))
    entropy = block["aurc_vs_margin"]["predictive_entropy"]
    assert entropy["uncertainty"] == pytest.approx(aurc(~wrong, post["predictive_entropy"]))
    assert entropy["margin"] == pytest.approx(aurc(~wrong, -np.abs(m)))
    # the selective curve abstains on the entropy first
    coverage_half = next(r for r in summary["calibration"]["selective"] if r["coverage"] == 0.5)
    keep = np.argsort(post["predictive_entropy"], kind="stable")[: coverage_half["n"]]
    assert coverage_half["accuracy"] == pytest.approx((~wrong)[keep].mean())


def _ece(prob: np.ndarray, right: np.ndarray, bins: int) -> float:
    """ECE written out: confidence max(P, 1 - P) in `bins` equal bins over [0.5, 1], |accuracy - confidence|
    weighted by each bin's share of the pairs."""
    confidence = np.maximum(prob, 1 - prob)
    index = np.minimum(((confidence - 0.5) / (0.5 / bins)).astype(int), bins - 1)
    return sum(
        (index == b).mean() * abs(right[index == b].mean() - confidence[index == b].mean())
        for b in range(bins)
        if (index == b).any()
    )


def _check_ece(recorded: dict, prob: np.ndarray, right: np.ndarray, subset: np.ndarray, ece: float) -> None:
    """The block's ECE is the calibration block's and the one written out here; its interval is a stratified
    bootstrap's (redone here with another generator: the percentiles agree within Monte Carlo error)."""
    bins = SETTINGS.eval.calibration_bins
    assert recorded["value"] == pytest.approx(ece) and recorded["value"] == pytest.approx(
        _ece(prob, right, bins)
    )
    rng = np.random.default_rng(11)
    groups = [np.flatnonzero(subset == s) for s in np.unique(subset)]
    draws = []
    for _ in range(2000):
        i = np.concatenate([rng.choice(g, size=len(g), replace=True) for g in groups])
        draws.append(_ece(prob[i], right[i], bins))
    low, high = np.percentile(draws, [2.5, 97.5])
    assert recorded["low"] == pytest.approx(low, abs=0.01) and recorded["high"] == pytest.approx(
        high, abs=0.01
    )
    assert recorded["high"] - recorded["low"] > 0.02  # a real interval, not a point


def test_disagreement_among_familiar_pairs_leaves_the_unfamiliar_ones_out():
    """Six pairs, AUROCs counted by hand (positive above negative: 1, tie: 1/2):
    pair          A    B    C    D    E    F
    flip_rate    .3   .3    0    0    0   .3
    unfamiliar    -    -    -    -  yes  yes
    wrong         -  yes    -    -  yes    -
    uncertainty  .9   .4   .5   .1  .95   .2
    disagreement, all pairs: A > C, D; B > D; F > D: 4 of 3 x 3 = 0.444; among familiar A-D: A > C, D;
    B > D: 3 of 2 x 2 = 0.75; unfamiliar: E > all 4; F > D: 5 of 2 x 4; errors: B > D, F; E > all 4: 6 of 8."""
    u = np.array([0.9, 0.4, 0.5, 0.1, 0.95, 0.2])
    flip, unfamiliar = [0.3, 0.3, 0.0, 0.0, 0.0, 0.3], [False] * 4 + [True] * 2
    pairs = [{"flip_rate": f, "unfamiliar": x} for f, x in zip(flip, unfamiliar, strict=True)]
    correct = np.array([True, False, True, True, False, True])
    settings = UncertaintyEvalSettings(20, 0.9, 0.2)

    def aurocs(records):
        return uncertainty_block(correct, {"neg_abs_margin": u}, records, ["s"] * 6, settings, seed=0)[
            "auroc"
        ]

    got = {t: rows["neg_abs_margin"] for t, rows in aurocs(pairs).items()}
    assert got["disagreement"]["value"] == pytest.approx(4 / 9)
    assert got["disagreement_familiar"]["value"] == pytest.approx(3 / 4)
    assert (got["disagreement_familiar"]["positives"], got["disagreement_familiar"]["negatives"]) == (2, 2)
    assert got["unfamiliar"]["value"] == pytest.approx(5 / 8)
    assert got["errors"]["value"] == pytest.approx(6 / 8)
    # only where the pairs record both markers; no familiar pair at all: skipped
    assert "disagreement_familiar" not in aurocs([{"flip_rate": f} for f in flip])
    every_pair_unfamiliar = aurocs([{**r, "unfamiliar": True} for r in pairs])
    assert every_pair_unfamiliar["disagreement_familiar"] == {"skipped": "0 of 0 pairs are positive"}


def test_clean_world_rows_have_no_world_columns_and_errors_only():
    rows = [{k: v for k, v in r.items() if k not in ("flip_rate", "unfamiliar")} for r in _rows(60)]
    frame, summary = evaluate(
        _scorer(rows, True), rows, section_table({}), uncertainty=UNCERTAINTY, mc_samples=0
    )
    assert "flip_rate" not in frame and "unfamiliar" not in frame
    assert set(summary["uncertainty"]["auroc"]) == {"errors"}


def _member(root, name, frame, tau=0.1):
    folder = root / "eval" / name
    folder.mkdir(parents=True)
    frame.to_parquet(folder / "per_example.parquet")
    (folder / "summary.json").write_text(json.dumps({"tau": tau, "primary_benchmark": "synthetic"}))


def test_ensemble_stage_scores_the_members_disagreement(tmp_path, caplog):
    rng = np.random.default_rng(5)
    n = 90
    ids = [f"q{i}" for i in range(n)]
    base = pd.DataFrame(
        {"id": ids, "subset": ["a", "b", "c"] * 30, "variance": np.nan, "benchmark": "synthetic",
         "flip_rate": [0.0, 0.3, 0.0] * 30, "unfamiliar": [False, False, True] * 30}
    )  # fmt: skip
    scores = rng.normal(0.2, 0.4, (n, 3))
    for k in range(3):
        frame = base.assign(score_chosen_minus_rejected=scores[:, k], correct=scores[:, k] > 0)
        _member(tmp_path, f"gpm-s{k}", frame.iloc[::-1] if k == 1 else frame)  # order does not matter
    settings = pipeline(
        {
            "reward": {
                "only": ["gpm-s0", "gpm-s1", "gpm-s2"],
                "variants": {f"gpm-s{k}": {"seed": k} for k in range(3)},
            },
            "eval": {"ensembles": {"ens": ["gpm-s0", "gpm-s1", "gpm-s2"]}},
            "grpo": {"enabled": False},
        }
    ).eval
    code, _ = run_main(
        ensemble_main, stage_json(settings), eval=tmp_path / "eval", out=tmp_path / "eval_ensemble" / "ens"
    )
    assert code == 0
    # its folder is a finished output of its experiment (another experiment's run stops on it or replaces it)
    owners = {out.folder: out.experiment for out in finished_outputs(tmp_path)}
    assert owners[tmp_path / "eval_ensemble" / "ens"] == settings.experiment
    summary = json.loads((tmp_path / "eval_ensemble" / "ens" / "summary.json").read_text())
    mean, sd = scores.mean(axis=1), scores.std(axis=1, ddof=1)
    assert summary["accuracy"] == pytest.approx(np.mean(mean > 0))
    block = summary["uncertainty"]
    assert block["auroc"]["errors"]["score_sd"]["value"] == pytest.approx(auroc(sd, mean <= 0))
    assert block["auroc"]["unfamiliar"]["score_sd"]["value"] == pytest.approx(
        auroc(sd, np.arange(n) % 3 == 2)
    )
    share = (np.sign(scores) != np.sign(mean)[:, None]).mean(axis=1)
    assert block["auroc"]["disagreement"]["member_disagreement"]["value"] == pytest.approx(
        auroc(share, np.arange(n) % 3 == 1)
    )
    aleatoric = binary_entropy(sigmoid(scores / 0.1)).mean(axis=1)  # the members' mean entropy
    familiar = np.arange(n) % 3 != 2
    assert block["auroc"]["disagreement_familiar"]["expected_entropy"]["value"] == pytest.approx(
        auroc(aleatoric[familiar], (np.arange(n) % 3 == 1)[familiar])
    )
    code, errors = run_main(
        ensemble_main, stage_json(settings), caplog, eval=tmp_path / "eval", out=tmp_path / "x"
    )
    assert code != 0 and "eval.ensembles has no ensemble 'x'" in errors[0]


def test_a_variant_sets_its_own_seed_and_ensemble_members_must_be_trained():
    overlay = {
        "reward": {"only": ["gpm", "gpm-seed1"], "variants": {"gpm-seed1": {"seed": 1}}},
        "eval": {"ensembles": {"ens": ["gpm", "gpm-seed1"]}},
        "grpo": {"enabled": False},
    }
    settings = pipeline({**overlay, "seed": 4})
    assert settings.reward["gpm"].seed == 4 and settings.reward["gpm-seed1"].seed == 1
    assert settings.reward["gpm-seed1"].head == settings.reward["gpm"].head
    with pytest.raises(ConfigError, match=r"eval.ensembles.ens: member 'bt' is narrowed away by reward.only"):
        pipeline({**overlay, "eval": {"ensembles": {"ens": ["gpm", "bt"]}}})
    with pytest.raises(ConfigError, match="not in reward.variants"):
        pipeline({**overlay, "eval": {"ensembles": {"ens": ["gpm", "nope"]}}})
