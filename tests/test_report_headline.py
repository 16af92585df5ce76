"""The headline (primary) RewardBench benchmark comes from what the evaluation stage recorded in
eval/<variant>/summary.json (`primary_benchmark`), not from a name the report assumes; the config can
override it, and disagreements or an unknown configured name are shown as warnings."""

from __future__ import annotations

import json

from support.markdown_tables import tables, texts
from support.results_tree import write_results_tree
from support.settings import report_settings

from prefpipe.report.write import build

CFG = {"figure_dpi": 40, "samples_per_run": 0}


def _settings(**cfg):
    return report_settings({**CFG, **cfg}, experiment="synthetic-default", seed=0)


def _report(tmp_path, primary, **cfg):
    root = tmp_path / "results"
    expected = write_results_tree(root, reward_steps=4, grpo_steps=4, primary=primary)
    build(_settings(**cfg), root, tmp_path / "report")
    return (tmp_path / "report" / "report.md").read_text(encoding="utf-8"), expected, root


def _has(md: str, part: str) -> bool:
    """A paragraph or heading of report.md, as rendered (escapes resolved), holds this text."""
    return any(part in text for text in texts(md))


def _ablation(md):
    return next(t for t in tables(md) if t.header[0] == "Variant" and "Fix applied to broken" in t.header)


def _chat(expected, bench, variant):
    sec = expected["eval"][(bench, variant)]["sections"]["chat"]
    return f"{100 * sec['score']:.1f} ± {100 * sec['stderr']:.1f}"


def test_recorded_primary_benchmark_is_the_headline(tmp_path):
    md, expected, _ = _report(tmp_path, "rewardbench_real")
    assert _has(
        md,
        "Headline benchmark (ablation table and charts): rewardbench_real (as recorded by the evaluation "
        "stage: primary_benchmark in eval/<variant>/summary.json of all 6 variants).",
    )
    assert _has(md, "Benchmark: rewardbench_real. Accuracy (%).")  # the ablation table's caption
    rows = {r[0]: r for r in _ablation(md).rows}
    chat = _ablation(md).header.index("Chat")
    # partial sections (a few official subsets only) carry the '*' marker; the numbers are the real benchmark's
    assert rows["gpm"][chat] == _chat(expected, "rewardbench_real", "gpm") + "*"
    assert rows["gpm"][chat] != _chat(expected, "synthetic", "gpm") + "*"
    rewardbench = next(t for t in tables(md) if t.header[:2] == ["Benchmark", "Variant"])
    assert rewardbench.rows[0][0] == "rewardbench_real"  # listed first
    assert _has(md, "Bayesian GPM ablation. Section accuracy per variant on rewardbench_real;")


def test_synthetic_recorded_as_primary(tmp_path):
    md, expected, _ = _report(tmp_path, "synthetic")
    rows = {r[0]: r for r in _ablation(md).rows}
    assert rows["gpm"][_ablation(md).header.index("Chat")] == _chat(expected, "synthetic", "gpm")
    assert _has(
        md, "Headline benchmark (ablation table and charts): synthetic (as recorded by the evaluation"
    )


def test_config_overrides_and_unknown_names_warn(tmp_path):
    md, expected, _ = _report(tmp_path / "a", "rewardbench_real", primary_benchmark="synthetic")
    assert _has(md, "Headline benchmark (ablation table and charts): synthetic (report.primary_benchmark).")
    rows = {r[0]: r for r in _ablation(md).rows}
    assert rows["gpm"][_ablation(md).header.index("Chat")] == _chat(expected, "synthetic", "gpm")

    md, _, _ = _report(tmp_path / "b", "rewardbench_real", primary_benchmark="nope")
    assert _has(md, "Warning: report.primary_benchmark = 'nope' has no scores in eval/*/summary.json")
    assert any(t.endswith("; using rewardbench_real.") for t in texts(md))


def test_without_a_recorded_primary_the_fallback_says_so(tmp_path):
    md, _, _ = _report(tmp_path, None)
    assert _has(
        md,
        "Headline benchmark (ablation table and charts): synthetic (no primary_benchmark recorded in "
        "eval/*/summary.json; the synthetic benchmark).",
    )


def test_variants_that_disagree_are_flagged(tmp_path):
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=4, grpo_steps=4, primary="rewardbench_real")
    path = root / "eval" / "gpm" / "summary.json"
    summary = json.loads(path.read_text())
    path.write_text(json.dumps({**summary, "primary_benchmark": "synthetic"}))
    build(_settings(), root, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert (
        _has(md, "Warning: Evaluation summaries name different primary benchmarks (")
        and "gpm: synthetic" in md
    )
    assert _has(  # the majority wins; the variants that name it are listed
        md,
        "Headline benchmark (ablation table and charts): rewardbench_real (as recorded by the evaluation stage: "
        "primary_benchmark in eval/<variant>/summary.json of bgpm, bgpm-broken, bgpm-broken+klweight, "
        "bgpm-broken+warmup, bt).",
    )
