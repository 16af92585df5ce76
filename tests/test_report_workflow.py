"""The real workflow, reduced to toy sizes (tests/configs/tiny_full.yaml: 2 reward variants, 1 GRPO run), run
by Snakemake in a temp copy of the repository: every stage runs, the comparison report is built from those
outputs and shows the numbers the evaluation stages wrote, and `snakemake --report` packs the outputs marked
with report() into its own HTML report, with every category."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support.markdown_tables import tables, texts
from support.workflow import merged_config, workflow_copy

CONFIG = "tiny_full.yaml"
TINY = merged_config(CONFIG)
VARIANTS = list(TINY["reward"]["variants"])
RUNS = list(TINY["grpo"]["runs"])
SECTIONS = {"Chat": "chat", "Chat Hard": "chat_hard", "Safety": "safety", "Reasoning": "reasoning"}
CATEGORIES = [
    "1. Data",
    "2. Base model",
    "3. Reward models",
    "4. RewardBench evaluation",
    "5. GRPO",
    "6. Comparison report",
]


def _env() -> dict[str, str]:
    """Rules call `python -m prefpipe.<stage>`: the interpreter running the tests must be first on PATH."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.update(HF_HUB_OFFLINE="1", WANDB_MODE="offline", TOKENIZERS_PARALLELISM="false")
    env.pop("PYTHONPATH", None)  # the rules set it to the copy's src/
    return env


def _snakemake(workdir: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=workdir,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> dict:
    workdir = workflow_copy(tmp_path_factory.mktemp("tiny_full") / "repo", CONFIG)
    start = time.monotonic()
    result = _snakemake(workdir, "--cores", "2")
    seconds = time.monotonic() - start
    print(f"\ntiny_full workflow: {seconds:.1f} s")
    assert result.returncode == 0, result.stderr[-6000:]
    results = workdir / "results"
    md = (results / "report" / "report.md").read_text(encoding="utf-8")
    return {
        "workdir": workdir,
        "results": results,
        "log": result.stderr,
        "seconds": seconds,
        "md": md,
        "html": (results / "report" / "report.html").read_text(encoding="utf-8"),
        "tables": tables(md),
    }


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _pct(value: float, stderr: float | None = None) -> str:
    text = f"{100 * value:.1f}"
    return text + (f" ± {100 * stderr:.1f}" if stderr is not None else "")


def _table(run: dict, first_columns: list[str]):
    return next(t for t in run["tables"] if t.header[: len(first_columns)] == first_columns)


def test_every_stage_ran_from_the_tiny_config(tiny_run):
    results = tiny_run["results"]
    assert "steps (100%) done" in tiny_run["log"]
    expected = ["data/summary.json", "base/summary.json", "report/report.html", "report/report.md"]
    expected += [f"reward/{v}/summary.json" for v in VARIANTS] + [f"eval/{v}/summary.json" for v in VARIANTS]
    expected += [f"grpo/{r}/samples.jsonl" for r in RUNS] + [f"policy_eval/{r}/summary.json" for r in RUNS]
    for rel in expected:
        assert (results / rel).is_file(), rel
    assert sorted(p.name for p in (results / "reward").iterdir()) == sorted(VARIANTS)  # only the tiny ones
    assert sorted(p.name for p in (results / "grpo").iterdir()) == sorted(RUNS)
    assert _json(results / "data" / "summary.json")["files"]["rl_prompts_heldout.jsonl"] == 8
    assert (
        list(
            yaml.safe_load((tiny_run["workdir"] / "config" / "config.yaml").read_text())["reward"]["variants"]
        )
        == VARIANTS
    )
    figures = sorted(p.name for p in (results / "report" / "figures").glob("*.png"))
    assert {"ablation.png", "reward_training.png", "policy_eval.png"} <= set(figures)
    assert {f"grpo_{r}.png" for r in RUNS} <= set(figures)


def test_report_shows_every_variant_with_the_eval_summary_numbers(tiny_run):
    results, html = tiny_run["results"], tiny_run["html"]
    board = _table(tiny_run, ["Benchmark", "Variant"])
    ours = {row[1]: dict(zip(board.header, row, strict=True)) for row in board.rows if row[0] == "synthetic"}
    assert sorted(ours) == sorted(VARIANTS)
    for variant in VARIANTS:
        summary = _json(results / "eval" / variant / "summary.json")
        assert summary["primary_benchmark"] == "synthetic"
        row = ours[variant]
        for column, key in SECTIONS.items():
            section = summary["sections"][key]
            assert row[column] == _pct(section["score"], section["stderr"]), (variant, column)
            assert f">{row[column]}</td>" in html
        assert row["Overall"] == _pct(summary["overall"], summary["overall_stderr"])
        assert row["Cyclic"] == _pct(summary["cyclic"]["accuracy"])
        assert row["Pairs"] == str(summary["n_pairs"])
    calibration = _table(tiny_run, ["Benchmark", "Variant", "ECE"])
    assert sorted(r[1] for r in calibration.rows) == sorted(VARIANTS)
    headline = [t for t in texts(tiny_run["md"]) if t.startswith("Headline benchmark")]
    assert headline == [
        "Headline benchmark (ablation table and charts): synthetic (as recorded by the evaluation stage: "
        f"primary_benchmark in eval/<variant>/summary.json of all {len(VARIANTS)} variants)."
    ]


def test_report_shows_every_run_with_the_policy_eval_numbers(tiny_run):
    results = tiny_run["results"]
    runs = _table(tiny_run, ["Run", "Reward model"])
    assert [r[0] for r in runs.rows] == RUNS
    for row in runs.rows:
        cells = dict(zip(runs.header, row, strict=True))
        assert cells["Steps"] == str(TINY["grpo"]["defaults"]["steps"])
        assert cells["Reward model"] == TINY["grpo"]["runs"][row[0]]["reward_model"]
    policy = _table(tiny_run, ["Run", "Decoding", "Policy"])
    shown = {(r[0], r[1], r[2]): dict(zip(policy.header, r, strict=True)) for r in policy.rows}
    for run in RUNS:
        summary = _json(results / "policy_eval" / run / "summary.json")
        for decoding, block in summary["decodings"].items():
            label = decoding if decoding == summary["decoding"] else f"{decoding} (secondary)"
            for side in ("base", "trained"):
                cells = shown[(run, label, side)]
                lo, hi = block[side]["accuracy_ci95"]
                assert cells["Verifier acc. (%)"] == _pct(block[side]["accuracy"])
                assert cells["95% interval"] == f"[{100 * lo:.1f}, {100 * hi:.1f}]"
                assert cells["Prompts"] == str(block[side]["n"])
    samples = [t for t in texts(tiny_run["md"]) if t.startswith("Run ") and "logged samples" in t]
    assert [s.split(":")[0] for s in samples] == [f"Run {r}" for r in RUNS]


def test_snakemake_report_packs_every_category(tiny_run, tmp_path):
    target = tmp_path / "snakemake_report.html"
    result = _snakemake(tiny_run["workdir"], "--report", str(target), timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    assert target.is_file() and target.stat().st_size > 100_000
    text = target.read_text(encoding="utf-8")
    for category in CATEGORIES:
        assert category in text, category
    added = {
        line.split("Adding ")[1].split(" (")[0] for line in result.stderr.splitlines() if "Adding " in line
    }
    expected = {
        "report.html",
        "report.md",
        "samples.jsonl",
        "summary.json",
        "ablation.png",
        "policy_eval.png",
    }
    assert expected <= added, added
