"""The real workflow, reduced to toy sizes (tests/configs/tiny_full.yaml: 2 reward variants, 1 GRPO run), run
by Snakemake in a temp copy of the repository: every stage runs, the comparison report is built from those
outputs, opens with the answers and shows the numbers (with their 95% intervals) the evaluation stages wrote,
and `snakemake --report` packs the outputs marked with report() into its own HTML report, with every category."""

from __future__ import annotations

import json
import math
import os
import re
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
Z95 = 1.959963984540054  # two-sided 95% normal quantile
BOARD = ["Variant", "Head", *SECTIONS, "Overall", "Cyclic"]
POLICY = ["Run", "Decoding", "Base [95%]", "Trained [95%]", "Change [95%]", "Verdict", "Prompts"]
GRPO_RUNS = ["Run", "Rewards (type x weight)", "Reward model", "beta", "Steps", "s/step"]
# Every chart the tiny tree has data for (two reward-training groups for its five variants, one GRPO group).
FIGURES = {
    "reward_training_2",
    "rewardbench",
    "ablation",
    "policy_eval",
    "policy_curve_1",
    "calibration",
    "selective",
    "reward_training_1",
    "grpo_1",
    "overoptimisation",
}
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
    results = workdir / "results" / "tiny-full"  # results_dir: results/{experiment}
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


def _wilson(successes: int, n: int) -> tuple[float, float]:
    """Wilson score interval, written out here independently of prefpipe.common.stats."""
    p, z2 = successes / n, Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _interval(value: float, stderr: float | None, n: int | None) -> tuple[float, float]:
    """The report's documented rule: estimate ± 1.96 standard errors (clipped to [0, 1]); a zero standard error
    says nothing, so Wilson from n there; without a standard error, Wilson from n."""
    if stderr is not None and (stderr > 0 or not n):
        return max(0.0, value - Z95 * stderr), min(1.0, value + Z95 * stderr)
    return _wilson(round(value * n), n)


def _pct(value: float, ci: tuple[float, float] | None, sign: str = "%") -> str:
    """0.785, (0.75, 0.81) -> '78.5% [75.0, 81.0]' (sign='' in the benchmark board, whose header says %)."""
    if ci is None:
        return f"{100 * value:.1f}{sign}"
    return f"{100 * value:.1f}{sign} [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _pts(delta: float, ci: tuple[float, float]) -> str:
    return f"{100 * delta:+.1f} pts [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"


def _tables(run: dict, header: list[str]) -> list:
    return [t for t in run["tables"] if t.header == header]


def _rows(table) -> dict[str, dict[str, str]]:
    return {row[0]: dict(zip(table.header, row, strict=True)) for row in table.rows}


def _answers(run: dict) -> list[str]:
    """The answer sentences: the list items between the '## Answers' heading and the next section."""
    block = run["md"].split("\n## Answers\n", 1)[1].split("\n## ", 1)[0]
    return [line[2:] for line in block.splitlines() if line.startswith("- ")]


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


def test_the_ablation_ran_and_the_report_shows_its_rows_and_answer(tiny_run):
    summary = _json(tiny_run["results"] / "ablation" / "summary.json")
    assert [(r["fix"], r["kind"]) for r in summary["rows"]] == [("klmean", "added"), ("klmean", "removed")]
    for row in summary["rows"]:
        lo, hi = row["items"]["overall"]["fix_interval"]
        assert lo <= row["items"]["overall"]["fix_effect"] <= hi
    table = [
        t
        for t in tiny_run["tables"]
        if t.header[:5] == ["Fix", "Kind", "Contrast", "Average [95%]", "Verdict"]
    ]
    assert [row[:2] for row in table[0].rows] == [["klmean", "added"], ["klmean", "removed"]]
    assert any(a.startswith("Which Bayesian GPM fixes matter") for a in _answers(tiny_run))


def test_report_figures_exist_and_are_the_ones_it_shows(tiny_run):
    folder = tiny_run["results"] / "report" / "figures"
    written = {p.stem for p in folder.glob("*.png")}
    shown = set(re.findall(r"\]\(figures/([^)]+)\.png\)", tiny_run["md"]))
    assert written == shown == FIGURES, (written, shown)
    for name in written:
        assert (folder / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    assert tiny_run["html"].count('src="data:image/png;base64,') == len(FIGURES)


def test_report_opens_with_the_scoreboard_then_the_answers(tiny_run):
    md, html = tiny_run["md"], tiny_run["html"]
    headings = [line[3:] for line in md.splitlines() if line.startswith("## ")]
    # the scoreboard first, above the contents (not numbered among them), then the answers
    assert headings[:2] == ["Scoreboard", "Answers"] and "Reward models on the benchmarks" in headings
    contents = [line for line in md.split("\n## Answers\n", 1)[0].splitlines() if re.match(r"\d+\. \[", line)]
    assert contents[0] == "1. [Answers](#answers)" and len(contents) == len(headings) - 1
    assert html.index('id="scoreboard"') < html.index('id="answers"') < html.index('id="rewardbench"')
    assert html.index('id="rewardbench"') < html.index('id="policy"')
    answers = _answers(tiny_run)
    assert answers and all(a.endswith(")") and "([details](#" in a for a in answers)


def test_report_shows_every_variant_with_the_eval_summary_numbers(tiny_run):
    results, html = tiny_run["results"], tiny_run["html"]
    titles = [t for t in texts(tiny_run["md"]) if t.startswith("Accuracy (%) [95% interval] on ")]
    boards = _tables(tiny_run, BOARD)
    assert titles == ["Accuracy (%) [95% interval] on synthetic"] and len(boards) == 1
    board = _rows(boards[0])
    baseline = board.pop("longer wins")  # the "longer response wins" baseline on the same pairs
    assert sorted(board) == sorted(VARIANTS)
    block = _json(results / "eval" / VARIANTS[0] / "summary.json")["benchmarks"]["synthetic"]
    wins = block["longer_wins_baseline"]
    assert baseline["Head"] == "baseline"
    assert baseline["Overall"] == _pct(wins["accuracy_ties_half"], None, "")
    for column, key in SECTIONS.items():  # per section too, ties counting half
        assert baseline[column] == _pct(wins["by_section"][key]["accuracy_ties_half"], None, ""), column
    overall_said = {}
    for variant in VARIANTS:
        summary = _json(results / "eval" / variant / "summary.json")
        assert summary["primary_benchmark"] == "synthetic"
        row = board[variant]
        assert row["Head"] == summary["head_type"]
        for column, key in SECTIONS.items():
            sec = summary["sections"][key]
            expected = _pct(sec["score"], _interval(sec["score"], sec["stderr"], sec["n"]), "")
            assert row[column] == expected, (variant, column)
            assert f">{expected}</td>" in html, (variant, column)
        overall = summary["overall"]
        ci = _interval(overall, summary["overall_stderr"], summary.get("n"))
        assert row["Overall"] == _pct(overall, ci, ""), variant
        overall_said[variant] = _pct(overall, ci)
        cyc = summary["cyclic"]
        assert cyc["n"] > 0
        assert row["Cyclic"] == _pct(
            cyc["accuracy"], _wilson(round(cyc["accuracy"] * cyc["n"]), cyc["n"]), ""
        )
        assert f">{row['Cyclic']}</td>" in html
    # the answers repeat the main heads' overall scores (not the ablation variants'), with the same intervals
    best = [a for a in _answers(tiny_run) if a.startswith("Best reward head overall on synthetic: ")]
    assert len(best) == 1
    for variant, said in overall_said.items():
        if variant.startswith("bgpm-"):
            continue
        assert f"{variant} {said}" in best[0], (variant, said, best[0])
    (calibration,) = _tables(tiny_run, ["Variant", "ECE", "Brier", "NLL", "Mean confidence"])
    assert sorted(r[0] for r in calibration.rows) == sorted(VARIANTS)
    headline = [t for t in texts(tiny_run["md"]) if t.startswith("Headline benchmark")]
    assert headline == ["Headline benchmark: synthetic (primary_benchmark of the evaluation summaries)."]


def test_report_shows_every_run_with_the_policy_eval_numbers(tiny_run):
    results, html = tiny_run["results"], tiny_run["html"]
    (runs,) = _tables(tiny_run, GRPO_RUNS)
    assert [r[0] for r in runs.rows] == RUNS
    for run, cells in _rows(runs).items():
        assert cells["Steps"] == str(TINY["grpo"]["defaults"]["steps"])
        assert cells["Reward model"] == TINY["grpo"]["runs"][run]["reward_model"]
    (policy,) = _tables(tiny_run, POLICY)
    shown = {(r[0], r[1]): dict(zip(policy.header, r, strict=True)) for r in policy.rows}
    expected_rows = set()
    answers = _answers(tiny_run)
    for run in RUNS:
        summary = _json(results / "policy_eval" / run / "summary.json")
        (said,) = [a for a in answers if a.startswith(f"GRPO run {run}, held-out verifier accuracy: ")]
        for decoding, block in summary["decodings"].items():
            expected_rows.add((run, decoding))
            cells = shown[(run, decoding)]
            base, trained = block["base"], block["trained"]
            for side, column in ((base, "Base [95%]"), (trained, "Trained [95%]")):
                assert cells[column] == _pct(side["accuracy"], side["accuracy_ci95"]), (run, decoding, column)
                assert f">{cells[column]}</td>" in html
            # change: the paired interval eval_policy recorded (both policies answer the same prompts)
            delta, change = trained["accuracy"] - base["accuracy"], block["paired"]["ci"]
            assert block["paired"]["delta"] == pytest.approx(delta)
            assert cells["Change [95%]"] == _pts(delta, change), (run, decoding)
            verdict = "improved" if change[0] > 0 else ("worse" if change[1] < 0 else "no clear change")
            assert cells["Verdict"] == verdict
            assert cells["Prompts"] == str(trained["n"]) == str(base["n"])
            assert (
                f"{decoding} {cells['Base [95%]']} → {cells['Trained [95%]']}, {verdict} ({cells['Change [95%]']})"
                in said
            ), said
    assert set(shown) == expected_rows
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
    expected = {"report.html", "report.md", "samples.jsonl", "summary.json", *(f"{f}.png" for f in FIGURES)}
    assert expected <= added, added
