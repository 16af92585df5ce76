"""The report stage end to end on fixture trees: outputs, tables in Markdown, a self-contained HTML whose
embedded plots decode, escaped sample text, and trees with missing files that still build."""

from __future__ import annotations

import base64
import io
import json
import re

import numpy as np
import pytest
from PIL import Image
from support.markdown_tables import texts
from support.results_tree import PLANTED, read_results_tree, write_results_tree
from support.settings import eval_settings, report_settings, stage_json
from support.stages import run_main

from prefpipe.report.__main__ import main
from prefpipe.report.write import build

DATA_URI = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')
ATTR = re.compile(r'\b(?:src|href|action|poster|srcset)\s*=\s*"([^"]*)"', re.IGNORECASE)


def _config(**extra):
    return report_settings({"figure_dpi": 50, **extra}, experiment="synthetic-default", seed=0)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("report")
    expected = write_results_tree(base / "results", reward_steps=20, grpo_steps=30)
    write_results_tree(base / "seed1", seed=1, shift=0.02, reward_steps=5, grpo_steps=5)
    write_results_tree(base / "other", experiment="other-exp", shift=-0.05, reward_steps=5, grpo_steps=5)
    cfg = _config(compare={"seed1": str(base / "seed1"), "other": str(base / "other")})
    summary = build(cfg, base / "results", base / "results" / "report")
    out = base / "results" / "report"
    return {
        "out": out,
        "summary": summary,
        "expected": expected,
        "html": (out / "report.html").read_text(encoding="utf-8"),
        "md": (out / "report.md").read_text(encoding="utf-8"),
    }


def test_outputs_and_run_record(built):
    out, summary = built["out"], built["summary"]
    for name in ("report.html", "report.md", "config.json", "versions.json", "metrics.jsonl", "summary.json"):
        assert (out / name).is_file(), name
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # no temp files left behind
    record = json.loads((out / "summary.json").read_text())
    assert record["stage"] == "report" and record["n_trees"] == 3 and record["n_variants"] == 6
    assert record["n_flags"] == sum(len(v) for v in PLANTED.values())
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["html_bytes"] == len(built["html"].encode("utf-8"))
    assert sorted(p.stem for p in (out / "figures").glob("*.png")) == sorted(
        ["ablation", "reward_training", "calibration_synthetic", "calibration_rewardbench_real"]
        + ["grpo_gpm-verifier", "grpo_bgpm-riskaverse", "policy_eval", "compare_overall"]
    )
    assert summary["n_figures"] == 8


def test_markdown_holds_the_tables(built):
    md, expected = built["md"], built["expected"]
    for header in (
        "| Benchmark | Variant | Chat | Chat Hard | Safety | Reasoning | Overall | Cyclic | Pairs |",
        "| Variant | Settings that differ from bgpm (fixed) | Fix applied to broken |",
        "| Benchmark | Variant | ECE | Brier | NLL | Mean confidence | Selective criterion |",
        "| Run | Check | Metric | Status | First step | Value there | Threshold | Steps flagged |",
        "| Run | Decoding | Policy | Verifier acc. (%) | 95% interval |",
        "| Experiment | Benchmark | Variant | Seeds | Overall |",
        "| Rule | Wildcard | Seconds | h:m:s | Max RSS (MB) | Repeats |",
        "| Stage | Experiment | Seed | Config hash | Device | torch | transformers | Wall time (s) |",
    ):
        assert header in md, header
    gpm = expected["eval"][("synthetic", "gpm")]
    assert f"| synthetic | gpm | {100 * gpm['sections']['chat']['score']:.1f} ± " in md
    assert "| *RewardBench (paper)* | *Gemma-2B-it BT* | *67.32* |" in md
    assert "| bgpm-riskaverse | KL spike | kl_k3_mean | flagged | 17 |" in md
    assert "| gpm-verifier | sampled | trained | 52.0 | [45.0, 59.0] |" in md
    assert "| gpm-verifier | greedy (secondary) | base | 40.0 |" in md
    assert "| train_reward_model | bgpm-broken | 12.4 |" in md
    for ref in re.findall(r"!\[[^\]]*\]\((figures/[^)]+)\)", md):
        assert (built["out"] / ref).is_file(), ref


def test_html_makes_no_external_reference(built):
    html = built["html"]
    for value in ATTR.findall(html):
        assert value.startswith("#") or value.startswith("data:image/png;base64,"), value[:80]
    assert "<script" not in html.lower() and "@import" not in html and "url(" not in html
    assert "default-src 'none'" in html  # CSP: the browser refuses any load even if one slipped in


def test_sample_completions_are_escaped(built):
    html = built["html"]
    assert '<script>alert("x")</script>' not in html and '<img src="http://evil' not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "&lt;img src=&quot;http://evil.example/x.png&quot;&gt; &amp; done" in html
    assert (
        "TOKENS WITH LOSS [[...]]:\n[[The]] [[answer]]" in html
    )  # nested audit.marked of train_grpo samples


def test_every_embedded_plot_is_a_real_png(built):
    payloads = DATA_URI.findall(built["html"])
    assert len(payloads) == built["summary"]["n_figures"]
    on_disk = {p.read_bytes() for p in (built["out"] / "figures").glob("*.png")}
    for payload in payloads:
        raw = base64.b64decode(payload, validate=True)
        assert raw.startswith(b"\x89PNG\r\n\x1a\n") and raw in on_disk
        image = Image.open(io.BytesIO(raw))
        image.verify()
        pixels = np.asarray(Image.open(io.BytesIO(raw)).convert("L"), dtype=float)
        assert min(pixels.shape) > 100
        assert pixels.std() > 5 and (pixels < 128).mean() > 0.005  # drawn on, not a blank canvas


def test_missing_file_tree_builds_with_not_recorded_notes(tmp_path):
    root = tmp_path / "results"
    skip = (
        "eval/bgpm-broken",
        "eval/gpm/summary.json",
        "eval/gpm/synthetic",
        "eval/gpm/rewardbench_real",
        "reward/bgpm/config.json",
        "grpo/gpm-verifier/metrics.jsonl",
        "grpo/bgpm-riskaverse/metrics.jsonl",
        "grpo/bgpm-riskaverse/samples.jsonl",
        "policy_eval",
        "benchmarks",
        "base",
    )
    write_results_tree(root, reward_steps=5, grpo_steps=5, skip=skip)
    summary = build(_config(), root, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    shown = "\n".join(texts(md))  # as a Markdown renderer shows it (escapes resolved)
    for text in (
        "eval/bgpm-broken/: variant bgpm-broken has no evaluation",
        "eval/gpm/: variant gpm has no evaluation",
        "results/reward/bgpm/config.json (the fixed reference) is missing",
        "grpo/gpm-verifier/metrics.jsonl not found",
        "grpo/bgpm-riskaverse/samples.jsonl not found",
        "policy_eval/ has no policy evaluations",
        "benchmarks/*.tsv (Snakemake benchmark files) not found",
        "base/summary.json not found",
        "No extra results directories configured (report.compare)",
    ):
        assert text in shown, text
    assert "| Run | Decoding | Policy | Verifier acc. (%)" not in md  # no before/after numbers invented
    assert summary["n_not_recorded"] >= 8


def test_empty_results_directory_still_builds(tmp_path):
    (tmp_path / "results").mkdir()
    summary = build(_config(), tmp_path / "results", tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert summary["n_figures"] == 0 and "has no reward-model variants" in md and "has no GRPO runs" in md
    assert "*Gemma-2B-it GPM d=6*" in md  # the published reference rows are still there, labelled


def test_cli_errors_name_the_problem(tmp_path, caplog):
    (tmp_path / "results").mkdir()
    good = stage_json(_config())
    paths = {"results": tmp_path / "results", "out": tmp_path / "o"}
    bad = json.loads(good)
    bad["diagnostics"]["grad_norm_max"] = 0
    code, errors = run_main(main, json.dumps(bad), caplog, **paths)
    assert code == 2 and len(errors) == 1 and "config.diagnostics.grad_norm_max" in errors[0]
    code, errors = run_main(main, good, caplog, results=tmp_path / "nope", out=tmp_path / "o")
    assert code == 2 and len(errors) == 1 and f"--results {tmp_path / 'nope'}: no such folder" in errors[0]
    strict = stage_json(_config(strict=True, compare={"x": str(tmp_path / "missing")}))
    code, errors = run_main(main, strict, caplog, **paths)
    assert code == 2 and len(errors) == 1 and "report.compare.x" in errors[0]
    assert not (tmp_path / "o").exists()


def test_real_evaluation_summary_shape_is_read(tmp_path):
    """The evaluation stage's own summarize_scores output (if present) lands in the same tables."""
    accuracy_summary = pytest.importorskip("prefpipe.evaluation.accuracy_summary")
    sections = pytest.importorskip("prefpipe.evaluation.sections")
    if not hasattr(sections, "build_section_table"):
        pytest.skip("prefpipe.evaluation.sections.build_section_table not available")
    table = sections.build_section_table(
        {"chat": ["a", "b"], "safety": ["c"]},
        cyclic_subsets=["cyc"],
        xstest_weights=eval_settings().eval.xstest_weights,
    )
    subsets = ["a"] * 4 + ["b"] * 2 + ["c"] * 4 + ["cyc"] * 3
    correct = [1, 1, 1, 0, 1, 0, 1, 0, 0, 0, 1, 1, 0]
    summary = accuracy_summary.summarize_scores(subsets, [bool(c) for c in correct], table)
    root = tmp_path / "results"
    (root / "eval" / "v").mkdir(parents=True)
    (root / "eval" / "v" / "summary.json").write_text(json.dumps({"benchmark": "synthetic", **summary}))
    tree = read_results_tree(root)
    got = dict(zip(tree.eval_sections["section"], tree.eval_sections["score"], strict=True))
    assert got["chat"] == pytest.approx((3 + 1) / 6)  # count-weighted: (3/4*4 + 1/2*2) / 6
    assert got["safety"] == pytest.approx(1 / 4)
    assert float(tree.eval_overall["cyclic"].iloc[0]) == pytest.approx(2 / 3)
