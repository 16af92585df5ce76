"""The package's layers point down only, and no modules import each other in a circle.

An AST scan of every module under src/prefpipe, reading imports at module level and inside functions alike.
Each package has a rank; a module may import its own package and packages of a lower rank, never a higher one
and never another package of its own rank. A package split into rooms (ROOMS: grpo) ranks its rooms the same way
among themselves: its top-level modules are its lowest room, and each subpackage a room of its own; to other
packages the rooms are one package of the package's rank. Module-level imports (outside `if TYPE_CHECKING:`) may not form a
cycle. Known violations that another change removes are listed below; an entry that no longer occurs fails
the test too, so the list can only shrink.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "prefpipe"
TOP = "(top)"  # the stage modules and other modules directly under src/prefpipe
RANKS = {
    "common": 0,
    "settings": 1,
    "data": 2,
    "generation": 2,  # prompt rows and token batches for base/ and grpo/ (needs common, settings only)
    "reward": 3,
    "base": 3,
    "evaluation": 4,
    "export": 4,
    "grpo": 4,
    "active": 5,  # active learning: scores pools with reward models, reads the evaluation's uncertainties
    "report": 6,
    TOP: 7,
}

# Packages split into rooms: each subpackage is a room with a rank within the package ("" = the top-level modules).
ROOMS = {
    "grpo": {
        "": 0,  # the shared vocabulary: metric_names, rewards, kl, logprobs, data_parallel, splits, policy_io
        "environments": 0,  # what answers tool calls (search, calculator, a user's tool): imports no grpo module
        "analyses": 1,  # hacking, paired, risk, health, hypotheses: numbers of finished runs
        "rollout": 1,  # sampling, completions, engines/, fast/
        "policy_eval": 2,  # measures, curve, the eval_policy stage (samples with rollout)
        "algorithm": 2,  # advantages, losses, spans, update, reference, ... (reads rollout's masks)
        "inspector": 3,  # recomputes a step with the algorithm's functions
        "training": 4,  # the trainer loop and the train_grpo stage: imports every room
    },
}

# Known violations another change removes: (importing file, imported module). None left.
KNOWN_LAYER_EDGES: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Edge:
    path: str  # the importing file, relative to the repository
    line: int
    importer: str  # module names, dotted
    imported: str
    module_level: bool  # executed when the importer is imported (not in a function or TYPE_CHECKING block)

    def where(self) -> str:
        return f"{self.path}:{self.line} imports {self.imported}"


def module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(src: Path = SRC) -> dict[str, Path]:
    return {module_name(p, src): p for p in sorted((src / ROOT).rglob("*.py"))}


def package(module: str, src: Path = SRC) -> str:
    """The layer a module belongs to: prefpipe.<package>...; modules directly under prefpipe are TOP."""
    parts = module.split(".")
    if len(parts) < 2 or not (src / ROOT / parts[1]).is_dir():
        return TOP
    return parts[1]


def room(module: str, src: Path = SRC) -> str:
    """The room of a module inside a package split into rooms: its subpackage, or "" for top-level modules."""
    parts = module.split(".")
    if len(parts) < 3 or parts[1] not in ROOMS or not (src / ROOT / parts[1] / parts[2]).is_dir():
        return ""
    return parts[2]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module_level: bool) -> Iterator[tuple[ast.stmt, bool]]:
    """Every import statement with whether it runs on import: not in a def or a TYPE_CHECKING block."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, module_level
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _imports(node, False)
        elif isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), False)
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), module_level)
        else:
            yield from _imports(node, module_level)


def _targets(node: ast.stmt, importer: str, is_package: bool, known: dict[str, Path]) -> list[str]:
    """Modules an import statement names: `from a.b import c` is a.b.c when that is a module, else a.b."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    assert isinstance(node, ast.ImportFrom)
    base = node.module or ""
    if node.level:
        parts = importer.split(".")
        anchor = parts if is_package else parts[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([node.module] if node.module else []))
    names = [f"{base}.{alias.name}" for alias in node.names]
    return [name if name in known else base for name in names]


def scan(src: Path = SRC) -> list[Edge]:
    """Every import of every module under src/prefpipe (third-party imports included)."""
    known = modules(src)
    edges = []
    for name, path in known.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        rel = str(path.relative_to(src.parent))
        for node, module_level in _imports(tree, True):
            for target in _targets(node, name, path.name == "__init__.py", known):
                edges.append(Edge(rel, node.lineno, name, target, module_level))
    return edges


def internal(edges: list[Edge]) -> list[Edge]:
    return [e for e in edges if e.imported == ROOT or e.imported.startswith(ROOT + ".")]


def layer_violations(edges: list[Edge], src: Path = SRC) -> list[Edge]:
    """Imports of a higher-ranked package, or of another package of the same rank."""
    bad = []
    for edge in internal(edges):
        mine, theirs = package(edge.importer, src), package(edge.imported, src)
        if mine == theirs:
            if mine in ROOMS:
                here, there = room(edge.importer, src), room(edge.imported, src)
                if here != there and ROOMS[mine][there] >= ROOMS[mine][here]:
                    bad.append(edge)
            continue
        if RANKS[theirs] >= RANKS[mine]:
            bad.append(edge)
    return bad


def cycles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components (more than one module, or a module importing itself) of the
    module-level import graph (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for e in internal(edges):
        if e.module_level:
            graph.setdefault(e.importer, set()).add(e.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _check(found: list[Edge], known: set[tuple[str, str]], rule: str) -> list[str]:
    """Failure lines: each edge not in `known`, and each `known` entry that no longer occurs."""
    keys = {(e.path, e.imported) for e in found}
    lines = list(dict.fromkeys(f"{e.where()}: {rule}" for e in found if (e.path, e.imported) not in known))
    lines += [
        f"{path} no longer imports {module}: remove it from the known list ({rule})"
        for path, module in sorted(known - keys)
    ]
    return lines


def test_every_package_has_a_rank():
    unranked = sorted({package(m) for m in modules()} - set(RANKS))
    assert not unranked, f"packages without a layer rank (add them to RANKS): {unranked}"


def test_every_room_has_a_rank():
    unranked = sorted(
        {f"{package(m)}.{room(m)}" for m in modules() if package(m) in ROOMS}
        - {f"{p}.{r}" for p, rooms in ROOMS.items() for r in rooms}
    )
    assert not unranked, f"rooms without a rank (add them to ROOMS): {unranked}"


def test_imports_point_down_only():
    found = layer_violations(scan())
    rule = "a package imports only lower-ranked packages (" + ", ".join(f"{k} {v}" for k, v in RANKS.items())
    rule += "; rooms: " + "; ".join(
        f"{p}: " + ", ".join(f"{r or '(top)'} {v}" for r, v in rooms.items()) for p, rooms in ROOMS.items()
    )
    problems = _check(found, KNOWN_LAYER_EDGES, rule + ")")
    assert not problems, "\n".join(problems)


def test_no_module_level_import_cycle():
    found = cycles(scan())
    assert not found, "module-level import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


# Cycles that close only through imports inside functions (import on use): the list can only shrink.
KNOWN_FUNCTION_LEVEL_CYCLES = [
    # a head's length head is built by the base class, and the length head reads the base's Encoding
    ["prefpipe.reward.heads.base", "prefpipe.reward.heads.disentangle"],
    # the sections registry imports each section module on use; each section registers itself in it
    sorted(
        ["prefpipe.report.sections"]
        + [
            f"prefpipe.report.sections.{name}"
            for name in [
                "ablation",
                "active_learning",
                "appendix",
                "calibration",
                "compare",
                "episodes",
                "grpo_training",
                "hacking",
                "hypotheses",
                "length_bias",
                "paired",
                "policy",
                "policy_curve",
                "prompt_overlap",
                "reward_training",
                "rewardbench",
                "samples",
                "uncertainty",
            ]
        ]
    ),
]


def test_no_new_cycle_through_imports_on_use():
    """Counting imports inside functions too (the settings once closed a circle that way: run.py imported
    pipeline.py on use), no cycle beyond the known ones."""
    every = [Edge(e.path, e.line, e.importer, e.imported, True) for e in scan()]
    found = cycles(every)
    new = [c for c in found if c not in KNOWN_FUNCTION_LEVEL_CYCLES]
    gone = [c for c in KNOWN_FUNCTION_LEVEL_CYCLES if c not in found]
    assert not new, "import cycles through imports on use:\n" + "\n".join(" <-> ".join(c) for c in new)
    assert not gone, "no longer a cycle, remove it from KNOWN_FUNCTION_LEVEL_CYCLES: " + str(gone)


def test_the_scan_finds_function_level_upward_imports_and_cycles(tmp_path):
    """The scan itself: a lazy upward import and a module-level cycle in a throwaway tree are reported."""
    pkg = tmp_path / ROOT
    for sub in ("common", "settings"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "common" / "a.py").write_text("def f():\n    from prefpipe.settings import b\n")
    (pkg / "settings" / "b.py").write_text("from prefpipe.settings import c\n")
    (pkg / "settings" / "c.py").write_text("from . import b\nfrom prefpipe.common.a import f\n")
    edges = scan(tmp_path)
    bad = layer_violations(edges, tmp_path)
    assert [e.where() for e in bad] == [f"{tmp_path.name}/{ROOT}/common/a.py:2 imports prefpipe.settings.b"]
    assert not bad[0].module_level
    assert cycles(edges) == [["prefpipe.settings.b", "prefpipe.settings.c"]]


def test_the_scan_ranks_rooms(tmp_path):
    """Rooms of a split package: a lower room importing a higher one is reported, the other way is not, and the
    package's top-level modules may not import a room."""
    pkg = tmp_path / ROOT / "grpo"
    for sub in ("rollout", "training"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (tmp_path / ROOT / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "kl.py").write_text("from prefpipe.grpo.rollout import a\n")
    (pkg / "rollout" / "a.py").write_text("def f():\n    from prefpipe.grpo.training import b\n")
    (pkg / "training" / "b.py").write_text(
        "from prefpipe.grpo.rollout import a\nfrom prefpipe.grpo import kl\n"
    )
    bad = layer_violations(scan(tmp_path), tmp_path)
    assert sorted(e.where() for e in bad) == [
        f"{tmp_path.name}/{ROOT}/grpo/kl.py:1 imports prefpipe.grpo.rollout.a",
        f"{tmp_path.name}/{ROOT}/grpo/rollout/a.py:2 imports prefpipe.grpo.training.b",
    ]
