"""Open the report in headless Chromium the way people see it: at 1366x768 and 1920x1080 nothing overflows the
width (the page or any table), every image decodes, and the scoreboard with its verdicts sits on the first screen,
its figures as the browser shows them equal to the summaries' (a control page with a too-wide table, and one with
the scoreboard pushed down, show the checks fail). With the network blocked, the page requests nothing from any host
(Chromium's own net log, with a page that does make requests as a control).

Chromium: nothing here installs it; `sudo bash scripts/ci_system_deps.sh` does (CI runs it in .ci/run). Without it
the tests skip naming why, except under CI (CI=true), where a missing browser is a failure.

The screenshot stays under pytest's tmp dir; with PREFPIPE_ARTIFACTS=1 it is also copied to
results/test_artifacts/report_screenshot.png (PREFPIPE_ARTIFACTS=<folder>: into that folder), a stable path a
closing note can cite. The path is printed either way (`pytest -s`) and recorded as the test property
`screenshot`."""

from __future__ import annotations

import html as html_lib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from support.results_tree import manifest, write_results_tree, write_seed_trees
from support.scoreboard import head_cells, unmarked
from support.settings import report_settings
from support.tiers import need
from support.uncertainty_tree import ENSEMBLES, HEADS, NEEDED, add_active_learning, add_blocks, al_summary

from prefpipe.report.write import build

REPO = Path(__file__).resolve().parents[1]
SCREENSHOT_NAME = "report_screenshot.png"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WINDOW = (1280, 3000)
# Chromium's own background traffic (component updater, sign-in, network time) has this initiator; requests a
# page makes from a file:// document carry initiator "null" and a file:// network isolation key.
BROWSER_INITIATOR = "not an origin"


def _find_browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


@pytest.fixture(scope="module")
def browser() -> str:
    found = _find_browser()
    if found is None:
        need(
            "headless Chromium not found (Debian: sudo bash scripts/ci_system_deps.sh, or apt-get install -y chromium)"
        )
    return found


def open_page(browser: str, page: Path, work: Path) -> tuple[Path, list[dict]]:
    """Screenshot a local page with every host unresolvable; return the PNG and the URL requests in the net log."""
    work.mkdir(parents=True, exist_ok=True)
    shot, netlog = work / "shot.png", work / "net.json"
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={work / 'profile'}",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--log-net-log={netlog}",
        f"--screenshot={shot}",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        page.resolve().as_uri(),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=90)
    assert shot.is_file(), f"no screenshot; chromium exit {result.returncode}: {result.stderr[-2000:]}"
    log = json.loads(netlog.read_text(encoding="utf-8"))
    names = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    requests = [
        e["params"]
        for e in log["events"]
        if names.get(e["type"]) == "URL_REQUEST_START_JOB" and "url" in e.get("params", {})
    ]
    return shot, requests


def keep_screenshot(shot: Path) -> Path:
    """Where the screenshot can be found after the run: a copy under PREFPIPE_ARTIFACTS (atomically
    replaced), else the file in pytest's tmp dir."""
    target = os.environ.get("PREFPIPE_ARTIFACTS", "").strip()
    if not target:
        return shot
    folder = REPO / "results" / "test_artifacts" if target.lower() in ("1", "true", "yes") else Path(target)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{SCREENSHOT_NAME}.{os.getpid()}.tmp"  # plain open(): the file gets the umask's mode
    tmp.write_bytes(shot.read_bytes())
    os.replace(tmp, folder / SCREENSHOT_NAME)
    return folder / SCREENSHOT_NAME


def page_requests(requests: list[dict]) -> list[str]:
    """URLs the page itself asked for (anything but Chromium's own background requests and local schemes)."""
    return [
        r["url"]
        for r in requests
        if not r["url"].startswith(("file:", "data:", "chrome:", "about:", "blob:"))
        and (r.get("initiator") != BROWSER_INITIATOR or "file://" in r.get("network_isolation_key", ""))
    ]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("chromium")
    write_results_tree(base / "results", reward_steps=10, grpo_steps=20)
    cfg = report_settings({"figure_dpi": 60}, experiment="synthetic-default", seed=0)
    build(cfg, base / "results", base / "results" / "report", manifest())
    return base / "results" / "report" / "report.html"


def test_report_renders_offline_without_requests(browser, report, tmp_path, record_property):
    shot, requests = open_page(browser, report, tmp_path / "real")
    kept = keep_screenshot(shot)
    assert kept.read_bytes() == shot.read_bytes()
    record_property("screenshot", str(kept))
    print(f"\nreport screenshot: {kept} ({kept.stat().st_size} bytes)")
    assert page_requests(requests) == []
    # The same page without its Content-Security-Policy: proves the markup itself references nothing external
    # (with the CSP a stray external URL would be blocked before reaching the network log).
    html = report.read_text(encoding="utf-8")
    stripped = report.with_name("report_no_csp.html")
    stripped.write_text(
        html.replace('http-equiv="Content-Security-Policy"', 'name="csp-removed"'), encoding="utf-8"
    )
    _, requests = open_page(browser, stripped, tmp_path / "nocsp")
    assert page_requests(requests) == []

    image = Image.open(shot)
    assert image.size == WINDOW
    gray = np.asarray(image.convert("L"), dtype=float)
    assert gray.std() > 10  # text, tables and plots, not a blank page
    assert (gray < 128).mean() > 0.01
    rgb = np.asarray(image.convert("RGB")).astype(np.int32)
    packed = (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]
    assert len(np.unique(packed)) > 50  # colour plots rendered, not just text


def test_net_log_check_catches_a_page_that_fetches(browser, tmp_path):
    page = tmp_path / "fetching.html"
    page.write_text(
        '<!DOCTYPE html><html><head><link rel="stylesheet" href="https://fonts.example.org/f.css"></head>'
        '<body><p>control</p><img src="http://cdn.example.com/x.png"></body></html>',
        encoding="utf-8",
    )
    _, requests = open_page(browser, page, tmp_path / "control")
    assert sorted(page_requests(requests)) == [
        "http://cdn.example.com/x.png",
        "https://fonts.example.org/f.css",
    ]


PROBE = """<script>
window.addEventListener('load', () => {
  const board = document.getElementById('scoreboard');
  const box = board ? board.getBoundingClientRect() : null;
  const uses = document.getElementById('scoreboard-uses');
  const result = {
    scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
    innerHeight: window.innerHeight, boardBottom: box ? box.bottom : null, boardTop: box ? box.top : null,
    usesBottom: uses ? uses.getBoundingClientRect().bottom : null,
    boards: [...document.querySelectorAll('table.board')].map(t => [...t.rows].map(
      r => [...r.cells].map(c => c.textContent))),
    wideTables: [...document.querySelectorAll('.tablewrap')].filter(e => e.scrollWidth > e.clientWidth + 1).length,
    badImages: [...document.images].filter(i => !i.complete || i.naturalWidth === 0).length,
    images: document.images.length,
  };
  const out = document.createElement('pre'); out.id = 'layout-probe'; out.textContent = JSON.stringify(result);
  document.body.appendChild(out);
});
</script>"""
SIZES = [(1366, 768), (1920, 1080)]


def layout(browser: str, page: Path, size: tuple[int, int], work: Path) -> dict:
    """Layout facts of a page at a window size, from a copy with a measuring script (the report itself runs no
    scripts: its CSP is dropped in the copy)."""
    work.mkdir(parents=True, exist_ok=True)
    probe = work / "probe.html"
    html = page.read_text(encoding="utf-8").replace(
        'http-equiv="Content-Security-Policy"', 'name="csp-removed"'
    )
    probe.write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        f"--user-data-dir={work / 'profile'}",
        "--virtual-time-budget=5000",
        f"--window-size={size[0]},{size[1]}",
        "--dump-dom",
        probe.resolve().as_uri(),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="layout-probe">(.*?)</pre>', result.stdout)
    assert found, f"no layout probe in the DOM; chromium exit {result.returncode}: {result.stderr[-1500:]}"
    return json.loads(html_lib.unescape(found.group(1)))


def check_layout(facts: dict) -> None:
    """What people see: no horizontal overflow, no table wider than its box, every image drawn, the scoreboard
    (its tables and verdicts) on the first screen."""
    assert facts["scrollWidth"] <= facts["innerWidth"], f"page overflows: {facts}"
    assert facts["wideTables"] == 0, f"{facts['wideTables']} table(s) wider than the page: {facts}"
    assert facts["images"] > 0 and facts["badImages"] == 0, f"missing or empty images: {facts}"
    assert facts["boardBottom"] is not None and facts["boardBottom"] <= facts["innerHeight"], (
        f"scoreboard not within the first screen: {facts}"
    )


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_report_fits_the_screen_with_the_scoreboard_first(browser, report, size, tmp_path):
    check_layout(layout(browser, report, size, tmp_path))


def test_the_scoreboard_shows_the_summaries_figures(browser, report, tmp_path):
    """The heads board as Chromium renders it (text content of each cell) holds each head's figures as the
    evaluation summaries record them (computed from the files, not by the report's code)."""
    facts = layout(browser, report, SIZES[0], tmp_path)
    header, *rows = facts["boards"][0]
    assert header[0] == "Head" and len(rows) == 3
    results = report.parents[1]
    for row in rows:
        shown = dict(zip(header[1:], (unmarked(c) for c in row[1:]), strict=True))
        assert shown == head_cells(results, row[0]), row[0]


def test_fold_check_fails_when_the_scoreboard_is_pushed_below_it(browser, report, tmp_path):
    tall = '<div style="height: 900px">spacer</div>'
    page = report.with_name("report_pushed.html")
    page.write_text(
        report.read_text(encoding="utf-8").replace("<body>", "<body>" + tall, 1), encoding="utf-8"
    )
    facts = layout(browser, page, SIZES[0], tmp_path)
    with pytest.raises(AssertionError, match="scoreboard not within the first screen"):
        check_layout(facts)


def test_layout_check_fails_on_a_table_wider_than_the_page(browser, report, tmp_path):
    cells = "".join(f'<td style="white-space:nowrap">column_{i}_{"w" * 40}</td>' for i in range(12))
    wide = f'<div class="tablewrap"><table><tr>{cells}</tr></table></div>'
    page = report.with_name("report_wide_table.html")
    page.write_text(report.read_text(encoding="utf-8").replace("<nav>", wide + "<nav>"), encoding="utf-8")
    facts = layout(browser, page, SIZES[0], tmp_path)
    with pytest.raises(AssertionError, match="wider than the page"):
        check_layout(facts)


@pytest.fixture(scope="module")
def uncertainty_report(tmp_path_factory) -> Path:
    """The report of an uncertainty experiment's tree: uncertainty blocks, a deep ensemble, active learning."""
    base = tmp_path_factory.mktemp("chromium-uses")
    root = base / "results"
    write_results_tree(root, reward_steps=10, grpo_steps=20)
    add_blocks(root, HEADS, ENSEMBLES)
    add_active_learning(root, al_summary(NEEDED, whole_pool=False))
    files = manifest()
    files.files["eval_ensemble"] = {name: f"eval_ensemble/{name}/summary.json" for name in ENSEMBLES}
    cfg = report_settings({"figure_dpi": 60}, experiment="synthetic-uncertainty", seed=0)
    build(cfg, root, root / "report", files)
    return root / "report" / "report.html"


def check_uses_fold(facts: dict) -> None:
    assert facts["usesBottom"] is not None and facts["usesBottom"] <= facts["innerHeight"], (
        f"what-to-use-when board not within the first screen: {facts}"
    )


def test_the_uses_board_sits_on_the_first_screen_with_the_summaries_figures(
    browser, uncertainty_report, tmp_path
):
    """At 1366x768 the what-to-use-when board ends above the fold, and its cells as Chromium shows them hold the
    fixture's AUROCs (the uncertainty blocks' values, written out here) and the pushed-down control fails."""
    facts = layout(browser, uncertainty_report, SIZES[0], tmp_path / "real")
    check_uses_fold(facts)
    header, *rows = facts["boards"][0]
    assert header[:4] == ["Use", "Measured by", "Best", "Its figure [95%]"]
    shown = {row[0]: [unmarked(c) for c in row[1:]] for row in rows}
    assert list(shown) == ["Calibration", "Unfamiliar inputs", "Errors", "Label disagreement", "Label saving"]
    assert shown["Unfamiliar inputs"][1:3] == ["bgpm: mutual information", "0.957 [0.943, 0.969]"]
    assert shown["Label disagreement"][1:3] == [
        "ensemble gpm-ensemble: mutual information",
        "0.756 [0.726, 0.785]",
    ]
    tall = '<div style="height: 900px">spacer</div>'
    page = uncertainty_report.with_name("report_pushed.html")
    page.write_text(
        uncertainty_report.read_text(encoding="utf-8").replace("<body>", "<body>" + tall, 1), encoding="utf-8"
    )
    with pytest.raises(AssertionError, match="not within the first screen"):
        check_uses_fold(layout(browser, page, SIZES[0], tmp_path / "pushed"))


@pytest.fixture(scope="module")
def seeds_report(tmp_path_factory) -> tuple[Path, list[Path]]:
    """Seed 0's report with seeds 1 and 2 compared (three trees of the same experiment, figures shifted)."""
    trees, compare = write_seed_trees(tmp_path_factory.mktemp("chromium-seeds"))
    cfg = report_settings({"figure_dpi": 60, "compare": compare}, experiment="seeds", seed=0)
    build(cfg, trees[0], trees[0] / "report", manifest())
    return trees[0] / "report" / "report.html", trees


def test_a_seeds_comparison_fits_the_first_screen_with_the_trees_mean_and_sd(browser, seeds_report, tmp_path):
    """At 1366x768 a seeds comparison's scoreboard (verdicts, heads board, GRPO board) ends above the fold, and
    its heads board as Chromium shows it holds each head's mean ± sample sd over the three trees' summaries
    (numpy over the files, not the report's code)."""
    page, trees = seeds_report
    facts = layout(browser, page, SIZES[0], tmp_path)
    check_layout(facts)
    header, *rows = facts["boards"][0]
    assert header[:2] == ["Head", "Overall"]
    for row in rows:
        values = [json.loads((t / "eval" / row[0] / "summary.json").read_text())["overall"] for t in trees]
        want = f"{100 * np.mean(values):.1f} ± {100 * np.std(values, ddof=1):.1f}"
        assert unmarked(row[1]) == want, row[0]
