"""The Bayesian GPM ablation: the paired bootstrap against independent computations (the evaluation's own
scoring on every resample, scipy's paired bootstrap, the closed-form bootstrap variance), the verdicts, and the
stage on evaluation outputs written with the evaluation's scoring."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats
from support.eval_tree import config_table, decisions, subsets_column, write_eval
from support.settings import pipeline, stage_json
from support.stages import run_main

from prefpipe import ablation as ablation_stage
from prefpipe.common.stats import percentile_interval
from prefpipe.evaluation.accuracy_summary import OVERALL, summarize_scores
from prefpipe.evaluation.paired_bootstrap import (
    draw,
    point_scores,
    recorded_table,
    resampled_scores,
)
from prefpipe.evaluation.sections import custom_section_table


def test_the_recorded_table_reproduces_the_evaluations_scores():
    correct = decisions({"chat-arith": 0.9, "reasoning-multistep": 0.55}, seed=1)
    block = summarize_scores(subsets_column(), list(correct), config_table())
    points = point_scores(subsets_column(), list(correct), recorded_table(block, "test"))
    assert points[OVERALL] == block[OVERALL]
    for section in ("chat", "chat_hard", "safety", "reasoning"):
        assert points[section] == block["sections"][section]["score"]
    assert "cyclic" not in points and set(points) == {OVERALL, "chat", "chat_hard", "safety", "reasoning"}


def test_vectorised_resamples_equal_the_evaluations_scoring_on_each_resample():
    """Brute force: each resample's rows scored by summarize_scores (the evaluation's code path)."""
    subsets = subsets_column()
    correct = decisions(0.7, seed=2)
    table = config_table()
    draws = draw(subsets, 40, np.random.default_rng(0))
    fast = resampled_scores(correct, draws, table)
    for b in range(40):
        rows = np.concatenate([draws[s][b] for s in draws])
        slow = summarize_scores([subsets[i] for i in rows], list(correct[rows]), table)
        assert fast[OVERALL][b] == pytest.approx(slow[OVERALL], abs=1e-12)
        for section, block in slow["sections"].items():
            assert fast[section][b] == pytest.approx(block["score"], abs=1e-12)
    # stratified: every resample keeps each subset's rows inside that subset and its row count
    for subset, rows in draws.items():
        assert rows.shape == (40, subsets.count(subset))
        assert {subsets[i] for i in rows.ravel()} == {subset}


def test_a_paired_interval_matches_scipys_paired_bootstrap():
    """One subset, no sections (the pooled accuracy): the stratified bootstrap is scipy's paired bootstrap of
    the difference of two means; their percentile intervals agree up to Monte Carlo noise."""
    rng = np.random.default_rng(5)
    n = 150
    a = rng.random(n) < 0.75
    b = np.where(rng.random(n) < 0.7, a, ~a)  # correlated with a, as two variants on the same pairs are
    subsets = ["only"] * n
    table = custom_section_table({}, "test")
    draws = draw(subsets, 20000, np.random.default_rng(1))
    diff = resampled_scores(a, draws, table)[OVERALL] - resampled_scores(b, draws, table)[OVERALL]
    ours = percentile_interval(diff, 0.95)
    theirs = stats.bootstrap(
        (a.astype(float), b.astype(float)),
        lambda x, y: np.mean(x) - np.mean(y),
        paired=True,
        vectorized=False,
        n_resamples=20000,
        method="percentile",
        confidence_level=0.95,
        random_state=np.random.default_rng(2),
    ).confidence_interval
    assert ours[0] == pytest.approx(theirs.low, abs=0.01)
    assert ours[1] == pytest.approx(theirs.high, abs=0.01)
    # and pairing matters: the unpaired interval of the same difference is wider
    unpaired = math.sqrt(a.mean() * (1 - a.mean()) / n + b.mean() * (1 - b.mean()) / n)
    assert (ours[1] - ours[0]) < 2 * 1.96 * unpaired


def test_the_bootstrap_variance_of_the_section_average_matches_its_closed_form():
    """Var of the stratified bootstrap of the four-section average: sum over sections (1/K^2) sum over its
    subsets (w_s / W)^2 * plug-in var of the per-pair difference / n_s."""
    subsets = subsets_column()
    a = decisions(0.75, seed=3)
    b = np.where(np.random.default_rng(4).random(len(a)) < 0.6, a, ~a)
    table = config_table()
    block = summarize_scores(subsets, list(a), table)
    draws = draw(subsets, 40000, np.random.default_rng(6))
    diff = resampled_scores(a, draws, table)[OVERALL] - resampled_scores(b, draws, table)[OVERALL]
    d = a.astype(float) - b.astype(float)
    col = np.array(subsets)
    used = block["overall_sections"]
    var = 0.0
    for section in used:
        weights = block["sections"][section]["weights"]
        total = sum(weights.values())
        for subset, w in weights.items():
            ds = d[col == subset]
            var += (w / total) ** 2 * ds.var() / len(ds) / len(used) ** 2
    assert diff.std() == pytest.approx(math.sqrt(var), rel=0.03)
    # the centre is the point difference
    point = point_scores(subsets, list(a), table)[OVERALL] - point_scores(subsets, list(b), table)[OVERALL]
    assert diff.mean() == pytest.approx(point, abs=0.002)


def test_verdicts_and_the_fix_that_matters_most():
    from prefpipe.evaluation.ablation_contrasts import most_important, verdict

    assert verdict((0.01, 0.2)) == "matters"
    assert verdict((-0.2, -0.01)) == "hurts"
    assert verdict((-0.01, 0.2)) == "neutral"

    def row(fix, kind, effect, verdict_):
        return {"fix": fix, "kind": kind, "items": {OVERALL: {"fix_effect": effect, "verdict": verdict_}}}

    rows = [
        row("a", "added", 0.30, "matters"),
        row("b", "added", 0.10, "matters"),
        row("c", "added", 0.50, "neutral"),
        row("a", "removed", 0.01, "neutral"),
        row("b", "removed", 0.20, "matters"),
    ]
    assert most_important(rows) == {"added": "a", "removed": "b", "overall": "a"}
    assert most_important([row("a", "added", 0.3, "neutral")]) == {
        "added": None,
        "removed": None,
        "overall": None,
    }


def _write_variants(root, broken=0.55, fixed=0.8):
    """bgpm-broken and bgpm, one fix that helps a lot (klmean), one that does nothing (prior)."""
    eval_dir = root / "eval"
    write_eval(eval_dir, "bgpm-broken", decisions(broken, seed=10))
    write_eval(eval_dir, "bgpm", decisions(fixed, seed=11))
    write_eval(eval_dir, "bgpm-fix-klmean", decisions(fixed, seed=12))
    write_eval(eval_dir, "bgpm-fix-prior", decisions(broken, seed=10))  # the broken decisions exactly
    write_eval(eval_dir, "bgpm-no-klmean", decisions(broken, seed=13))
    write_eval(eval_dir, "bgpm-no-prior", decisions(fixed, seed=11))
    return eval_dir


ONLY = ["bgpm", "bgpm-broken", "bgpm-fix-klmean", "bgpm-fix-prior", "bgpm-no-klmean", "bgpm-no-prior"]


def test_the_stage_writes_rows_verdicts_and_the_most_important_fix(tmp_path):
    eval_dir = _write_variants(tmp_path)
    settings = pipeline({"reward": {"only": ONLY}, "grpo": {"enabled": False}}).ablation
    assert [c[:2] for c in settings.contrasts()] == [
        ("klmean", "added"),
        ("prior", "added"),
        ("klmean", "removed"),
        ("prior", "removed"),
    ]
    code, _ = run_main(ablation_stage.main, stage_json(settings), eval=eval_dir, out=tmp_path / "ablation")
    assert code == 0
    summary = json.loads((tmp_path / "ablation" / "summary.json").read_text())
    rows = {(r["fix"], r["kind"]): r["items"] for r in summary["rows"]}
    assert rows[("klmean", "added")][OVERALL]["verdict"] == "matters"
    assert rows[("klmean", "removed")][OVERALL]["verdict"] == "matters"
    assert (
        rows[("klmean", "removed")][OVERALL]["effect"]
        < 0
        < rows[("klmean", "removed")][OVERALL]["fix_effect"]
    )
    same = rows[("prior", "added")][OVERALL]
    assert same["effect"] == 0 and same["interval"] == [0, 0] and same["verdict"] == "neutral"
    assert summary["most_important"]["overall"] == "klmean"
    assert summary["verdicts"]["added"] == {"klmean": "matters", "prior": "neutral"}
    assert summary["skipped"] == [
        f"{f}.{k}" for f in ("klweight", "logvar", "warmup") for k in ("added", "removed")
    ]
    assert set(rows[("klmean", "added")]) == {OVERALL, "chat", "chat_hard", "safety", "reasoning"}
    assert summary["variants"]["bgpm"]["ece"] is not None
    md = (tmp_path / "ablation" / "summary.md").read_text()
    assert "| klmean | added | bgpm-fix-klmean |" in md and "matters" in md
    # the same seed gives the same bytes
    again = tmp_path / "again"
    assert run_main(ablation_stage.main, stage_json(settings), eval=eval_dir, out=again)[0] == 0
    first = (tmp_path / "ablation" / "summary.json").read_bytes()
    assert first == (again / "summary.json").read_bytes()
    assert "wall_time_s" in json.loads((again / "timing.json").read_text())


def test_files_that_do_not_belong_together_are_refused(tmp_path, caplog):
    eval_dir = _write_variants(tmp_path)
    settings = pipeline({"reward": {"only": ONLY}, "grpo": {"enabled": False}}).ablation
    summary = json.loads((eval_dir / "bgpm" / "summary.json").read_text())
    summary["benchmarks"]["synthetic"]["overall"] = 0.123
    (eval_dir / "bgpm" / "summary.json").write_text(json.dumps(summary))
    code, errors = run_main(
        ablation_stage.main, stage_json(settings), caplog, eval=eval_dir, out=tmp_path / "o"
    )
    assert code == 2 and "bgpm/summary.json: recorded overall 0.123" in errors[0]
    assert not (tmp_path / "o" / "summary.json").exists()


def test_heads_as_fine_tuned_get_their_own_contrasts(tmp_path, caplog):
    """Where the evaluation scored each head as fine-tuned too, the same contrasts on those decisions: here the
    refit evened the saved models out (prior does nothing) while the heads as fine-tuned separate (prior
    matters), and the two protocols' verdicts differ accordingly."""
    eval_dir = tmp_path / "eval"
    broken, fixed = decisions(0.55, seed=10), decisions(0.8, seed=11)
    saved = decisions(0.75, seed=20)
    write_eval(eval_dir, "bgpm-broken", saved, finetuned=broken)
    write_eval(eval_dir, "bgpm", saved, finetuned=fixed)
    write_eval(eval_dir, "bgpm-fix-prior", saved, finetuned=decisions(0.8, seed=12))
    write_eval(eval_dir, "bgpm-no-prior", saved, finetuned=decisions(0.55, seed=13))
    only = ["bgpm", "bgpm-broken", "bgpm-fix-prior", "bgpm-no-prior"]
    settings = pipeline({"reward": {"only": only}, "grpo": {"enabled": False}}).ablation
    out = tmp_path / "ablation"
    assert run_main(ablation_stage.main, stage_json(settings), eval=eval_dir, out=out)[0] == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdicts"] == {"added": {"prior": "neutral"}, "removed": {"prior": "neutral"}}
    ft = summary["as_finetuned"]
    assert ft["verdicts"] == {"added": {"prior": "matters"}, "removed": {"prior": "matters"}}
    assert ft["most_important"]["overall"] == "prior"
    # the point scores are the evaluation's scoring of the fine-tuned decisions, the ECE its recorded one
    table = config_table()
    assert ft["variants"]["bgpm"]["scores"][OVERALL]["score"] == pytest.approx(
        summarize_scores(subsets_column(), list(fixed), table)[OVERALL], abs=1e-12
    )
    assert ft["variants"]["bgpm"]["ece"] == 0.2
    added = {r["fix"]: r for r in ft["rows"] if r["kind"] == "added"}["prior"]["items"][OVERALL]
    assert added["fix_effect"] == pytest.approx(
        point_scores(subsets_column(), list(decisions(0.8, seed=12)), table)[OVERALL]
        - point_scores(subsets_column(), list(broken), table)[OVERALL]
    )
    md = (out / "summary.md").read_text()
    # the heads as fine-tuned are the headline (the verdicts are read on them), the saved models follow
    assert (
        0
        < md.index("## As fine-tuned (each head before the refit)")
        < md.index("## Saved models (after the head refit)")
    )
    # a recorded fine-tuned overall that its decisions do not give is refused, as for the saved heads
    summary_path = eval_dir / "bgpm" / "summary.json"
    top = json.loads(summary_path.read_text())
    top["benchmarks"]["synthetic"]["extra_heads"]["as_finetuned"]["overall"] = 0.123
    summary_path.write_text(json.dumps(top))
    code, errors = run_main(
        ablation_stage.main, stage_json(settings), caplog, eval=eval_dir, out=tmp_path / "o"
    )
    assert code == 2 and "recorded overall 0.123" in errors[0]


def test_the_settings_pair_every_fix_and_refuse_unknown_variants():
    from prefpipe.common.config import ConfigError

    full = pipeline().ablation
    assert len(full.contrasts()) == 10
    for fix, pair in full.fixes.items():
        assert pair.added == f"bgpm-fix-{fix}" and pair.removed == f"bgpm-no-{fix}"
    assert pipeline({"reward": {"only": ["bt", "gpm", "bgpm"]}}).ablation is None
    assert pipeline({"ablation": {"enabled": False}}).ablation is None
    with pytest.raises(ConfigError, match=r"ablation\.reference = 'bgpm-nope' is not in reward\.variants"):
        pipeline({"ablation": {"reference": "bgpm-nope"}})


def test_the_report_takes_the_ablation_reference_from_its_one_owner():
    """ablation.reference is the only key for it: the report's settings (and its stage --config) carry the
    value from there, and a report.ablation.reference key is refused naming the key."""
    from prefpipe.common.config import ConfigError
    from prefpipe.settings.pipeline import load_stage
    from prefpipe.settings.report import ReportSettings

    settings = pipeline({"ablation": {"reference": "bgpm-no-prior", "enabled": False}})
    assert settings.report.ablation.reference == "bgpm-no-prior"
    assert pipeline().report.ablation.reference == pipeline().ablation.reference == "bgpm"
    rebuilt = load_stage(ReportSettings, json.loads(stage_json(settings.report)), "config")
    assert rebuilt.ablation.reference == "bgpm-no-prior"
    with pytest.raises(ConfigError, match=r"report\.ablation.*'reference' was unexpected"):
        pipeline({"report": {"ablation": {"reference": "bgpm"}}})
    with pytest.raises(ConfigError, match=r"config\.ablation: missing key\(s\) reference"):
        loose = json.loads(stage_json(settings.report))
        del loose["ablation"]["reference"]
        load_stage(ReportSettings, loose, "config")


def test_each_removal_variant_reverts_exactly_one_fix_of_the_reference():
    """bgpm-no-<fix> differs from bgpm in exactly the keys bgpm-fix-<fix> changes in bgpm-broken, with the
    broken values (so `added` and `removed` rows isolate the same fix)."""
    settings = pipeline()
    bayes = {v: vars(settings.reward[v].head.bayes) for v in settings.reward if v.startswith("bgpm")}
    for fix in settings.ablation.fixes:
        added = {k for k in bayes["bgpm"] if bayes[f"bgpm-fix-{fix}"][k] != bayes["bgpm-broken"][k]}
        removed = {k for k in bayes["bgpm"] if bayes[f"bgpm-no-{fix}"][k] != bayes["bgpm"][k]}
        assert added == removed and added, fix
        for key in removed:
            assert bayes[f"bgpm-no-{fix}"][key] == bayes["bgpm-broken"][key]
            assert bayes[f"bgpm-fix-{fix}"][key] == bayes["bgpm"][key]
