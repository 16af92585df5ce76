"""Small rooms: no file in src/ over MAX_FILE_LINES lines, no function over MAX_FUNCTION_LINES lines unless its
`def` line carries a `# long: <reason>` comment saying why it stays whole, and no package holding more than
MAX_PACKAGE_MODULES modules side by side (the .py files directly in its folder, `__init__.py` included).

A function's length counts from its first decorator (or `def`) to its last line, docstring included; nested
functions count inside their parent and on their own. Run this file as a script to list the longest ones.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_PACKAGE_MODULES = 20
LONG_REASON = re.compile(r"#\s*long:\s*\S")  # on the def line: why this function stays whole


@dataclass(frozen=True)
class Function:
    path: str  # relative to the repository
    line: int  # of the def
    name: str  # dotted within the file (Class.method, outer.inner)
    lines: int
    reason: bool  # the def line says why it is long

    def where(self) -> str:
        return f"{self.path}:{self.line} {self.name} ({self.lines} lines)"


def _def_line_has_reason(source: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A `# long:` comment on any line of the signature (from `def` up to the body's first line)."""
    last = node.body[0].lineno - 1 if node.body else node.lineno
    return any(LONG_REASON.search(source[i - 1]) for i in range(node.lineno, max(last, node.lineno) + 1))


def functions(path: Path, src: Path = SRC) -> list[Function]:
    text = path.read_text(encoding="utf-8")
    source = text.splitlines()
    rel = str(path.relative_to(src.parent))
    found: list[Function] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                name = f"{prefix}{child.name}"
                length = (child.end_lineno or child.lineno) - start + 1
                found.append(Function(rel, child.lineno, name, length, _def_line_has_reason(source, child)))
                walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(ast.parse(text, filename=str(path)), "")
    return found


def source_files(src: Path = SRC) -> list[Path]:
    return sorted(src.rglob("*.py"))


def file_lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_source_file_is_over_the_limit():
    long_files = [
        f"{p.relative_to(SRC.parent)} ({n} lines)"
        for p in source_files()
        if (n := file_lines(p)) > MAX_FILE_LINES
    ]
    assert long_files == [], f"files over {MAX_FILE_LINES} lines: split them by job"


def package_modules(src: Path = SRC) -> dict[str, int]:
    """Each package folder under src/ (relative path) and how many .py files lie directly in it."""
    folders = {p.parent for p in source_files(src)}
    return {str(d.relative_to(src.parent)): len(list(d.glob("*.py"))) for d in sorted(folders)}


def test_no_package_is_over_the_limit():
    crowded = [f"{path} ({n} modules)" for path, n in package_modules().items() if n > MAX_PACKAGE_MODULES]
    assert crowded == [], f"packages over {MAX_PACKAGE_MODULES} modules: split them into rooms (subpackages)"


def test_the_package_count_reads_one_folder(tmp_path):
    src = tmp_path / "src"
    (src / "pkg" / "room").mkdir(parents=True)
    for name in ("__init__", "a", "b"):
        (src / "pkg" / f"{name}.py").write_text("")
    (src / "pkg" / "room" / "__init__.py").write_text("")
    (src / "pkg" / "notes.md").write_text("")
    assert package_modules(src) == {"src/pkg": 3, "src/pkg/room": 1}


def test_no_function_is_over_the_limit_without_a_reason():
    unexplained = [
        f.where()
        for p in source_files()
        for f in functions(p)
        if f.lines > MAX_FUNCTION_LINES and not f.reason
    ]
    assert unexplained == [], (
        f"functions over {MAX_FUNCTION_LINES} lines: split them, or say why on the def line (# long: <reason>)"
    )


def test_the_scan_measures_and_reads_reasons(tmp_path):
    """The scan itself on a file written here: lengths from the decorator, nesting, and the reason comment."""
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    module = src / "pkg" / "m.py"
    module.write_text(
        "import functools\n\n\n"
        f"@functools.cache\ndef long_one():\n{body}\n\n\n"
        f"def explained():  # long: one table, read top to bottom\n{body}\n\n\n"
        "class C:\n    def short(self):\n        return 1\n",
        encoding="utf-8",
    )
    found = {f.name: f for f in functions(module, src=src)}
    assert found["long_one"].lines == MAX_FUNCTION_LINES + 2 and not found["long_one"].reason
    assert found["explained"].lines == MAX_FUNCTION_LINES + 1 and found["explained"].reason
    assert found["C.short"].lines == 2 and found["C.short"].line == 2 * MAX_FUNCTION_LINES + 12
    assert found["long_one"].path == "src/pkg/m.py" and found["long_one"].line == 5
    assert file_lines(module) == 2 * MAX_FUNCTION_LINES + 13


if __name__ == "__main__":
    every = [f for p in source_files() for f in functions(p)]
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    for f in sorted(every, key=lambda f: -f.lines)[:count]:
        print(f.where(), "# long: given" if f.reason else "")
    biggest = max(source_files(), key=file_lines)
    print(f"largest file: {biggest.relative_to(SRC.parent)} ({file_lines(biggest)} lines)")
    for path, n in sorted(package_modules().items(), key=lambda item: -item[1]):
        print(f"{n:3d} modules  {path}")
