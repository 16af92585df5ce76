"""What the report stage does: read the declared inputs (and the compared trees through the same manifest),
build the sections from the registry, write HTML, Markdown and figures atomically."""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from prefpipe.common.io import atomic_dir, atomic_write_json, atomic_write_text
from prefpipe.common.progress import Progress
from prefpipe.common.run_record import RunRecord
from prefpipe.report import scoreboard
from prefpipe.report.document import Document
from prefpipe.report.html import render_html
from prefpipe.report.inputs import Manifest, compare_roots, read_tree
from prefpipe.report.markdown import render_markdown
from prefpipe.report.sections import SECTIONS, Context, answers
from prefpipe.settings.build import to_mapping
from prefpipe.settings.report import ReportSettings

log = logging.getLogger("prefpipe.report")
INPUTS_FILE = "inputs.json"  # the manifest the report was built from, next to it


def document(config: ReportSettings, results: Path, manifest: Manifest) -> Document:
    """The report as data: the scoreboard, the answers, then every registered section that has something to
    show."""
    roots = compare_roots(config.compare)  # before any work: a missing tree is a one-line error naming it
    tree = read_tree(results, manifest, "main", config.strict)
    others = [read_tree(root, manifest, name, config.strict) for name, root in roots.items()]
    ctx = Context(tree, others, config)
    modules = SECTIONS()
    log.info("read %s and %d compared tree(s); building %d sections", results, len(others), len(modules))
    with Progress(len(modules) + 1, "report", unit="section") as bar:  # figures take seconds each
        claims = [c for m in modules if hasattr(m, "claims") for c in m.claims(ctx)]
        bar.step(part="answers")
        sections = []
        for module in modules:
            if (section := module.build(ctx)) is not None:
                sections.append(section)
            bar.step(part=module.__name__.rsplit(".", 1)[-1])
    subtitle = f"Experiment {tree.experiment}, seed {tree.seed}; headline benchmark {ctx.bench or '–'}"
    subtitle += f"; compared with {', '.join(t.name for t in others)}" if others else ""
    subtitle += _overlap_note(tree.summary("data") or {})
    title = config.title or f"prefpipe report: {config.experiment}"
    return Document(title, subtitle, [answers.build(claims), *sections], scoreboard.build(ctx))


def _overlap_note(data_summary: dict) -> str:
    """The data summary's train/test overlap (prefpipe.data.prepare), on the first screen where any exists."""
    overlap = data_summary.get("train_test_overlap") or {}
    pairs = overlap.get("pairs") or {}
    counts = (
        (pairs.get("repeated_pairs"), "test pairs repeat a training pair"),
        (pairs.get("prompts"), "test pairs share a training prompt"),
        (overlap.get("rl_prompts"), "held-out RL prompts repeat a training prompt"),
    )
    found = [f"{n} {what}" for n, what in counts if n]
    return f"; train/test overlap: {', '.join(found)}" if found else ""


def build(config: ReportSettings, results: Path, out: Path, manifest: Manifest) -> dict:
    """Build the report; returns the build summary (also written to <out>/summary.json)."""
    start = time.time()
    doc = document(config, Path(results), manifest)
    record = RunRecord(out, "report", to_mapping(config))
    log.info("writing HTML (figures inlined), Markdown and %d figures", len(doc.figures()))
    html_text = render_html(doc)
    md_text = render_markdown(doc, figure_dir="figures")
    with atomic_dir(out / "figures") as tmp:
        for figure in doc.figures():
            (tmp / f"{figure.name}.png").write_bytes(figure.png)
    atomic_write_text(out / "report.md", md_text)
    atomic_write_json(out / INPUTS_FILE, manifest.files)  # `prefpipe report` rebuilds from it
    atomic_write_text(out / "report.html", html_text)
    stats = {
        "n_sections": len(doc.sections),
        "n_figures": len(doc.figures()),
        "n_tables": len(doc.tables()),
        "build_s": round(time.time() - start, 3),
    }
    record.log(step=None, html_bytes=len(html_text.encode("utf-8")), **stats)
    summary = {**stats, "outputs": ["report.html", "report.md", "figures/", INPUTS_FILE]}
    record.finish(summary)
    log.info(
        "report: %d sections, %d figures, %d tables -> %s",
        stats["n_sections"],
        stats["n_figures"],
        stats["n_tables"],
        out,
    )
    return summary


def run(config: ReportSettings, args: argparse.Namespace) -> None:
    build(config, Path(args.results), Path(args.out), Manifest.from_json(args.inputs))
