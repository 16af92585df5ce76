"""What the prep_data stage does: build or load every data file and summarise it (see prefpipe.prep_data)."""

from __future__ import annotations

import argparse
import logging
from collections import Counter
from pathlib import Path
from typing import Any

from prefpipe.common.config import ConfigError
from prefpipe.common.io import atomic_write_json, write_jsonl
from prefpipe.common.run_record import RunRecord
from prefpipe.data.normalize import check_overlap, prompt_overlap, train_test_overlap
from prefpipe.data.synthetic_multihop import WHOLE_TOKENS, WHOLE_WORDS_FILE, multihop_world
from prefpipe.data.synthetic_world import SUBSETS, World, build_world
from prefpipe.settings.build import to_mapping
from prefpipe.settings.data import MULTIHOP, DataSettings
from prefpipe.settings.sections import subset_sections

log = logging.getLogger("prefpipe.prep_data")
FILES = ("pairs_train", "pairs_test", "demonstrations", "rl_prompts_train", "rl_prompts_heldout")
# results/data/multihop: the world's questions beside data.prompts' (data.multihop_alongside)
MULTIHOP_DIR = MULTIHOP


def output_files(settings: DataSettings) -> tuple[str, ...]:
    """The files this config asks for: demonstrations only when something trains on them (base.sft)."""
    return tuple(name for name in FILES if name != "demonstrations" or settings.demonstrations_needed)


def world_parts(settings: DataSettings) -> frozenset[str]:
    """The parts of the synthetic world this config uses (none when pairs and prompts are external and no SFT)."""
    parts = {"pairs"} if settings.source == "synthetic" else set()
    if settings.demonstrations_needed and settings.prompts.demonstrations.path is None:
        parts.add("demonstrations")  # a demonstrations file replaces the world's
    if settings.prompts.source == "synthetic":
        parts.add("rl_prompts")
    return frozenset(parts)


def check_sections(
    sections: dict[str, list[str]], cyclic: list[str], present: set[str], strict: bool
) -> list[str]:
    """Validate the subset -> section mapping; return the subsets present in the data but in no section.

    `strict` (synthetic world): every mapped name must exist and every generated subset must be mapped.
    """
    for section, names in sections.items():
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ConfigError(f"data.sections.{section} must be a list of subset names")
    mapped = subset_sections(sections, "data.sections")
    for name in cyclic:
        if name in mapped:
            raise ConfigError(f"data.cyclic_subsets: {name!r} is also in section {mapped[name]!r}")
    unmapped = sorted(present - set(mapped) - set(cyclic))
    if strict:
        unknown = sorted((set(mapped) | set(cyclic)) - present)
        if unknown:
            raise ConfigError(
                f"data.sections/cyclic_subsets name unknown subsets {unknown}; known: {list(SUBSETS)}"
            )
        if unmapped:
            raise ConfigError(
                f"data.sections: generated subsets {unmapped} are in no section or cyclic_subsets"
            )
    return unmapped


def _load(settings: DataSettings, parts: frozenset[str]) -> tuple[World, dict | None, dict[str, Any]]:
    """The synthetic world's parts, with external pairs and file prompts in place of its own where the
    config says so; the external source's report (None: synthetic pairs) and the prompts' report."""
    world: World = build_world(settings.synthetic, settings.seed, parts)
    report: dict[str, Any] | None = None
    if settings.source != "synthetic":
        from prefpipe.data.sources import load_external_pairs  # optional path; imported only when used

        world.pairs_train, world.pairs_test, report = load_external_pairs(
            settings.external, settings.source, settings.bad_rows, settings.seed
        )
    prompts_report: dict[str, Any] = {"source": "synthetic"}
    if settings.prompts.source == MULTIHOP:
        world.rl_prompts_train, world.rl_prompts_heldout, prompts_report = _multihop(settings, world)
    elif settings.prompts.source != "synthetic":
        from prefpipe.data.rl_prompts import load_rl_prompt_rows

        world.rl_prompts_train, world.rl_prompts_heldout, prompts_report = load_rl_prompt_rows(
            settings.prompts, settings.bad_rows, settings.seed
        )
        if settings.demonstrations_needed and settings.prompts.demonstrations.path is not None:
            from prefpipe.data.multihop_demos import load_demonstrations

            world.demonstrations, prompts_report["demonstrations"] = load_demonstrations(
                settings.prompts, world.rl_prompts_heldout, settings.bad_rows
            )
    return world, report, prompts_report


def _multihop(settings: DataSettings, world: World) -> tuple[list[dict], list[dict], dict[str, Any]]:
    """The multi-hop world's (train, held-out) questions and their report; its episodes are added to the SFT
    demonstrations (when the base trains on them)."""
    world_settings = settings.multihop
    demonstrations = world_settings.demonstrations if settings.demonstrations_needed else 0
    train, held, demos = multihop_world(
        settings.seed,
        world_settings.train,
        world_settings.heldout,
        demonstrations,
        world_settings.distractors,
        world_settings.shortcut_rate,
    )
    world.demonstrations = [*world.demonstrations, *demos]
    return (
        train,
        held,
        {
            "source": MULTIHOP,
            "multihop": {
                "train": len(train),
                "heldout": len(held),
                "demonstrations": len(demos),
                "distractors": world_settings.distractors,
                "shortcut_demonstrations": sum(d["shortcut"] for d in demos),
            },
        },
    )


def prepare(settings: DataSettings, out: Path) -> dict[str, Any]:
    """Generate or load every asked file into `out`; return the summary (also written by the caller's record)."""
    parts = world_parts(settings)
    world, report, prompts_report = _load(settings, parts)
    alongside = _multihop(settings, world) if settings.multihop_alongside else None
    overlap = _check_leakage(settings, world, report)
    present = {r["subset"] for r in world.pairs_train} | {r["subset"] for r in world.pairs_test}
    sections, cyclic = settings.sections, settings.cyclic_subsets
    unmapped = check_sections(sections, cyclic, present, strict=settings.source == "synthetic")
    if unmapped:
        log.warning("subsets in no section (reported on their own): %s", unmapped)
    rows = {name: getattr(world, name) for name in output_files(settings)}
    for name, file_rows in rows.items():
        write_jsonl(out / f"{name}.jsonl", file_rows)
    if alongside is not None:
        train, held, _ = alongside
        write_jsonl(out / MULTIHOP_DIR / "rl_prompts_train.jsonl", train)
        write_jsonl(out / MULTIHOP_DIR / "rl_prompts_heldout.jsonl", held)
    if settings.multihop_built:
        atomic_write_json(out / WHOLE_WORDS_FILE, {"words": list(WHOLE_TOKENS)})
    summary = _summary(settings, world, parts, rows, unmapped, report, prompts_report, overlap)
    if alongside is not None:
        summary["multihop_prompts"] = alongside[2] | {"folder": MULTIHOP_DIR}
    return summary


def _check_leakage(settings: DataSettings, world: World, report: dict[str, Any] | None) -> dict[str, Any]:
    """Test pairs that repeat a training pair and held-out RL prompts that repeat a training prompt (normalised
    text), refused above data.max_overlap_share for data read from files or the hub, before anything is
    written. The synthetic world's own overlap is only counted. Returns the summary's train_test_overlap."""
    pairs = (
        report["train_test_overlap"] if report else train_test_overlap(world.pairs_train, world.pairs_test)
    )
    prompts = prompt_overlap(world.rl_prompts_train, world.rl_prompts_heldout)
    share = settings.max_overlap_share
    if settings.source != "synthetic":
        where = f"data.external ({settings.external.test_split or settings.external.path})"
        check_overlap(pairs["repeated_pairs"], len(world.pairs_test), share, "test pairs", where)
    if settings.prompts.source != "synthetic":
        where = f"data.prompts ({settings.prompts.test_path or settings.prompts.path})"
        check_overlap(prompts, len(world.rl_prompts_heldout), share, "held-out RL prompts", where)
    return {"pairs": pairs, "rl_prompts": prompts}


def _summary(
    settings: DataSettings,
    world: World,
    parts: frozenset[str],
    rows: dict[str, list[dict]],
    unmapped: list[str],
    report: dict[str, Any] | None,
    prompts_report: dict[str, Any],
    overlap: dict[str, Any],
) -> dict[str, Any]:
    """summary.json: the files written, what was built, subsets, sections, demonstrations, RL prompts and the
    train/test overlap (key order is the file's)."""
    sections, cyclic = settings.sections, settings.cyclic_subsets
    demos = world.demonstrations
    summary: dict[str, Any] = {
        "source": settings.source,
        "seed": settings.seed,
        "files": {f"{name}.jsonl": len(file_rows) for name, file_rows in rows.items()},
        "built": {
            "synthetic_world": sorted(parts),
            "not_built": [f"{name}.jsonl" for name in FILES if name not in rows],
        },
        "subsets": {
            "train": dict(Counter(r["subset"] for r in world.pairs_train)),
            "test": dict(Counter(r["subset"] for r in world.pairs_test)),
        },
        "sections": sections,
        "cyclic_subsets": cyclic,
        "unmapped_subsets": unmapped,
        "demonstrations": {
            "built": settings.demonstrations_needed,
            "n": len(demos),
            "wrong": world.stats["demonstrations_wrong"],
            "error_rate": world.stats["demonstrations_wrong"] / max(len(demos), 1),
            "habitual": world.stats["demonstrations_habitual"],
            "per_kind": world.stats["demonstrations_per_kind"],
        },
        "rl_prompts": {
            **prompts_report,
            "train_per_kind": dict(Counter(r["kind"] for r in world.rl_prompts_train)),
            "heldout_per_kind": dict(Counter(r["kind"] for r in world.rl_prompts_heldout)),
        },
    }
    if report is not None:
        summary["external"] = report
    if "uncertainty" in world.stats:
        summary["uncertainty_world"] = world.stats["uncertainty"]
    # Leakage, whatever the source (_check_leakage): test pairs repeating a training pair or sharing a prompt or
    # id with one; held-out RL prompts that repeated a training prompt (dropped by rl_prompts) and that still
    # repeat one after punctuation folding (refused above data.max_overlap_share).
    summary["train_test_overlap"] = {
        "pairs": overlap["pairs"],
        "rl_prompts_dropped": prompts_report.get("heldout", {}).get("overlap_dropped", 0),
        "rl_prompts": overlap["rl_prompts"],
    }
    return summary


def run(settings: DataSettings, args: argparse.Namespace) -> None:
    record = RunRecord(args.out, "prep_data", to_mapping(settings))
    summary = prepare(settings, Path(args.out))
    log.info("wrote %s", summary["files"])
    record.finish(summary)
