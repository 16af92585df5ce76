"""The scoreboard's what-to-use-when board (report/scoreboard/uses.py) on fixture trees: each use's best head,
figure, runner-up and gap equal what the summaries hold (the expected texts computed here from the files or
written out by hand from the fixture's numbers, t quantiles from scipy), the resolved mark follows the intervals,
a use with no summary is left out, and the default report has no such board."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from support.results_tree import QUALITY, RUNS, manifest, write_results_tree
from support.settings import report_settings
from support.uncertainty_tree import (
    ENSEMBLES,
    HEADS,
    NEEDED,
    add_active_learning,
    add_blocks,
    add_ece_intervals,
    add_risk_run,
    al_summary,
)

from prefpipe.report import plots
from prefpipe.report.document import Board
from prefpipe.report.inputs import Manifest, read_tree
from prefpipe.report.scoreboard import uses_seeds
from prefpipe.report.sections import active_learning
from prefpipe.report.write import document


def _doc(root, files=None, **settings):
    cfg = report_settings({"figure_dpi": 30, **settings}, experiment="synthetic-default", seed=0)
    return document(cfg, root, files or manifest())


def _uses(doc) -> dict[str, dict[str, object]]:
    boards = [b for b in doc.board.blocks if isinstance(b, Board) and b.anchor == "scoreboard-uses"]
    if not boards:
        return {}
    (board,) = boards
    return {row[0].text: dict(zip(board.columns, row, strict=True)) for row in board.rows}


def _t_figure(values, scale: float, fmt: str) -> str:
    """mean [mean ± t(0.975, n-1) sd / sqrt(n)] (n seeds), from scipy."""
    v = scale * np.asarray(values, dtype=float)
    half = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v))
    m = v.mean()
    return f"{m:{fmt}} [{m - half:{fmt}}, {m + half:{fmt}}] ({len(v)} seeds)"


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("uses") / "results"
    write_results_tree(root, reward_steps=4, grpo_steps=4)
    add_blocks(root, HEADS, ENSEMBLES)
    add_active_learning(root, al_summary(NEEDED, whole_pool=False))
    return root


def _files() -> Manifest:
    files = manifest()
    files.files["eval_ensemble"] = {"gpm-ensemble": "eval_ensemble/gpm-ensemble/summary.json"}
    return files


def test_each_use_shows_the_best_head_as_the_summaries_record_it(tree):
    uses = _uses(_doc(tree, _files()))
    assert list(uses) == ["Calibration", "Unfamiliar inputs", "Errors", "Label disagreement", "Label saving"]
    unfamiliar = uses["Unfamiliar inputs"]
    assert unfamiliar["Best"].shown == "★ bgpm: mutual information"
    assert unfamiliar["Its figure [95%]"].text == "0.957 [0.943, 0.969]"
    assert unfamiliar["Runner-up"].text == "gpm: -|margin|"
    assert unfamiliar["Its figure"].text == "0.830 [0.799, 0.861]"
    assert unfamiliar["Ahead by"].text == "+0.127; intervals apart"
    errors = uses["Errors"]  # the ensemble's entropy is best, but bgpm's interval reaches it: not resolved
    assert errors["Best"].shown == "☆ ensemble gpm-ensemble: predictive entropy"
    assert errors["Its figure [95%]"].text == "0.795 [0.767, 0.824]"
    assert errors["Runner-up"].text == "bgpm: predictive entropy"
    assert errors["Its figure"].text == "0.784 [0.760, 0.810]"
    assert errors["Ahead by"].text == "+0.011; intervals overlap"
    disagreement = uses["Label disagreement"]
    assert disagreement["Best"].shown == "★ ensemble gpm-ensemble: mutual information"
    assert disagreement["Runner-up"].text == "gpm: -|margin|"
    assert disagreement["Its figure"].text.startswith("0.601 [")


def _eces(root) -> dict[str, float]:
    return {
        v: json.loads((root / "eval" / v / "summary.json").read_text())["benchmarks"]["synthetic"][
            "calibration"
        ]["ece"]
        for v in QUALITY
    }


def test_calibration_is_the_lowest_ece_with_the_intervals_the_uncertainty_blocks_record(tmp_path):
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=4, grpo_steps=4)
    add_blocks(root, HEADS, ENSEMBLES)
    eces = _eces(root)
    best, runner = sorted(eces, key=eces.get)[:2]
    assert (best, runner) == ("gpm", "bgpm")  # the fixture's calibration blocks; both have uncertainty blocks
    for low, mark in ((eces["gpm"] + 0.003, "best"), (eces["gpm"] + 0.001, "best_unresolved")):
        add_ece_intervals(root, {"gpm": (eces["gpm"] - 0.01, eces["gpm"] + 0.002), "bgpm": (low, 0.05)})
        row = _uses(_doc(root, _files()))["Calibration"]
        assert row["Best"].text == "gpm" and row["Best"].mark == mark
        assert (
            row["Its figure [95%]"].text
            == f"{eces['gpm']:.4f} [{eces['gpm'] - 0.01:.4f}, {eces['gpm'] + 0.002:.4f}]"
        )
        assert row["Its figure"].text == f"{eces['bgpm']:.4f} [{low:.4f}, 0.0500]"
        assert row["Ahead by"].text == f"{eces['gpm'] - eces['bgpm']:+.4f}"


def test_calibration_without_recorded_intervals_is_left_unmarked(tree):
    row = _uses(_doc(tree, _files()))["Calibration"]
    eces = _eces(tree)
    best, runner = sorted(eces, key=eces.get)[:2]
    assert row["Best"].text == best and row["Best"].mark == ""
    assert row["Its figure [95%]"].text == f"{eces[best]:.4f}"
    assert (row["Runner-up"].text, row["Its figure"].text) == (runner, f"{eces[runner]:.4f}")
    assert row["Ahead by"].text == f"{eces[best] - eces[runner]:+.4f}"


def test_label_saving_reads_each_seeds_labels_needed_with_a_t_interval(tree):
    row = _uses(_doc(tree, _files()))["Label saving"]
    shares = {s: [1 - v / 800 for v in NEEDED[s]] for s in ("bgpm", "ensemble")}
    best, runner = sorted(shares, key=lambda s: -np.mean(shares[s]))
    assert best == "ensemble"  # 14.5% against 14.2% on the means
    assert row["Measured by"].text == "% labels saved vs random (to random's at 800)"
    assert (
        row["Best"].text == "ensemble (the deep ensemble's score sd)"
        and row["Best"].mark == "best_unresolved"
    )
    assert row["Its figure [95%]"].text == _t_figure(shares[best], 100, "+.1f")
    assert row["Runner-up"].text == runner
    assert row["Its figure"].text == _t_figure(shares[runner], 100, "+.1f")
    diff = np.subtract(shares[best], shares[runner])
    assert row["Ahead by"].text == _t_figure(diff, 100, "+.1f")


def test_label_saving_reads_the_full_data_target_when_the_rounds_ran_over_the_whole_pool(tmp_path):
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=4, grpo_steps=4)
    full = {"random": [2000, 1800, 2200], "bgpm": [1200, 1100, 1500], "balpm": [1300, 1250, 1400]}
    add_active_learning(root, al_summary(NEEDED, whole_pool=True, full=full))
    uses = _uses(_doc(root))
    assert list(uses) == ["Calibration", "Label saving"]  # no uncertainty block in this tree
    row = uses["Label saving"]
    shares = {s: [1 - v / r for v, r in zip(full[s], full["random"], strict=True)] for s in ("bgpm", "balpm")}
    assert row["Measured by"].text == "% labels saved vs random (to full data × 0.95)"
    assert row["Best"].text.startswith("bgpm (")
    assert row["Its figure [95%]"].text == _t_figure(shares["bgpm"], 100, "+.1f")
    assert row["Ahead by"].text == _t_figure(np.subtract(shares["bgpm"], shares["balpm"]), 100, "+.1f")


RISK_RUNS = {  # run: (reward model, k, risk measure, gap on seeds 0, 1, 2)
    "rm_bgpm0": ("bgpm", 0.0, "sd", (1.75, 1.4, 2.1)),
    "rm_bgpm_risk5": ("bgpm", 5.0, "sd", (1.5, 1.3, 1.43)),
    "rm_bgpm_mi0": ("bgpm", 0.0, "mutual_information", (1.6, 1.2, 1.9)),
    "rm_bgpm_mi": ("bgpm", 2.0, "mutual_information", (1.5, 1.25, 1.8)),
    "rm_ens0": ("gpm-ensemble", 0.0, "sd", (1.3, 0.7, 1.9)),
    "rm_ens_risk": ("gpm-ensemble", 0.9, "sd", (0.7, 0.2, 1.2)),
}


def test_rl_safety_pairs_each_risk_averse_run_with_its_k0_control_by_seed(tmp_path):
    trees = []
    for seed in range(3):
        root = tmp_path / f"seed-{seed}"
        write_results_tree(root, seed=seed, reward_steps=4, grpo_steps=4, experiment="risk")
        for run, (rm, k, measure, gaps) in RISK_RUNS.items():
            add_risk_run(root, run, rm, k, measure, gaps[seed], experiment="risk", seed=seed)
        trees.append(root)
    files = Manifest.standard(list(QUALITY), [*RUNS, *RISK_RUNS], [])
    compare = {f"seed-{i}": str(t) for i, t in enumerate(trees[1:], start=1)}
    uses = _uses(_doc(trees[0], files, compare=compare))
    assert list(uses) == ["Calibration", "RL safety"]
    row = uses["RL safety"]
    diffs = {
        "rm_bgpm_risk5": np.subtract(RISK_RUNS["rm_bgpm_risk5"][3], RISK_RUNS["rm_bgpm0"][3]),
        "rm_bgpm_mi": np.subtract(RISK_RUNS["rm_bgpm_mi"][3], RISK_RUNS["rm_bgpm_mi0"][3]),
        "rm_ens_risk": np.subtract(RISK_RUNS["rm_ens_risk"][3], RISK_RUNS["rm_ens0"][3]),
    }
    best, runner = sorted(diffs, key=lambda r: diffs[r].mean())[:2]
    assert (best, runner) == ("rm_ens_risk", "rm_bgpm_risk5")
    gap = diffs[best] - diffs[runner]
    half = stats.t.ppf(0.975, 2) * gap.std(ddof=1) / math.sqrt(3)
    assert gap.mean() + half > 0  # the paired interval of the gap reaches 0: not resolved
    assert row["Best"].text == "rm_ens_risk (vs rm_ens0)" and row["Best"].mark == "best_unresolved"
    assert row["Its figure [95%]"].text == _t_figure(diffs[best], 1, "+.2f")
    assert row["Runner-up"].text == runner
    assert row["Its figure"].text == _t_figure(diffs[runner], 1, "+.2f")
    assert row["Ahead by"].text == _t_figure(gap, 1, "+.2f")


def test_a_lower_bound_run_is_paired_with_the_control_paying_the_same_probability(tmp_path):
    # sigmoid((m - k sd) / tau) against sigmoid(m / tau) at k = 0, not against the run paying the score m: the
    # sigmoid alone changes group-relative advantages (grpo.paid_quantity)
    root = tmp_path / "seed-0"
    write_results_tree(root, seed=0, reward_steps=4, grpo_steps=4, experiment="risk")
    runs = {"rm_bgpm_p0": (0.0, "sigmoid"), "rm_bgpm0": (0.0, "none"), "rm_bgpm_lcb": (5.0, "sigmoid")}
    for run, (k, transform) in runs.items():
        add_risk_run(root, run, "bgpm", k, "sd", 1.0, experiment="risk", seed=0, transform=transform)
    tree = read_tree(root, Manifest.standard(list(QUALITY), [*RUNS, *runs], []), "seed-0", strict=False)
    assert uses_seeds.controls(tree) == {"rm_bgpm_lcb": "rm_bgpm_p0"}


def test_the_default_report_has_no_uses_board(tmp_path):
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=4, grpo_steps=4)
    assert _uses(_doc(root)) == {}


def test_a_full_pool_run_of_five_strategies_gets_its_curves_one_panel_each_beside_random(tmp_path):
    # the plot refuses more than MAX_CURVES lines in a panel (uncertainty_full_pool.yaml runs five strategies)
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=4, grpo_steps=4)
    five = {s: [900, 850, 1500] for s in ("random", "bgpm", "batchbald", "epig", "balpm")}
    add_active_learning(root, al_summary(five, whole_pool=True))
    doc = _doc(root)
    (section,) = [s for s in doc.sections if s.anchor == active_learning.ANCHOR]
    curves = [plots.Curve(s, pd.Series([200.0]), pd.Series([0.6]), "#000") for s in five]
    panels = active_learning._panels(curves, "random")
    assert [title for title, _, _ in panels] == [f"{s} vs random" for s in list(five)[1:]]
    assert all([c.label for c in group] == ["random", title.split()[0]] for title, group, _ in panels)
    assert len(active_learning._panels(curves[:4], "random")) == 1
