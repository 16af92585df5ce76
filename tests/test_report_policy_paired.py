"""The report's learning-curve and paired-comparison sections on a results tree written by the real stages
(tiny runs: three seeds of one setting and a second setting), checked against figures computed here from the
stages' own files (curve.jsonl, metrics.jsonl, per_example.jsonl)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from support.curve_runs import evaluate, train, write_inputs
from support.settings import pipeline, report_settings

from prefpipe.common.config import ConfigError
from prefpipe.common.io import read_jsonl
from prefpipe.common.stats import paired_difference
from prefpipe.report.inputs import Manifest, read_tree
from prefpipe.report.sections import Context, paired, policy, policy_curve

ARMS = {"lr_high": ["hi_s0", "hi_s1", "hi_s2"], "lr_low": ["lo_s0"]}
COMPARISON = {"arms": ARMS, "contrasts": [["lr_high", "lr_low"]]}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("paired_tree")
    folders = write_inputs(root / "inputs")
    results = root / "results"
    for arm, runs in ARMS.items():
        for run in runs:
            seed = int(run[-1])
            lr = 5e-2 if arm == "lr_high" else 1e-3
            train(folders, results / "grpo" / run, seed=seed, learning_rate=lr)
            evaluate(folders, results / "grpo" / run / "policy", results / "policy_eval" / run, seed=seed)
    runs = [r for members in ARMS.values() for r in members]
    return read_tree(results, Manifest.standard([], runs, []), "main", strict=True)


def _ctx(tree) -> Context:
    declared = {"enabled": False, "runs": {r: {} for members in ARMS.values() for r in members}}
    return Context(tree, [], report_settings({"policy_comparison": COMPARISON}, grpo=declared))


def test_curve_table_matches_the_curve_and_training_files(tree):
    section = policy_curve.build(_ctx(tree))
    figures = [b for b in section.blocks if hasattr(b, "png")]
    table = section.blocks[-1]
    assert figures and figures[0].png.startswith(b"\x89PNG")
    mine = [r for r in table.rows if r[0] == "hi_s1"]
    curve = read_jsonl(tree.root / "grpo" / "hi_s1" / "curve.jsonl")
    assert [r[1] for r in mine] == [str(p["step"]) for p in curve] == ["0", "2", "4", "5"]
    assert mine[0][5] == "–"  # no update before the first point
    rewards = [m["reward_mean"] for m in read_jsonl(tree.root / "grpo" / "hi_s1" / "metrics.jsonl")]
    assert float(mine[2][5]) == pytest.approx(np.mean(rewards[2:4]), abs=5e-4)  # updates 2 and 3
    assert mine[1][2].startswith(f"{100 * curve[1]['greedy_accuracy']:.1f}%")
    assert mine[1][4].endswith(f"({100 * curve[1]['greedy_truncated_ratio']:.1f}%)")


def test_paired_tables_match_an_independent_computation(tree):
    ctx = _ctx(tree)
    section = paired.build(ctx)
    runs, arms, contrasts = section.blocks
    assert len(runs.rows) == 4 * 2 and {r[1] for r in runs.rows} == {"greedy", "sampled"}
    assert [r[0] for r in arms.rows] == ["lr_high", "lr_high"]  # one-run arms have no pooled row
    examples = {r: read_jsonl(tree.root / "policy_eval" / r / "per_example.jsonl") for r in ARMS["lr_high"]}
    ids = [row["id"] for row in examples["hi_s0"]]
    by_id = {r: {row["id"]: row for row in rows} for r, rows in examples.items()}
    base = [float(by_id["hi_s0"][i]["base_correct_greedy"]) for i in ids]
    trained = [np.mean([float(by_id[r][i]["trained_correct_greedy"]) for r in by_id]) for i in ids]
    expected = paired_difference(trained, base, 2000, 0.95, 0)
    assert arms.rows[0][2] == (
        f"{100 * expected['delta']:+.1f} pts [{100 * expected['ci'][0]:+.1f}, {100 * expected['ci'][1]:+.1f}]"
    )
    low = read_jsonl(tree.root / "policy_eval" / "lo_s0" / "per_example.jsonl")
    low_trained = {row["id"]: float(row["trained_correct_greedy"]) for row in low}
    diff = np.mean([t - low_trained[i] for t, i in zip(trained, ids, strict=True)])
    assert contrasts.rows[0][:2] == ["lr_high − lr_low", "greedy"]
    assert contrasts.rows[0][2].startswith(f"{100 * diff:+.1f} pts")
    assert any("lr_high − lr_low" in c.text for c in paired.claims(ctx))


def test_policy_table_uses_the_recorded_paired_interval(tree):
    ctx = _ctx(tree)
    _, _, _, ci = policy.change(ctx, "hi_s0", "sampled")
    recorded = json.loads((tree.root / "policy_eval" / "hi_s0" / "summary.json").read_text())
    assert list(ci) == recorded["decodings"]["sampled"]["paired"]["ci"]


def test_comparison_naming_an_unknown_run_is_a_config_error():
    with pytest.raises(ConfigError, match=r"report.policy_comparison.arms.x: \['nope'\]"):
        pipeline({"report": {"policy_comparison": {"arms": {"x": ["nope"]}, "contrasts": []}}})
    with pytest.raises(ConfigError, match=r"contrasts\[0\]"):
        pipeline({"report": {"policy_comparison": {"arms": {}, "contrasts": [["verifier", "zzz"]]}}})
