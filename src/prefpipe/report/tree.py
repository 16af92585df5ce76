"""The collected results tree: data classes for what was read, and the file reader that keeps notes.

Missing files and keys never stop the report: each becomes a `Note` that the matching report section shows
("not recorded: ..."). Unreadable files (bad JSON) become warnings, or an error naming the file when
`report.strict` is true. Numbers are never filled in: a value that was not recorded stays absent (NaN/None).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

# Snakemake rule names, longest first, to split benchmark file stems "<rule>_<wildcard>".
KNOWN_RULES = (
    "train_reward_model",
    "eval_rewardbench",
    "eval_policy",
    "train_grpo",
    "build_base",
    "prep_data",
    "report",
)
VARIANT_ORDER = ("bt", "gpm", "bgpm")


@dataclass
class Note:
    """Something the report could not show: `missing` (not recorded), `unreadable`, or `info`."""

    area: str
    kind: str
    message: str


@dataclass
class StageDir:
    """One stage output folder and the run facts it left (config.json, versions.json, summary.json)."""

    stage: str
    path: Path
    config: dict[str, Any] | None
    versions: dict[str, Any] | None
    summary: dict[str, Any] | None


@dataclass
class ResultsTree:
    name: str
    root: Path
    experiment: str | None = None
    seed: int | None = None
    stages: list[StageDir] = field(default_factory=list)
    data_summary: dict[str, Any] | None = None
    base_summary: dict[str, Any] | None = None
    reward_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    reward_metrics: pd.DataFrame = field(default_factory=pd.DataFrame)
    eval_overall: pd.DataFrame = field(default_factory=pd.DataFrame)
    eval_sections: pd.DataFrame = field(default_factory=pd.DataFrame)
    eval_subsets: pd.DataFrame = field(default_factory=pd.DataFrame)
    calibration: pd.DataFrame = field(default_factory=pd.DataFrame)
    reliability: pd.DataFrame = field(default_factory=pd.DataFrame)
    selective: pd.DataFrame = field(default_factory=pd.DataFrame)
    # variant -> the benchmark its eval summary.json names as primary (`primary_benchmark`, else `benchmark`)
    eval_primary: dict[str, str] = field(default_factory=dict)
    grpo_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    grpo_summaries: dict[str, dict[str, Any]] = field(default_factory=dict)
    grpo_metrics: pd.DataFrame = field(default_factory=pd.DataFrame)
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    policy_eval: pd.DataFrame = field(default_factory=pd.DataFrame)
    policy_pairs: pd.DataFrame = field(default_factory=pd.DataFrame)
    benchmarks: pd.DataFrame = field(default_factory=pd.DataFrame)
    notes: list[Note] = field(default_factory=list)
    unused_keys: dict[str, set[str]] = field(default_factory=dict)

    def notes_for(self, area: str) -> list[Note]:
        return [n for n in self.notes if n.area == area]

    @property
    def variants(self) -> list[str]:
        names = set(self.reward_configs)
        for frame in (self.reward_metrics, self.eval_overall):
            if "variant" in frame:
                names.update(frame["variant"].unique())
        return order_variants(names)

    @property
    def recorded_primary(self) -> str | None:
        """The primary benchmark the evaluation stage recorded: the one most variants name (ties: the first
        variant's), among benchmarks that have scores; None when no summary names one."""
        scored = set(self.eval_overall["benchmark"]) if "benchmark" in self.eval_overall else set()
        named = [self.eval_primary[v] for v in self.variants if self.eval_primary.get(v) in scored]
        return Counter(named).most_common(1)[0][0] if named else None

    @property
    def runs(self) -> list[str]:
        names = set(self.grpo_configs) | set(self.grpo_summaries) | set(self.samples)
        for frame in (self.grpo_metrics, self.policy_eval):
            if "run" in frame:
                names.update(frame["run"].unique())
        return sorted(names)


def order_variants(names: Iterable[str]) -> list[str]:
    """bt, gpm, bgpm first (the main comparison), then the rest alphabetically."""
    return sorted(
        set(names), key=lambda n: (VARIANT_ORDER.index(n) if n in VARIANT_ORDER else len(VARIANT_ORDER), n)
    )


def config_hash(config: Any) -> str:
    """First 12 hex digits of sha256 over the canonical JSON (sorted keys) of a stage's resolved config."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def inner_config(config_file: dict[str, Any] | None) -> dict[str, Any] | None:
    """config.json holds {"stage", "config"}; older or hand-written files may hold the config itself."""
    if config_file is None:
        return None
    inner = config_file.get("config", config_file)
    return inner if isinstance(inner, dict) else None


class Reader:
    """File access with the strict/lenient policy and note keeping for one tree."""

    def __init__(self, tree: ResultsTree, strict: bool) -> None:
        self.tree = tree
        self.strict = strict

    def note(self, area: str, kind: str, message: str) -> None:
        self.tree.notes.append(Note(area, kind, message))

    def rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.tree.root.parent))
        except ValueError:
            return str(path)

    def json(self, path: Path, area: str, required: bool = True) -> Any:
        if not path.is_file():
            if required:
                self.note(area, "missing", f"{self.rel(path)} not found")
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            message = f"{self.rel(path)}: not valid JSON ({err})"
            if self.strict:
                raise ValueError(message) from err
            self.note(area, "unreadable", message)
            return None

    def jsonl(self, path: Path, area: str, required: bool = True) -> list[dict[str, Any]] | None:
        """Rows of a JSONL file; malformed lines (e.g. a run killed mid-write) are skipped and counted."""
        if not path.is_file():
            if required:
                self.note(area, "missing", f"{self.rel(path)} not found")
            return None
        rows, bad = [], []
        for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                row = None
            if not isinstance(row, dict):
                if self.strict:
                    raise ValueError(f"{self.rel(path)}:{line_no}: not a JSON object")
                bad.append(line_no)
                continue
            rows.append(row)
        if bad:
            self.note(
                area,
                "unreadable",
                f"{self.rel(path)}: {len(bad)} malformed line(s) skipped (first: {bad[0]})",
            )
        return rows

    def stage(self, stage: str, path: Path, area: str) -> StageDir:
        config = self.json(path / "config.json", area="facts")
        versions = self.json(path / "versions.json", area="facts")
        summary = self.json(path / "summary.json", area=area)
        record = StageDir(stage, path, config if isinstance(config, dict) else None, versions, summary)
        self.tree.stages.append(record)
        return record


def subdirs(path: Path) -> list[Path]:
    return (
        sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
        if path.is_dir()
        else []
    )


def make_frame(rows: list[dict[str, Any]], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=columns) if rows else pd.DataFrame(columns=columns)
