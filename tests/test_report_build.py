"""The report stage end to end on fixture trees: answers first with intervals that link to their tables, only the
declared inputs read (a stale folder never shows), compared trees through the same manifest (mean ± sd), a
missing compare tree as a one-line error, a self-contained HTML with real PNGs, escaped sample text."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil

import pytest
from PIL import Image
from support.results_tree import QUALITY, RUNS, manifest, write_results_tree
from support.settings import report_settings, stage_json
from support.stages import run_main

from prefpipe.common.config import ConfigError
from prefpipe.common.stats import wilson_interval
from prefpipe.report.__main__ import main
from prefpipe.report.document import Document, Section, Table
from prefpipe.report.html import CELL_CHARS, render_html
from prefpipe.report.stats import wilson
from prefpipe.report.write import build

DATA_URI = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')
ATTR = re.compile(r'\b(?:src|href|action|poster|srcset)\s*=\s*"([^"]*)"', re.IGNORECASE)


def _config(**extra):
    return report_settings({"figure_dpi": 50, **extra}, experiment="synthetic-default", seed=0)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("report")
    write_results_tree(base / "results", reward_steps=20, grpo_steps=30)
    write_results_tree(base / "seed1", seed=1, shift=0.02, reward_steps=5, grpo_steps=5)
    # a stale variant and run from an earlier configuration, not among the declared inputs
    shutil.copytree(base / "results" / "eval" / "gpm", base / "results" / "eval" / "stale-variant")
    shutil.copytree(
        base / "results" / "policy_eval" / "gpm-verifier", base / "results" / "policy_eval" / "old-run"
    )
    cfg = _config(compare={"seed1": str(base / "seed1")})
    out = base / "results" / "report"
    summary = build(cfg, base / "results", out, manifest())
    return {
        "out": out,
        "summary": summary,
        "html": (out / "report.html").read_text(encoding="utf-8"),
        "md": (out / "report.md").read_text(encoding="utf-8"),
    }


def _answers(html: str) -> str:
    return html.split('<section id="answers">', 1)[1].split("</section>", 1)[0]


def test_answers_come_first_with_intervals_and_working_links(built):
    html = built["html"]
    body = html.split("<body>", 1)[1]
    assert (
        body.index('<section id="answers">') < body.index("<nav>") < body.index('<section id="rewardbench">')
    )
    answers = _answers(html)
    items = re.findall(r"<li>(.*?)</li>", answers)
    assert len(items) >= 4
    for item in items:
        assert re.search(r"\d+\.\d% \[\d+\.\d, \d+\.\d\]", item), item  # a number with its 95% interval
        anchor = re.search(r'href="#([^"]+)"', item).group(1)
        assert f'id="{anchor}"' in html, anchor
    text = re.sub(r"<[^>]+>", "", answers)
    assert "Best reward head overall on synthetic: gpm" in text
    assert "Cyclic set (n=" in text and "GPM learns it" in text  # fixture GPM cyclic 97%
    assert "Bayesian fixes vs bgpm-broken" in text
    assert "GRPO run gpm-verifier" in text and "sampled" in text and "greedy" in text
    assert "Reward-model-only" not in text  # no run trains on the reward model alone


def test_only_declared_inputs_are_read(built):
    for text in (built["html"], built["md"]):
        assert "stale-variant" not in text and "old-run" not in text
    for variant in QUALITY:
        assert f">{variant}</td>" in built["html"], variant


def test_compared_trees_show_mean_and_sd(built):
    md = built["md"]
    assert "## Across seeds and experiments" in md
    assert re.search(r"\| synthetic-default \| [^|]+ \| gpm \| 2 \| \d+\.\d ± \d+\.\d \(n=2\)", md)


def test_missing_compare_tree_is_a_one_line_error_naming_it(tmp_path, caplog):
    write_results_tree(tmp_path / "results", reward_steps=3, grpo_steps=3)
    cfg = _config(compare={"seed7": str(tmp_path / "nope")})
    with pytest.raises(ConfigError, match=r"^report\.compare\.seed7: .*nope is not a directory$"):
        build(cfg, tmp_path / "results", tmp_path / "out", manifest())
    code, errors = run_main(
        main,
        stage_json(cfg),
        caplog,
        results=str(tmp_path / "results"),
        inputs=manifest().to_json(),
        out=str(tmp_path / "o"),
    )
    assert code == 2 and len(errors) == 1 and "report.compare.seed7" in errors[0] and "\n" not in errors[0]
    assert not (tmp_path / "o").exists()


def test_outputs_figures_and_no_external_reference(built):
    out, html = built["out"], built["html"]
    for name in ("report.html", "report.md", "summary.json", "config.json", "figures"):
        assert (out / name).exists(), name
    payloads = DATA_URI.findall(html)
    assert len(payloads) == built["summary"]["n_figures"] == len(list((out / "figures").glob("*.png")))
    for payload in payloads:
        image = Image.open(io.BytesIO(base64.b64decode(payload)))
        assert min(image.size) >= 80  # figure_dpi 50 here
    for value in ATTR.findall(html):
        assert value.startswith("#") or value.startswith("data:image/png;base64,"), value[:80]
    assert "<script" not in html.lower() and "default-src 'none'" in html
    assert json.loads((out / "summary.json").read_text())["n_sections"] >= 8


def test_sample_completions_are_escaped(built):
    html = built["html"]
    assert '<script>alert("x")</script>' not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html


def test_wilson_matches_the_policy_evaluation_interval():
    for k, n in ((0, 10), (53, 99), (240, 400), (400, 400)):
        assert wilson(k, n) == pytest.approx(wilson_interval(k, n), abs=1e-12)


def test_long_cells_are_shortened_with_the_full_text_on_hover():
    long = "head.bayes.kl_warmup_steps=48; head.bayes.max_kl_weight=0.0001; head.bayes.kl_mean=normalized"
    doc = Document("t", "s", [Section("A", [Table("T", ["Setting"], [[long]])])])
    html = render_html(doc)
    assert f'title="{long}"' in html and f">{long}<" not in html
    assert f">{long[: CELL_CHARS - 1]}…<" in html


def test_length_bias_section_only_when_recorded(tmp_path):
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=3, grpo_steps=3)
    cfg = _config()
    build(cfg, root, tmp_path / "a", manifest())
    assert "## Length bias" not in (tmp_path / "a" / "report.md").read_text()
    for variant in QUALITY:
        path = root / "eval" / variant / "summary.json"
        summary = json.loads(path.read_text())
        ci = [0.5, 0.7]
        summary["benchmarks"]["synthetic"].update(
            length_split={
                "chosen_longer": {"n": 50, "accuracy": 0.9, "ci95": [0.79, 0.96]},
                "chosen_shorter": {"n": 40, "accuracy": 0.3, "ci95": [0.18, 0.45]},
                "equal": {"n": 10, "accuracy": 0.6, "ci95": [0.31, 0.83]},
            },
            longer_pick_rate=0.75,
            longer_pick_ci95=[0.65, 0.83],
            longer_wins_baseline={"accuracy": 0.6, "ci95": ci},
            length_controlled_accuracy={"accuracy": 0.58, "ci95": [0.51, 0.64], "n": 100},
            # a pairwise head has no reward per response: null, shown as a dash
            reward_length_correlation=None if variant != "bt" else {"pearson": 0.4512, "pearson_ci95": [0.4, 0.5],
                                                                     "spearman": 0.43},
            margin_length_correlation={"pearson": -0.031, "pearson_ci95": [-0.12, 0.06], "spearman": 0.0},
        )  # fmt: skip
        path.write_text(json.dumps(summary))
    build(cfg, root, tmp_path / "b", manifest())
    md = (tmp_path / "b" / "report.md").read_text()
    assert "## Length bias" in md and "| gpm | 90.0% [79.0, 96.0] (n=50) | 30.0% [18.0, 45.0] (n=40) |" in md
    assert "Length bias on synthetic: models pick the longer response 75.0%" in md
    assert "at equal length (length-controlled accuracy) they score" in md
    assert "| bt | 58.0% [51.0, 64.0] | 75.0% [65.0, 83.0] | +0.45 [+0.40, +0.50] (ρ +0.43) |" in md
    assert "| gpm | 58.0% [51.0, 64.0] | 75.0% [65.0, 83.0] | – | -0.03 [-0.12, +0.06] (ρ +0.00) |" in md
    html = (tmp_path / "b" / "report.html").read_text()
    assert (
        "Length-controlled accuracy and length correlation: synthetic" in html
        and "+0.45 [+0.40, +0.50]" in html
    )


def test_runs_in_the_manifest_only(tmp_path):
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=3, grpo_steps=3)
    only = manifest()
    only.files["policy_eval"] = {r: p for r, p in only.files["policy_eval"].items() if r == next(iter(RUNS))}
    build(_config(), root, tmp_path / "out", only)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "GRPO run gpm-verifier" in md and "GRPO run bgpm-riskaverse" not in md


def test_one_reward_head_is_reported_without_a_ranking(tmp_path):
    """With one head on the benchmark there is nothing to be "ahead of": its score, no verdict."""
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=3, grpo_steps=3)
    one = manifest()
    keep = next(iter(one.files["eval"]))
    one.files["eval"] = {keep: one.files["eval"][keep]}
    build(_config(), root, tmp_path / "out", one)
    md = (tmp_path / "out" / "report.md").read_text()
    assert f"- Reward head overall on synthetic: {keep} " in md
    assert "Best reward head" not in md and "ahead of every other head" not in md


def test_the_build_logs_each_section_so_its_log_is_never_silent_for_long(tmp_path, caplog):
    """The report stage's log: a line before the sections, a progress line naming the section as they are built
    (first and last at least), and one before the HTML is written (a default run's report.log had 10.7 s of
    silence between its first and last line)."""
    write_results_tree(tmp_path / "results", reward_steps=3, grpo_steps=3)
    caplog.set_level("INFO", logger="prefpipe")
    build(_config(), tmp_path / "results", tmp_path / "out", manifest())
    lines = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("read ") and "building" in m for m in lines), lines
    progress = [m for m in lines if m.startswith("report section ")]
    assert progress[0].startswith("report section 1/") and "part answers" in progress[0], progress
    assert re.match(r"report section (\d+)/\1 ", progress[-1]), progress
    assert any(m.startswith("writing HTML") for m in lines), lines


def test_without_its_broken_variant_the_ablation_names_the_farthest_one_for_what_it_is(tmp_path):
    """An experiment that trains only some Bayesian variants (uncertainty.yaml: bgpm and bgpm-kl) has no
    variant with every fix off: the one the rows are compared against is named as the farthest from the
    reference, never "broken: every fix off"."""
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=3, grpo_steps=3)
    files = manifest()
    files.files["eval"] = {v: p for v, p in files.files["eval"].items() if v != "bgpm-broken"}
    build(_config(), root, tmp_path / "out", files)
    md = (tmp_path / "out" / "report.md").read_text()
    section = md.split("## Bayesian GPM ablation", 1)[1].split("\n## ", 1)[0]
    assert "every fix off" not in md
    assert "the variant farthest from bgpm in settings (no broken variant trained)" in section
    answers = md.split("\n## Answers\n", 1)[1].split("\n## ", 1)[0]
    assert "Bayesian fixes vs bgpm-broken+" in answers and "farthest from bgpm in settings" in answers

    full = tmp_path / "full"
    build(_config(), root, full, manifest())
    assert "| bgpm-broken | broken: every fix off |" in (full / "report.md").read_text()


def test_the_grpo_section_shows_where_the_step_time_goes(built):
    """The phase table: each run's mean share per phase, from the metrics rows (rollout 1.0 of 1.8 s, reward 0.2,
    log-probs 0.1, update 0.4, sync 0, other 0.1 in the fixture)."""
    md = built["md"]
    assert "Where the step time goes" in md
    table = md.split("Where the step time goes", 1)[1].split("\n\n", 2)[1]
    body = [line for line in table.splitlines() if line.startswith("|")][2:]
    assert body, table
    for line in body:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1:] == ["1.8", "56%", "11%", "6%", "22%", "0%", "6%"], line
