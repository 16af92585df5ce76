"""The GRPO hypothesis grid: effects, intervals and verdicts against hand-computed numbers, the stage on a
written results tree, the grid's settings and a dry run of config/experiments/grpo_hypotheses.yaml."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.settings import pipeline
from support.workflow import repo_copy

from prefpipe.common.io import atomic_write_json, write_jsonl
from prefpipe.grpo.analyses import hypotheses as hy
from prefpipe.grpo_hypotheses import main

REPO = Path(__file__).resolve().parents[1]
GRID = REPO / "config" / "experiments" / "grpo_hypotheses.yaml"


def test_verdict_follows_the_interval():
    assert hy.verdict((0.01, 0.2)) == hy.HELPS
    assert hy.verdict((-0.3, -0.05)) == hy.HURTS
    assert hy.verdict((-0.1, 0.2)) == hy.NO_EFFECT
    assert hy.verdict((0.0, 0.2)) == hy.NO_EFFECT  # touching 0 is not measurable


def test_paired_accuracy_by_hand():
    # 8 prompts: run right where baseline wrong on 3, wrong where baseline right on 1 -> mean d = (3 - 1) / 8
    base = [0, 0, 0, 1, 1, 1, 0, 1]
    run = [1, 1, 1, 0, 1, 1, 0, 1]
    rows = lambda xs: [{"id": str(i), "trained_correct": bool(x)} for i, x in enumerate(xs)]  # noqa: E731
    got = hy.paired_accuracy(rows(run), rows(base)[::-1], 4000, 0.95, seed=7)  # order does not matter
    assert got["accuracy_delta"] == pytest.approx(0.25)
    assert (got["accuracy"], got["baseline_accuracy"], got["n_prompts"]) == (0.75, 0.5, 8)
    # the interval, independently: numpy resampling of d with the same generator and seed
    d = np.array(run, float) - np.array(base, float)
    idx = np.random.default_rng(7).integers(0, 8, size=(4000, 8))
    want = np.quantile(d[idx].mean(axis=1), [0.025, 0.975])
    assert got["accuracy_ci"] == pytest.approx(list(want))
    lo, hi = got["accuracy_ci"]
    assert -1.0 <= lo <= 0.25 <= hi <= 1.0


def test_identical_runs_have_no_measurable_effect_and_a_uniform_gain_helps():
    base = [{"id": str(i), "trained_correct": i % 2 == 0} for i in range(20)]
    same = hy.paired_accuracy(base, base, 500, 0.95, seed=0)
    assert same["accuracy_ci"] == [0.0, 0.0] and hy.verdict(tuple(same["accuracy_ci"])) == hy.NO_EFFECT
    better = [{"id": r["id"], "trained_correct": True} for r in base]
    up = hy.paired_accuracy(better, base, 500, 0.95, seed=0)
    assert up["accuracy_delta"] == pytest.approx(0.5) and hy.verdict(tuple(up["accuracy_ci"])) == hy.HELPS


def _tree(root: Path, grid) -> None:
    """per_example rows and metrics for every run of the grid: h02 trains on prompts from step 0, h04 is cut
    off from step 2, h01 is right on every prompt."""
    n = 30
    for run in grid.runs():
        correct = [True] * n if run == "h01_no_std" else [i % 3 == 0 for i in range(n)]
        write_jsonl(
            root / "policy_eval" / run / "per_example.jsonl",
            [{"id": f"p{i}", "trained_correct": c} for i, c in enumerate(correct)],
        )
        atomic_write_json(root / "policy_eval" / run / "summary.json", {"decoding": "sampled"})
        rows = []
        for step in range(12):
            rows.append(
                {
                    "step": step,
                    "reward_mean": 0.2 + (0.3 if run == "h01_no_std" else 0.0) + 0.001 * step,
                    "prompt_loss_share": 0.4 if run == "h02_prompt_mask" else 0.0,
                    "truncated_ratio": 0.9 if (run == "h04_short" and step >= 2) else 0.0,
                    "entropy": 1.0,
                    "grad_norm": 1.0,
                    "frac_reward_zero_std": 0.1,
                }
            )
        write_jsonl(root / "grpo" / run / "metrics.jsonl", rows)


def test_stage_writes_the_summary_with_diagnostics_and_verdicts(tmp_path):
    settings = pipeline(GRID)
    grid = settings.hypotheses
    _tree(tmp_path / "results", grid)
    cfg = settings.stage_json(grid, 1)
    out = tmp_path / "results" / "grpo_hypotheses"
    assert main(["--config", cfg, "--results", str(tmp_path / "results"), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["tests"]) == {"H01", "H02", "H03", "H04", "H05", "H06"}
    h01 = summary["tests"]["H01"]["runs"]["h01_no_std"]
    assert h01["accuracy_delta"] == pytest.approx(20 / 30) and h01["verdict"] == hy.HELPS
    assert h01["reward_delta"] == pytest.approx(0.3)
    h03 = summary["tests"]["H03"]["runs"]["h03_beta0"]
    assert h03["verdict"] == hy.NO_EFFECT and h03["diagnostics"] == []
    fired = {
        d["check"]: d["first_step"] for d in summary["tests"]["H02"]["runs"]["h02_prompt_mask"]["diagnostics"]
    }
    assert fired == {"prompt loss": 0}
    fired = {d["check"]: d["first_step"] for d in summary["tests"]["H04"]["runs"]["h04_short"]["diagnostics"]}
    assert fired == {"truncation": 2}
    assert set(summary["tests"]["H05"]["runs"]) == {"h05_verifier_rm", "h05_rm_only"}
    md = (out / "summary.md").read_text()
    assert md.count("\n| H0") == 7 and "prompt loss (step 0)" in md and "truncation (step 2)" in md


def test_grid_settings_and_bad_runs_are_named():
    from prefpipe.common.config import ConfigError

    grid = pipeline(GRID).hypotheses
    assert grid.baseline == "h_baseline" and len(grid.runs()) == 8
    assert pipeline().hypotheses is None  # the default declares no grid
    with pytest.raises(ConfigError, match=r"grpo.hypotheses.tests.H01.runs: \['nope'\]"):
        pipeline(GRID, {"grpo": {"hypotheses": {"tests": {"H01": {"runs": ["nope"]}}}}})


def test_dry_run_of_the_grid(tmp_path):
    workdir = repo_copy(tmp_path / "wf", link_src=True)
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "2", "--configfile", str(GRID)],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", result.stdout, flags=re.M))
    assert counts["train_grpo"] == "8" and counts["eval_policy"] == "8" and counts["grpo_hypotheses"] == "1"
    assert counts["train_reward_model"] == "1"
    assert "results/grpo_hypotheses/grpo_hypotheses/summary.json" in result.stdout  # results/{experiment}


def test_report_reads_the_grid_summary(tmp_path):
    from support.settings import report_settings

    from prefpipe.report.inputs import Manifest, read_tree
    from prefpipe.report.sections import Context, hypotheses

    settings = pipeline(GRID)
    results = tmp_path / "results"
    _tree(results, settings.hypotheses)
    out = results / "grpo_hypotheses"
    assert (
        main(
            [
                "--config",
                settings.stage_json(settings.hypotheses, 1),
                "--results",
                str(results),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    tree = read_tree(
        results, Manifest({"grpo_hypotheses": {"": "grpo_hypotheses/summary.json"}}), "main", True
    )
    ctx = Context(tree, [], report_settings())
    section = hypotheses.build(ctx)
    table = section.blocks[0]
    assert len(table.rows) == 7 and table.rows[0][-1] == "helps"
    assert any("prompt loss (step 0)" in row[5] for row in table.rows)
    assert len(hypotheses.claims(ctx)) == 6


def test_diagnostics_the_baseline_did_not_show_come_first():
    def fired(*checks: str) -> list[dict]:
        return [{"check": c, "first_step": i} for i, c in enumerate(checks)]

    baseline = fired("zero-std groups", "truncation")
    run = fired("zero-std groups", "truncation", "prompt loss")
    text = hy.diagnostics_text(run, baseline)
    assert text == "prompt loss (step 2); zero-std groups (step 0); truncation (step 1)"
    assert hy.diagnostics_text(run) == "zero-std groups (step 0); truncation (step 1); prompt loss (step 2)"
    assert hy.diagnostics_text([], baseline) == "none"


def _metrics(total: float, **sources: float) -> list[dict]:
    """Ten steps of a run's metrics with constant per-source means."""
    return [{"reward_mean": total} | {f"reward/{k}_mean": v for k, v in sources.items()} for _ in range(10)]


def test_reward_effect_compares_like_with_like():
    s = hy_settings()
    verifier = _metrics(0.30, verifier=0.30)
    both = _metrics(1.10, verifier=0.25, reward_model=0.85)
    rm_only = _metrics(0.90, reward_model=0.90)
    same = hy.reward_effect(_metrics(0.40, verifier=0.40), verifier, s)
    assert same["reward_metric"] == "reward_mean" and same["reward_delta"] == pytest.approx(0.10)
    shared = hy.reward_effect(both, verifier, s)  # the verifier part, not 1.10 - 0.30
    assert shared["reward_metric"] == "reward/verifier_mean" and shared["reward_delta"] == pytest.approx(
        -0.05
    )
    assert hy.reward_text(shared).endswith("(verifier only)")
    none = hy.reward_effect(rm_only, verifier, s)
    assert none["reward_delta"] is None and hy.reward_text(none) == "none: no shared reward source"


def hy_settings():
    return pipeline(GRID).hypotheses
