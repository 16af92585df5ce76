"""The three-seed command: mean ± sd over seeds of the headline figures (from evaluation and ablation files
written as the stages write them), the report's across-seeds tables, and the command's dry run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from support.bootstrap_stamp import bootstrapped_for
from support.eval_tree import decisions, write_eval
from support.markdown_tables import tables
from support.settings import pipeline, stage_json
from support.stages import run_main
from support.workflow import REPO, repo_copy

from prefpipe import ablation as ablation_stage
from prefpipe import seed_summary

ONLY = ["bgpm", "bgpm-broken", "bgpm-fix-klmean", "bgpm-no-klmean"]
OVERLAY = {"experiment": "synthetic-seeds", "reward": {"only": ONLY}, "grpo": {"enabled": False}}


def _seed_tree(root: Path, seed: int, experiment: str = "synthetic-seeds") -> Path:
    """<root>/seed-<seed>: eval/ of ONLY and ablation/ from the ablation stage, recorded as `experiment`."""
    tree = root / f"seed-{seed}"
    broken, fixed = 0.55 + 0.02 * seed, 0.8 - 0.01 * seed
    for i, (variant, acc) in enumerate(zip(ONLY, (fixed, broken, fixed, broken), strict=True)):
        write_eval(tree / "eval", variant, decisions(acc, seed=100 * seed + i))
        cfg = json.loads((tree / "eval" / variant / "summary.json").read_text())
        (tree / "eval" / variant / "config.json").write_text(
            json.dumps({"stage": "eval_rewardbench", "config": {"experiment": experiment, "seed": seed}})
        )
        assert cfg["overall"] is not None
    settings = pipeline({**OVERLAY, "seed": seed, "experiment": experiment}).ablation
    code, _ = run_main(ablation_stage.main, stage_json(settings), eval=tree / "eval", out=tree / "ablation")
    assert code == 0
    return tree


def test_the_seed_summary_is_mean_and_sd_of_each_trees_figures(tmp_path):
    trees = [_seed_tree(tmp_path, seed) for seed in (0, 1, 2)]
    config = tmp_path / "overlay.yaml"
    config.write_text(yaml.safe_dump(OVERLAY))
    out = tmp_path / "summary"
    assert seed_summary.main(["--configfile", str(config), "--out", str(out), *map(str, trees)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert [t["seed"] for t in summary["trees"]] == [0, 1, 2] and summary["benchmark"] == "synthetic"
    for variant in ONLY:
        evals = [json.loads((t / "eval" / variant / "summary.json").read_text()) for t in trees]
        for item, values in {
            "overall": [e["overall"] for e in evals],
            "reasoning": [e["sections"]["reasoning"]["score"] for e in evals],
            "cyclic": [e["cyclic"]["accuracy"] for e in evals],
            "ece": [e["calibration"]["ece"] for e in evals],
        }.items():
            got = summary["variants"][variant][item]
            assert got["mean"] == pytest.approx(np.mean(values)), (variant, item)
            assert got["sd"] == pytest.approx(np.std(values, ddof=1)), (variant, item)
            assert got["n"] == 3
    effects = [
        next(
            r["items"]["overall"]["fix_effect"]
            for r in json.loads((t / "ablation" / "summary.json").read_text())["rows"]
            if (r["fix"], r["kind"]) == ("klmean", "removed")
        )
        for t in trees
    ]
    got = summary["ablation_fix_effects"]["klmean removed"]
    assert got["mean"] == pytest.approx(np.mean(effects)) and got["sd"] == pytest.approx(
        np.std(effects, ddof=1)
    )
    assert summary["grpo_hacking"] is None  # no GRPO runs in this experiment
    md = (out / "summary.md").read_text()
    assert "mean ± sd over seeds 0, 1, 2" in md and "| klmean | removed |" in md
    # a missing tree is one line naming it, and nothing is written
    code = seed_summary.main(
        ["--configfile", str(config), "--out", str(tmp_path / "x"), str(tmp_path / "nope")]
    )
    assert code == 2 and not (tmp_path / "x").exists()


def test_the_report_shows_the_seeds_ece_and_ablation_effects(tmp_path):
    from prefpipe.report.inputs import Manifest
    from prefpipe.report.markdown import render_markdown
    from prefpipe.report.write import document

    trees = [_seed_tree(tmp_path, seed) for seed in (0, 1, 2)]
    compare = {f"seed-{s}": str(t) for s, t in zip((1, 2), trees[1:], strict=True)}
    settings = pipeline({**OVERLAY, "report": {"compare": compare}})
    doc = document(settings.report, trees[0], Manifest.standard(ONLY, [], []))
    md = render_markdown(doc, figure_dir="figures")
    across = md.split("## Across seeds and experiments", 1)[1]
    assert "| Cyclic | ECE |" in across
    assert "each fix's effect on the four-section average" in across
    assert "| synthetic-seeds | klmean | removed |" in across
    assert "(n=3)" in across


def test_two_experiments_compared_are_shown_side_by_side(tmp_path):
    """report.compare naming another experiment's folder: one column per experiment, each variant's overall."""
    from prefpipe.report.inputs import Manifest
    from prefpipe.report.markdown import render_markdown
    from prefpipe.report.write import document

    own = _seed_tree(tmp_path / "results" / "synthetic-seeds", 0)
    other = _seed_tree(tmp_path / "results" / "other-exp", 1, experiment="other-exp")
    settings = pipeline({**OVERLAY, "report": {"compare": {"other": str(other)}}})
    md = render_markdown(
        document(settings.report, own, Manifest.standard(ONLY, [], [])), figure_dir="figures"
    )
    side = [t for t in tables(md) if t.header[:1] == ["Variant"] and "other-exp (synthetic)" in t.header]
    assert len(side) == 1 and side[0].header == [
        "Variant",
        "synthetic-seeds (synthetic)",
        "other-exp (synthetic)",
    ]
    for variant, cells in zip(ONLY, side[0].rows, strict=True):
        expected = [
            json.loads((tree / "eval" / variant / "summary.json").read_text())["overall"]
            for tree in (own, other)
        ]
        assert cells[0] == variant, cells
        assert [float(c.split()[0]) for c in cells[1:]] == pytest.approx(
            [100 * e for e in expected], abs=0.05
        )


def test_a_compared_experiment_shows_only_the_variants_it_trained(tmp_path):
    """A variant the other experiment never trained gets no row of dashes for it: '–' in its side-by-side
    column only, and no row in the per-experiment table."""
    from prefpipe.report.inputs import Manifest
    from prefpipe.report.markdown import render_markdown
    from prefpipe.report.write import document

    own = _seed_tree(tmp_path / "results" / "synthetic-seeds", 0)
    other = _seed_tree(tmp_path / "results" / "other-exp", 1, experiment="other-exp")
    shutil.rmtree(other / "eval" / ONLY[1])
    settings = pipeline({**OVERLAY, "report": {"compare": {"other": str(other)}}})
    md = render_markdown(
        document(settings.report, own, Manifest.standard(ONLY, [], [])), figure_dir="figures"
    )
    side = next(t for t in tables(md) if t.header[:1] == ["Variant"] and "other-exp (synthetic)" in t.header)
    assert dict((r[0], r[2]) for r in side.rows)[ONLY[1]] == "–"
    long = next(t for t in tables(md) if t.header[:3] == ["Experiment", "Benchmark", "Variant"])
    assert [r[2] for r in long.rows if r[0] == "other-exp"] == [v for v in ONLY if v != ONLY[1]]
    assert [r[2] for r in long.rows if r[0] == "synthetic-seeds"] == list(ONLY)


def _bootstrapped_venv() -> Path:
    venv = Path(sys.prefix)
    if not bootstrapped_for(venv):
        pytest.skip(f"seeds.sh runs run.sh, which needs a bootstrapped virtualenv; {venv} is not one")
    return venv


def test_the_seeds_command_dry_runs_each_seed_in_its_own_folder(tmp_path):
    venv = _bootstrapped_venv()
    work = repo_copy(tmp_path / "wf", "scripts", link_src=True)
    shutil.copy2(REPO / "pyproject.toml", work / "pyproject.toml")  # bootstrap.sh's stamp is its hash
    env = {**os.environ, "PREFPIPE_VENV": str(venv), "PREFPIPE_CORES": "1", "PREFPIPE_SEEDS": "3 4"}
    result = subprocess.run(
        ["bash", "scripts/seeds.sh", "-n"], cwd=work, env=env, capture_output=True, text=True, timeout=300
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "[bootstrap]" not in output
    folder = (
        "results/synthetic-seeds"  # the seeds experiment's own folder (results_dir: results/{experiment})
    )
    for seed in (3, 4):
        overlay = yaml.safe_load((work / folder / f"seed-{seed}.yaml").read_text())
        assert overlay == {"seed": seed, "results_dir": f"{folder}/seed-{seed}"}
        assert f"{folder}/seed-{seed}/eval/bgpm-no-klmean/summary.json" in output
        assert f"{folder}/seed-{seed}/ablation/summary.json" in output
    assert "train_grpo" not in output and f"{folder}/eval/" not in output
    assert sorted(p.name for p in (work / folder).iterdir()) == ["seed-3.yaml", "seed-4.yaml"]
