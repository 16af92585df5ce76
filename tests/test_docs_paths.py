"""The prose names only what exists: every source path (`src/...`, `prefpipe/...`), every dotted module
(`prefpipe.x.y`, or `prefpipe.x.y.name` for a name defined at the top of that module), every repository path in
backticks (`workflow/...`, `scripts/...`, `config/...`, ...) and every relative link in README.md and docs/**/*.md
points at something in this checkout. And one naming of the stages: by rule name, with no stage numbers, in the
README, the docs, the config comments, the schema descriptions and the package's docstrings. And the product
speaks of the product: no file of src/, workflow/, config/, docs/ or the README cites an issue number, a work
session, an unnamed numbered fix or notes the repository does not hold."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
# Folders of the repository a doc may name in backticks (results/ is output, never checked in).
REPO_DIRS = (
    "workflow/",
    "scripts/",
    "config/",
    "tests/",
    "benchmarks/",
    "profiles/",
    "docs/",
    ".ci/",
    ".test/",
)
SOURCE_PATH = re.compile(r"(?<![\w/.])(?:src/)?prefpipe/[\w./*-]*[\w*]")
MODULE = re.compile(r"(?<![\w/.])prefpipe(?:\.[A-Za-z_]\w*)+")
BACKTICKED = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PLACEHOLDER = re.compile(r"[<{]")  # results/grpo/<run>, {variant}: a pattern, not a path
STAGE_NUMBER = re.compile(r"\b[Ss]tage \d")
# References a reader of the config does not have: an issue, a numbered seed session, private design notes.
OUTSIDE_REFERENCE = re.compile(r"\bissue \d|\bseed 00\d|\bdesign[- ]notes?\b", re.IGNORECASE)


# What the product should not say (any file, any case): how it was developed rather than what it does.
DEVELOPMENT_WORDS = re.compile(
    r"\bissues? #?\d|\bfix(?:es)? \d[ab]?\b|\bsessions?\b|\bseed notes?\b|\bdesign[- ]notes?\b", re.IGNORECASE
)
PRODUCT_TREES = ("src", "workflow", "config", "docs")
PRODUCT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".smk", ".rst", ".txt", ".json", ""}
# (path relative to the repository, the exact phrase): genuine product words the pattern catches, with why.
# None today; an entry must say why the product itself needs the word.
PRODUCT_WORDS_ALLOWED: dict[tuple[str, str], str] = {}


def product_files() -> list[Path]:
    files = [REPO / "README.md"]
    for tree in PRODUCT_TREES:
        files += [
            p
            for p in sorted((REPO / tree).rglob("*"))
            if p.is_file()
            and p.suffix in PRODUCT_SUFFIXES
            and "__pycache__" not in p.parts
            and not any(part.endswith(".egg-info") for part in p.parts)  # pip's build copy of the README
        ]
    return files


def development_words(text: str) -> list[str]:
    return [m.group(0) for m in DEVELOPMENT_WORDS.finditer(text)]


def _exists(relative: str) -> bool:
    """A path relative to the repository root; `*` patterns must match something."""
    relative = relative.rstrip("/")
    if "*" in relative:
        return any(REPO.glob(relative))
    return (REPO / relative).exists()


def _source_path(token: str) -> str:
    return token if token.startswith("src/") else f"src/{token}"


@cache
def _top_level_names(module_file: Path) -> frozenset[str]:
    """Names a module defines at its top level (functions, classes, assignments, imports)."""
    tree = ast.parse(module_file.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def _module_file(parts: list[str]) -> Path | None:
    """The file of a module or package; a package folder without __init__.py (a namespace package) itself."""
    base = SRC.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return base if base.is_dir() else None


def _module_exists(dotted: str) -> bool:
    """`prefpipe.a.b` is a module or package; `prefpipe.a.b.name` may end in one name defined in module a.b."""
    parts = dotted.split(".")
    if _module_file(parts):
        return True
    owner = _module_file(parts[:-1])
    return owner is not None and owner.is_file() and parts[-1] in _top_level_names(owner)


def _named(doc: Path) -> list[tuple[str, str]]:
    """(kind, name) for every reference the document makes that must exist."""
    text = doc.read_text(encoding="utf-8")
    found: list[tuple[str, str]] = []
    found += [("source path", _source_path(m.group(0))) for m in SOURCE_PATH.finditer(text)]
    found += [("module", m.group(0)) for m in MODULE.finditer(text)]
    for span in BACKTICKED.findall(text):
        for token in span.split():
            token = token.split("#", 1)[0].strip(".,;:()'\"")
            if token.startswith(REPO_DIRS) and not PLACEHOLDER.search(token):
                found.append(("repository path", token))
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "#", "mailto:")):
            continue
        resolved = (doc.parent / target.split("#", 1)[0]).resolve()
        found.append(("link", str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else target))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_named_path_and_module_exists(doc: Path):
    missing = []
    for kind, name in _named(doc):
        ok = _module_exists(name) if kind == "module" else _exists(name)
        if not ok:
            missing.append(f"{kind} {name}")
    assert not missing, f"{doc.relative_to(REPO)} names what does not exist: {sorted(set(missing))}"


def test_the_checker_sees_a_missing_path(tmp_path: Path):
    """The checks fail on what was deleted (report/collect.py was; prefpipe.report.build never existed)."""
    doc = tmp_path / "x.md"
    doc.write_text("See `src/prefpipe/report/collect.py`, prefpipe.report.build and `scripts/nothing.sh`.\n")
    named = {(k, n) for k, n in _named(doc) if not (_module_exists(n) if k == "module" else _exists(n))}
    assert named == {
        ("source path", "src/prefpipe/report/collect.py"),
        ("module", "prefpipe.report.build"),
        ("repository path", "scripts/nothing.sh"),
    }
    assert _module_exists("prefpipe.report") and _exists("src/prefpipe/common")


def _docstrings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef))]
    return [doc for n in nodes if (doc := ast.get_docstring(n))]


def _yaml_comments(path: Path) -> list[str]:
    return [line.split("#", 1)[1] for line in path.read_text(encoding="utf-8").splitlines() if "#" in line]


def test_stages_are_named_by_rule_not_numbered():
    """Stages go by their rule names (prep_data, build_base, ...): a number per stage drifted apart in four
    places before (README, config banners, schema descriptions, docstrings)."""
    texts: dict[str, list[str]] = {str(d.relative_to(REPO)): [d.read_text(encoding="utf-8")] for d in DOCS}
    for path in [REPO / "config" / "config.yaml", *sorted((REPO / "config" / "experiments").glob("*.yaml"))]:
        texts[str(path.relative_to(REPO))] = _yaml_comments(path)
    for path in sorted((REPO / "workflow" / "schemas").glob("*.yaml")):
        texts[str(path.relative_to(REPO))] = [path.read_text(encoding="utf-8")]
    for path in sorted((SRC / "prefpipe").rglob("*.py")):
        texts[str(path.relative_to(REPO))] = _docstrings(path)
    numbered = [
        f"{name}: {match.group(0)!r}"
        for name, chunks in texts.items()
        for chunk in chunks
        for match in STAGE_NUMBER.finditer(chunk)
    ]
    assert not numbered, f"stage numbers (name stages by their rule instead): {numbered}"


def test_config_comments_cite_nothing_a_reader_lacks():
    """Config comments say what a key does and why; measurements and their runs live in docs/findings/FINDINGS.md."""
    paths = [REPO / "config" / "config.yaml", *sorted((REPO / "config" / "experiments").glob("*.yaml"))]
    found = [
        f"{path.relative_to(REPO)}: {match.group(0)!r}"
        for path in paths
        for comment in _yaml_comments(path)
        for match in OUTSIDE_REFERENCE.finditer(comment)
    ]
    assert not found, f"config comments cite what a reader does not have: {found}"


def test_the_product_speaks_of_the_product():
    """Issue numbers, session words and fix labels without their meaning say how the code was made, which a user
    cannot look up: name the thing instead (a fix by what it fixes, a finding by its doc and commit)."""
    found = [
        f"{path.relative_to(REPO)}: {word!r}"
        for path in product_files()
        for word in development_words(path.read_text(encoding="utf-8", errors="replace"))
        if (str(path.relative_to(REPO)), word) not in PRODUCT_WORDS_ALLOWED
    ]
    assert not found, "development words in the product:\n" + "\n".join(found)


def test_the_development_word_scan_catches_each_form():
    text = (
        "see issue 33 item 4; Issue #16; fix 5b: offset; fixes 1-5; in session 13; the seed notes; Session 10"
    )
    assert development_words(text) == [
        "issue 3",
        "Issue #1",
        "fix 5b",
        "fixes 1",
        "session",
        "seed notes",
        "Session",
    ]
    assert development_words("a fixed seed; a prefix 5; the warmup fix: linear; tissue 3") == []
