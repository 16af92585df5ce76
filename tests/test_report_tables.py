"""Tables, settings and cross-tree comparison: formatting, the ablation's config differences, seed statistics."""

from __future__ import annotations

import math
import statistics

import pytest
from support.results_tree import BROKEN_BAYES, FIXED_BAYES, read_results_tree, write_results_tree
from support.settings import report_settings

from prefpipe.common.config import ConfigError
from prefpipe.report import compare, fmt, tables
from prefpipe.report.document import Table
from prefpipe.report.settings import load_settings


def test_percent_and_number_formatting():
    assert fmt.pct(0.785, 0.0291) == "78.5 ± 2.9"
    assert fmt.pct(0.5, partial=True) == "50.0*"
    assert fmt.pct(None) == fmt.NA and fmt.pct(float("nan")) == fmt.NA
    assert fmt.num(2400.0) == "2400" and fmt.num(1e-4) == "1.00e-04" and fmt.num(0.12345) == "0.1235"
    assert fmt.num(float("inf")) == "inf" and fmt.num(None) == fmt.NA
    assert fmt.mean_sd(0.5, 0.01, 3) == "50.0 ± 1.0 (n=3)" and fmt.mean_sd(0.5, None, 1) == "50.0 (n=1)"


def test_config_diff_and_flatten():
    ref = {"seed": 0, "head": {"type": "bgpm", "dim": 6}, "bayes": dict(FIXED_BAYES), "clamp": [-8, 2]}
    cfg = {
        "seed": 1,
        "head": {"type": "bgpm", "dim": 6},
        "bayes": dict(BROKEN_BAYES),
        "clamp": [-8, 2],
        "new": 1,
    }
    diff = tables.config_diff(cfg, ref, ignore=["seed"])
    assert [k for k, _, _ in diff] == sorted([f"bayes.{k}" for k in FIXED_BAYES] + ["new"])
    assert ("bayes.kl_warmup_steps", 0, 1000) in diff and ("new", 1, None) in diff
    assert tables.flatten_config({"a": {"b": 1, "wandb": {"x": 1}}}, ignore=["wandb"]) == {"a.b": 1}


def test_ablation_order_broken_detection_and_fixes(tmp_path):
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=3, grpo_steps=3)
    tree = read_results_tree(root)
    ignore = load_settings(report_settings(experiment="x")).ablation_ignore_keys
    ordered, broken = tables.ablation_variants(tree, "bgpm", ["bgpm*"], ignore)
    assert broken == "bgpm-broken"
    assert ordered[0] == "bgpm-broken" and ordered[-1] == "bgpm" and len(ordered) == 4
    table, chart = tables.ablation_table(tree, "synthetic", "bgpm", ["bgpm*"], ["gpm", "bt"], ignore)
    rows = {r[0]: r for r in table.rows}
    assert rows["bgpm-broken+warmup"][2] == "head.bayes.kl_warmup_steps=1000"
    assert rows["bgpm-broken+klweight"][2] == "head.bayes.max_kl_weight=0.0001"
    assert "head.bayes.prior_variance=1.0 (fixed: 10.0)" in rows["bgpm-broken"][1]
    assert rows["bgpm"][1] == "fixed settings (reference)" and rows["gpm"][1].startswith("baseline")
    assert [name for name, _ in chart] == [*ordered, "gpm", "bt"]
    assert table.row_classes.count("ref") == 2  # the design-note rows are marked as references


def test_rewardbench_table_has_paper_rows_marked_as_reference(tmp_path):
    root = tmp_path / "results"
    expected = write_results_tree(root, reward_steps=3, grpo_steps=3)
    tree = read_results_tree(root)
    table = tables.rewardbench_table(tree, with_paper=True)
    refs = [r for r, c in zip(table.rows, table.row_classes, strict=True) if c == "ref"]
    assert [r[1] for r in refs][0] == "Gemma-2B-it BT" and refs[0][2:7] == [
        "67.32",
        "63.37",
        "85.68",
        "83.04",
        "74.85",
    ]
    gpm = next(r for r in table.rows if r[:2] == ["synthetic", "gpm"])
    sec = expected["eval"][("synthetic", "gpm")]["sections"]["chat"]
    assert gpm[2] == f"{100 * sec['score']:.1f} ± {100 * sec['stderr']:.1f}"
    real = next(r for r in table.rows if r[:2] == ["rewardbench_real", "gpm"])
    assert all(cell.endswith("*") for cell in real[2:6])  # partial sections are starred
    without = tables.rewardbench_table(tree, with_paper=False)
    assert "ref" not in without.row_classes


def test_seed_mean_and_sd_match_statistics_module(tmp_path):
    trees = []
    for name, exp, seed, shift in (
        ("a", "exp1", 0, 0.0),
        ("b", "exp1", 1, 0.03),
        ("c", "exp1", 2, -0.02),
        ("d", "exp2", 0, 0.05),
    ):
        root = tmp_path / name
        write_results_tree(root, experiment=exp, seed=seed, shift=shift, reward_steps=3, grpo_steps=3)
        trees.append(read_results_tree(root, name))
    per_tree = compare.eval_across(trees)
    agg = compare.aggregate(per_tree, ["overall", "chat"]).set_index(["experiment", "benchmark", "item"])
    values = per_tree[
        (per_tree["experiment"] == "exp1")
        & (per_tree["benchmark"] == "synthetic")
        & (per_tree["item"] == "gpm")
    ]
    row = agg.loc[("exp1", "synthetic", "gpm")]
    assert row["overall_mean"] == pytest.approx(statistics.mean(values["overall"]))
    assert row["overall_sd"] == pytest.approx(statistics.stdev(values["overall"]))
    assert row["overall_n"] == 3 and row["seeds"] == "0, 1, 2"
    single = agg.loc[("exp2", "synthetic", "gpm")]
    assert single["overall_n"] == 1 and math.isnan(single["overall_sd"])
    policy = compare.aggregate(compare.policy_across(trees), ["gain"]).set_index(["experiment", "item"])
    # gain = trained - base; the fixture's shift moves both, so the gain is the same for every seed
    assert policy.loc[("exp1", "gpm-verifier"), "gain_mean"] == pytest.approx(0.22)
    assert policy.loc[("exp1", "gpm-verifier"), "gain_sd"] == pytest.approx(0.0, abs=1e-12)


def test_settings_defaults_and_errors():
    s = load_settings(report_settings(experiment="exp", seed=0))
    assert s.title == "prefpipe report: exp" and s.compare == {} and s.thresholds.kl_mean_max == 1.0
    compared = load_settings(report_settings({"compare": {"s1": "../other/results"}}, experiment="exp"))
    assert compared.compare == {"s1": "../other/results"}
    with pytest.raises(ConfigError, match=r"config\.report: .*'colour' was unexpected"):
        report_settings({"colour": "red"})
    with pytest.raises(ConfigError, match=r"config\.report\.compare: \['a'\] is not of type 'object'"):
        report_settings({"compare": ["a"]})
    with pytest.raises(ConfigError, match=r"config\.report\.ablation\.variants: 'bgpm\*' is not of type"):
        report_settings({"ablation": {"variants": "bgpm*"}})
    with pytest.raises(ConfigError, match=r"config\.report\.samples_per_run: -1 is less than the minimum"):
        report_settings({"samples_per_run": -1})


def test_table_rejects_ragged_rows():
    with pytest.raises(ValueError, match="row 1 has 1 cells for 2 columns"):
        Table("t", ["a", "b"], [["1", "2"], ["3"]])
