"""collect.py: a results tree read into tidy tables, with tolerant key mapping and honest gaps."""

from __future__ import annotations

import json
import math

import pytest
from support.results_tree import QUALITY, RUNS, read_results_tree, write_results_tree

from prefpipe.report import keys as K
from prefpipe.report.collect import collect_tree, config_hash, split_benchmark_name


@pytest.fixture(scope="module")
def tree_and_expected(tmp_path_factory):
    root = tmp_path_factory.mktemp("collect") / "results"
    expected = write_results_tree(root, reward_steps=12, grpo_steps=30)
    return read_results_tree(root), expected


def test_variants_runs_and_identity(tree_and_expected):
    tree, _ = tree_and_expected
    assert tree.variants[:3] == ["bt", "gpm", "bgpm"]
    assert set(tree.variants) == set(QUALITY)
    assert tree.runs == sorted(RUNS)
    assert tree.experiment == "synthetic-default" and tree.seed == 0
    assert [n for n in tree.notes if n.kind != "info"] == []


def test_section_scores_match_independent_values(tree_and_expected):
    tree, expected = tree_and_expected
    for (bench, variant), summary in expected["eval"].items():
        rows = tree.eval_sections[
            (tree.eval_sections["benchmark"] == bench) & (tree.eval_sections["variant"] == variant)
        ]
        got = dict(zip(rows["section"], rows["score"], strict=True))
        assert got == pytest.approx({k: v["score"] for k, v in summary["sections"].items()})
        # overall = plain mean of the four sections, recomputed here from the subsets (count-weighted)
        by_section: dict[str, list[tuple[float, int]]] = {}
        for sub in summary["subsets"].values():
            by_section.setdefault(sub["section"], []).append((sub["accuracy"], sub["n"]))
        sections = [sum(a * n for a, n in v) / sum(n for _, n in v) for v in by_section.values()]
        over = tree.eval_overall[
            (tree.eval_overall["benchmark"] == bench) & (tree.eval_overall["variant"] == variant)
        ]
        assert float(over["overall"].iloc[0]) == pytest.approx(sum(sections) / len(sections))
    real = tree.eval_sections[tree.eval_sections["benchmark"] == "rewardbench_real"]
    assert real["partial"].all() and "math-prm" in " ".join(real["missing_subsets"])


def test_calibration_bins_and_selective(tree_and_expected):
    tree, expected = tree_and_expected
    rel = tree.reliability[
        (tree.reliability["benchmark"] == "synthetic") & (tree.reliability["variant"] == "gpm")
    ]
    src = expected["eval"][("synthetic", "gpm")]["calibration"]
    filled = [b for b in src["reliability"] if b["count"]]  # empty bins (confidence None) are not drawn
    assert len(filled) == len(src["reliability"]) - 1
    assert list(rel["confidence"]) == pytest.approx([b["confidence"] for b in filled])
    assert list(rel["count"]) == [b["count"] for b in filled]
    cal = tree.calibration.set_index(["benchmark", "variant"]).loc[("synthetic", "bt")]
    assert cal["ece"] == pytest.approx(expected["eval"][("synthetic", "bt")]["calibration"]["ece"])
    assert len(tree.selective) == 5 * len(expected["eval"])


def test_grpo_metrics_are_mapped_to_canonical_names(tree_and_expected):
    tree, _ = tree_and_expected
    frame = tree.grpo_metrics[tree.grpo_metrics["run"] == "bgpm-riskaverse"].sort_values("step")
    for column in (
        "kl_k1_mean",
        "kl_k3_max",
        "log_ratio_abs_max",
        "clip_ratio_high",
        "length_mean",
        "adv_abs_max",
    ):
        assert frame[column].notna().all(), column
    assert float(frame["kl_k3_mean"].iloc[17]) == pytest.approx(22.0)
    assert {"reward_fn:verifier", "reward_fn:gpm", "reward_fn:bgpm"} <= set(tree.grpo_metrics.columns)
    healthy = tree.grpo_metrics[tree.grpo_metrics["run"] == "gpm-verifier"]
    for column in (
        "kl_k2_max",
        "log_ratio_abs_max",
        "adv_abs_mean",
        "length_min",
        "tokens_per_s",
        "prompt_truncated_ratio",
    ):
        assert healthy[column].notna().all(), column  # train_grpo's own key names
    assert frame["nonfinite"].tolist()[25] == "loss" and frame["nonfinite"].tolist()[24] == ""
    assert "custom_debug_value" in tree.unused_keys["grpo/*/metrics.jsonl"]
    assert len(tree.samples["gpm-verifier"]) == 12


def test_policy_eval_sides_intervals_and_pairs(tree_and_expected):
    tree, expected = tree_and_expected
    primary = tree.policy_eval[tree.policy_eval["primary"].astype(bool)].set_index(["run", "policy"])
    for run, (base, trained) in expected["policy"].items():
        assert primary.loc[(run, "base"), "accuracy"] == pytest.approx(base)
        assert primary.loc[(run, "trained"), "accuracy"] == pytest.approx(trained)
        assert primary.loc[(run, "trained"), "ci_lo"] == pytest.approx(trained - 0.07)
        assert primary.loc[(run, "base"), "n"] == 200
    # eval_policy's own shape: decoding blocks, the reward-model block and the KL block
    real = tree.policy_eval[tree.policy_eval["run"] == "gpm-verifier"].set_index(["decoding", "policy"])
    assert real.loc[("sampled", "base"), "primary"] and not real.loc[("greedy", "base"), "primary"]
    assert real.loc[("greedy", "base"), "accuracy"] == pytest.approx(
        expected["policy"]["gpm-verifier"][0] + 0.1
    )
    assert (
        real.loc[("sampled", "trained"), "length"] == 21.0
        and real.loc[("sampled", "base"), "truncated"] == 0.1
    )
    pairs = tree.policy_pairs.set_index("run")
    assert pairs.loc["gpm-verifier", "win_rate"] == pytest.approx(0.64)
    assert pairs.loc["gpm-verifier", "score_diff"] == pytest.approx(0.33)
    assert pairs.loc["gpm-verifier", "kl_k3"] == pytest.approx(0.051)
    assert pairs.loc["gpm-verifier", "kl_seq"] == pytest.approx(0.9)
    # the flat spelling of the other run, with a win-rate interval
    assert pairs.loc["bgpm-riskaverse", "win_ci_hi"] == pytest.approx(0.70)
    assert primary.loc[("bgpm-riskaverse", "trained"), "reward"] == pytest.approx(0.41)
    assert primary.loc[("bgpm-riskaverse", "trained"), "kl_k3"] == pytest.approx(0.051)


def test_benchmark_files_split_rule_and_wildcard(tree_and_expected):
    tree, expected = tree_and_expected
    got = {(r["rule"], r["wildcard"]): r["seconds"] for r in tree.benchmarks.to_dict("records")}
    assert got[("train_reward_model", "bgpm-broken")] == pytest.approx(12.4)
    assert got[("prep_data", "")] == pytest.approx(expected["benchmarks"]["prep_data"])
    assert split_benchmark_name("eval_policy_bgpm-riskaverse") == ("eval_policy", "bgpm-riskaverse")
    assert split_benchmark_name("some_other_rule") == ("some_other_rule", "")


def test_missing_files_become_notes_not_numbers(tmp_path):
    root = tmp_path / "results"
    write_results_tree(
        root,
        reward_steps=5,
        grpo_steps=5,
        skip=(
            "eval/bgpm",
            "grpo/gpm-verifier/metrics.jsonl",
            "policy_eval",
            "benchmarks",
            "reward/bt/config.json",
        ),
    )
    tree = read_results_tree(root)
    messages = " ".join(n.message for n in tree.notes if n.kind == "missing")
    for part in (
        "eval/bgpm/: variant bgpm has no evaluation",
        "grpo/gpm-verifier/metrics.jsonl",
        "policy_eval/",
        "benchmarks/",
    ):
        assert part in messages, part
    assert "policy_eval/gpm-verifier/: run gpm-verifier has no policy evaluation" in messages
    assert "bgpm" not in set(tree.eval_overall["variant"])
    assert tree.policy_eval.empty and tree.benchmarks.empty
    assert "bt" not in tree.reward_configs and "bt" in tree.variants  # metrics still there


def test_empty_directory_collects_without_crashing(tmp_path):
    tree = read_results_tree(tmp_path)
    assert tree.variants == [] and tree.runs == []
    assert {n.area for n in tree.notes} >= {"reward", "eval", "grpo", "policy_eval", "facts"}


def test_malformed_lines_are_counted_or_raise_in_strict_mode(tmp_path):
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=4, grpo_steps=4)
    path = root / "reward" / "gpm" / "metrics.jsonl"
    good = path.read_text()
    path.write_text(good + '{"step": 4, "loss": 0.\n[1, 2]\n')
    tree = read_results_tree(root)
    warn = [n for n in tree.notes if n.kind == "unreadable"]
    assert len(warn) == 1 and "2 malformed line(s)" in warn[0].message and "first: 5" in warn[0].message
    assert (tree.reward_metrics["variant"] == "gpm").sum() == 4
    with pytest.raises(ValueError, match=r"reward/gpm/metrics.jsonl:5"):
        collect_tree(root, name=None, strict=True)
    path.write_text(good)
    (root / "eval" / "bt" / "summary.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"eval/bt/summary.json: not valid JSON"):
        collect_tree(root, name=None, strict=True)


def test_other_eval_layouts(tmp_path):
    """A single-benchmark summary at the top, and per-benchmark subfolders without an aggregate."""
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=3, grpo_steps=3)
    bt = root / "eval" / "bt"
    synth = json.loads((bt / "synthetic" / "summary.json").read_text())
    (bt / "summary.json").write_text(json.dumps({"stage": "eval_rewardbench", **synth}))
    for sub in ("synthetic", "rewardbench_real"):
        (bt / sub / "summary.json").unlink()
    gpm = root / "eval" / "gpm"
    (gpm / "summary.json").write_text(json.dumps({"stage": "eval_rewardbench", "wall_time_s": 1.0}))
    tree = read_results_tree(root)
    benches = tree.eval_overall.groupby("variant")["benchmark"].apply(set).to_dict()
    assert benches["bt"] == {"default"}
    assert benches["gpm"] == {"synthetic", "rewardbench_real"}


def test_reliability_given_as_columns(tmp_path):
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=3, grpo_steps=3)
    path = root / "eval" / "bt" / "summary.json"
    data = json.loads(path.read_text())
    data["benchmarks"]["synthetic"]["calibration"]["reliability"] = {
        "mean_confidence": [0.2, 0.8],
        "frac_correct": [0.25, 0.75],
        "n": [10, 30],
    }
    path.write_text(json.dumps(data))
    tree = read_results_tree(root)
    rel = tree.reliability[
        (tree.reliability["variant"] == "bt") & (tree.reliability["benchmark"] == "synthetic")
    ]
    assert rel[["confidence", "accuracy", "count"]].values.tolist() == [[0.2, 0.25, 10], [0.8, 0.75, 30]]


def test_key_normalisation_and_nan_detection():
    flat = K.flatten({"KL": {"k3": {"mean": 1.5}}, "rewards/verifier/mean": 0.5, "completion-length.max": 9})
    assert flat == {"kl_k3_mean": 1.5, "rewards_verifier_mean": 0.5, "completion_length_max": 9}
    row, used = K.canonical_row(flat, K.GRPO_METRICS)
    assert row == {"kl_k3_mean": 1.5, "length_max": 9.0} and used == {"kl_k3_mean", "completion_length_max"}
    assert K.per_function_rewards(flat, used) == {"verifier": 0.5}
    assert K.nonfinite_keys({"a": 1.0, "b": math.nan, "c": math.inf}) == "b,c"


def test_config_hash_is_order_independent():
    assert config_hash({"a": 1, "b": {"c": [1, 2]}}) == config_hash({"b": {"c": [1, 2]}, "a": 1})
    assert config_hash({"a": 1}) != config_hash({"a": 2})
    assert len(config_hash({})) == 12
