"""The report's inputs: exactly the files the report rule declares, as a manifest of paths relative to a results
folder, read into one `Tree` per folder. Nothing is discovered by listing folders, so a stale variant or run
left under results/ by an earlier configuration never appears. Compared trees (`report.compare`) are read with
the same manifest under their own root (every tree has the same layout).

Beside each declared summary.json the report also reads the run record written with it (config.json,
versions.json: prefpipe.common.run_record writes the three together).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefpipe.common.config import ConfigError

# kind -> the path pattern of one file, relative to the results folder (`{name}`: a variant or a run).
LAYOUT = {
    "data": "data/summary.json",
    "base": "base/summary.json",
    "reward": "reward/{name}/summary.json",
    "reward_metrics": "reward/{name}/metrics.jsonl",
    "eval": "eval/{name}/summary.json",
    "eval_ensemble": "eval_ensemble/{name}/summary.json",
    "grpo": "grpo/{name}/summary.json",
    "grpo_metrics": "grpo/{name}/metrics.jsonl",
    "grpo_samples": "grpo/{name}/samples.jsonl",
    "grpo_curve": "grpo/{name}/curve.jsonl",
    "policy_eval": "policy_eval/{name}/summary.json",
    "policy_examples": "policy_eval/{name}/per_example.jsonl",
    "grpo_hypotheses": "grpo_hypotheses/summary.json",
    "ablation": "ablation/summary.json",
    "active_learning": "active_learning/summary.json",
}
VARIANT_KINDS = ("reward", "reward_metrics", "eval")
RUN_KINDS = ("grpo", "grpo_metrics", "grpo_samples", "grpo_curve", "policy_eval", "policy_examples")


@dataclass(frozen=True)
class Manifest:
    """kind -> {name: path relative to the results folder}; `data`, `base`, `ablation` and `active_learning` use
    the name ""."""

    files: dict[str, dict[str, str]]

    @classmethod
    def standard(cls, variants: list[str], runs: list[str], ensembles: Sequence[str]) -> Manifest:
        """The files the report rule declares for these variants, runs and deep ensembles (the stages'
        layout)."""
        files: dict[str, dict[str, str]] = {
            "data": {"": LAYOUT["data"]},
            "base": {"": LAYOUT["base"]},
            "ablation": {"": LAYOUT["ablation"]},
            "active_learning": {"": LAYOUT["active_learning"]},
        }
        for kind in VARIANT_KINDS:
            files[kind] = {v: LAYOUT[kind].format(name=v) for v in variants}
        for kind in RUN_KINDS:
            files[kind] = {r: LAYOUT[kind].format(name=r) for r in runs}
        files["eval_ensemble"] = {e: LAYOUT["eval_ensemble"].format(name=e) for e in ensembles}
        return cls(files)

    @classmethod
    def listed(cls, results: Path) -> Manifest:
        """The standard manifest for the variants, runs and deep ensembles that have a summary.json under
        `results` (for a results folder whose report never ran: the workflow itself declares its inputs, never
        lists them)."""

        def names(stage: str) -> list[str]:
            return sorted(p.parent.name for p in Path(results).glob(f"{stage}/*/summary.json"))

        return cls.standard(names("reward"), names("grpo"), names("eval_ensemble"))

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(f"--inputs: not a JSON manifest ({err})") from err
        if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
            raise ConfigError("--inputs: expected {kind: {name: path}}")
        unknown = sorted(set(raw) - set(LAYOUT))
        if unknown:
            raise ConfigError(f"--inputs: unknown kind(s) {', '.join(unknown)} (known: {', '.join(LAYOUT)})")
        return cls({k: {str(n): str(p) for n, p in v.items()} for k, v in raw.items()})

    def to_json(self) -> str:
        return json.dumps(self.files)

    def names(self, kind: str) -> list[str]:
        return list(self.files.get(kind, {}))


@dataclass
class Record:
    """One stage output: its summary and the run record beside it (None where a file was not there)."""

    summary: dict[str, Any] | None
    config: dict[str, Any] | None
    versions: dict[str, Any] | None


@dataclass
class Tree:
    name: str
    root: Path
    records: dict[str, dict[str, Record]] = field(default_factory=dict)  # kind -> name -> record
    rows: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)  # jsonl kinds
    notes: list[str] = field(default_factory=list)

    def record(self, kind: str, name: str = "") -> Record | None:
        return self.records.get(kind, {}).get(name)

    def summary(self, kind: str, name: str = "") -> dict[str, Any] | None:
        record = self.record(kind, name)
        return record.summary if record else None

    def config(self, kind: str, name: str) -> dict[str, Any] | None:
        """The stage's settings (config.json holds {"stage", "config"})."""
        record = self.record(kind, name)
        inner = (record.config or {}).get("config") if record else None
        return inner if isinstance(inner, dict) else None

    def names(self, kind: str) -> list[str]:
        return [n for n, r in self.records.get(kind, {}).items() if r.summary is not None]

    @property
    def experiment(self) -> str:
        for kind in self.records:
            for name in self.records[kind]:
                config = self.config(kind, name)
                if config and isinstance(config.get("experiment"), str):
                    return config["experiment"]
        return self.name

    @property
    def seed(self) -> int | None:
        for kind in self.records:
            for name in self.records[kind]:
                config = self.config(kind, name)
                if config and isinstance(config.get("seed"), int):
                    return config["seed"]
        return None


def compare_roots(compare: dict[str, str], own: str | Path | None = None) -> dict[str, Path]:
    """`report.compare` folders (other experiments' or seeds' results folders, shown beside this run's). A
    missing folder, this run's own folder (`own`) or a folder another entry already names is a one-line error
    naming the key: each would compare a tree with itself."""
    roots: dict[str, Path] = {}
    seen: dict[Path, str] = {} if own is None else {Path(own).resolve(): ""}
    for name, path in compare.items():
        root = Path(path).expanduser()
        if not root.is_dir():
            raise ConfigError(f"report.compare.{name}: {path} is not a directory")
        first = seen.setdefault(root.resolve(), name)
        if first == "":
            raise ConfigError(f"report.compare.{name}: {path} is this run's own results folder ({own})")
        if first != name:
            raise ConfigError(
                f"report.compare.{name}: {path} is the folder report.compare.{first} already names"
            )
        roots[name] = root
    return roots


def _read_json(tree: Tree, path: Path, strict: bool) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        if strict:
            raise ConfigError(f"{path}: not valid JSON ({err})") from err
        tree.notes.append(f"{path}: not valid JSON, skipped ({err})")
        return None
    return value if isinstance(value, dict) else None


def _read_jsonl(tree: Tree, path: Path, strict: bool) -> list[dict[str, Any]]:
    """Rows of a JSONL file; malformed lines (a run killed mid-write) are skipped and counted."""
    rows, bad = [], 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            row = json.loads(line) if line.strip() else {}
        except json.JSONDecodeError:
            row = None
        if not isinstance(row, dict):
            if strict:
                raise ConfigError(f"{path}:{number}: not a JSON object")
            bad += 1
        elif row:
            rows.append(row)
    if bad:
        tree.notes.append(f"{path}: {bad} malformed line(s) skipped")
    return rows


def read_tree(root: Path, manifest: Manifest, name: str, strict: bool) -> Tree:
    """Read the manifest's files under root; a missing file is a note (shown at the end of the report)."""
    tree = Tree(name, Path(root))
    for kind, files in manifest.files.items():
        for item, rel in files.items():
            path = tree.root / rel
            if not path.is_file():
                tree.notes.append(f"{name}: {rel} not found")
                continue
            if rel.endswith(".jsonl"):
                tree.rows.setdefault(kind, {})[item] = _read_jsonl(tree, path, strict)
                continue
            tree.records.setdefault(kind, {})[item] = Record(
                _read_json(tree, path, strict),
                _read_json(tree, path.with_name("config.json"), strict),
                _read_json(tree, path.with_name("versions.json"), strict),
            )
    return tree
