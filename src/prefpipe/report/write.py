"""What the report stage does: read the results trees, build the document, write HTML, Markdown and figures."""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from prefpipe.common.config import ConfigError, resolve_path
from prefpipe.common.io import atomic_dir, atomic_write_text
from prefpipe.common.run_record import RunRecord
from prefpipe.report.build import build_document
from prefpipe.report.collect import collect_tree
from prefpipe.report.html import render_html
from prefpipe.report.markdown import render_markdown
from prefpipe.report.settings import load_settings
from prefpipe.settings.build import to_mapping
from prefpipe.settings.report import ReportSettings

log = logging.getLogger("prefpipe.report")


def build(config: ReportSettings, results: Path, out: Path) -> dict:
    """Build the report; returns the build summary (also written to <out>/summary.json)."""
    settings = load_settings(config)
    folders = {name: resolve_path(path) for name, path in settings.compare.items()}
    for name, folder in folders.items():
        if settings.strict and not folder.is_dir():
            raise ConfigError(f"report.compare.{name}: {folder} is not a directory")
    start = time.time()
    record = RunRecord(out, "report", to_mapping(config))
    tree = collect_tree(results, name="main", strict=settings.strict)
    others = [collect_tree(folder, name=name, strict=settings.strict) for name, folder in folders.items()]
    doc, stats = build_document(tree, others, settings)
    html_text = render_html(doc)
    md_text = render_markdown(doc, figure_dir="figures")
    with atomic_dir(out / "figures") as tmp:
        for figure in doc.figures():
            (tmp / f"{figure.name}.png").write_bytes(figure.png)
    atomic_write_text(out / "report.md", md_text)
    atomic_write_text(out / "report.html", html_text)
    build_s = round(time.time() - start, 3)
    record.log(
        step=None,
        build_s=build_s,
        html_bytes=len(html_text.encode("utf-8")),
        md_bytes=len(md_text.encode("utf-8")),
        **{k: v for k, v in stats.items() if k != "flags"},
    )
    summary = {**stats, "build_s": build_s, "outputs": ["report.html", "report.md", "figures/"]}
    record.finish(summary)
    log.info(
        "report: %d figures, %d tables, %d flags -> %s",
        stats["n_figures"],
        stats["n_tables"],
        stats["n_flags"],
        out,
    )
    return summary


def run(config: ReportSettings, args: argparse.Namespace) -> None:
    build(config, Path(args.results), Path(args.out))
