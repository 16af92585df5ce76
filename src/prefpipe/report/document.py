"""The report as plain data (sections of claims, paragraphs, tables, figures, text blocks), rendered twice: as
self-contained HTML (html.py) and as Markdown (markdown.py), so both always hold the same tables.

All text here is plain, unescaped text; each renderer escapes it for its own format.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass
class Paragraph:
    text: str
    kind: str = "text"  # text | note (not recorded) | warning (unreadable / flagged)


@dataclass
class Heading:
    text: str


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    caption: str = ""
    row_classes: list[str] = field(default_factory=list)  # per row: "" | "ref" (reference row) | "flag"
    anchor: str = ""  # id a claim can link to

    def __post_init__(self) -> None:
        for i, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise ValueError(
                    f"table {self.title!r}: row {i} has {len(row)} cells for {len(self.columns)} columns"
                )
        if not self.row_classes:
            self.row_classes = [""] * len(self.rows)

    def numeric_columns(self) -> list[bool]:
        """Per column: right-align it (most filled cells start like a number; '–' counts as empty)."""
        flags = []
        for i in range(len(self.columns)):
            cells = [row[i].strip() for row in self.rows if row[i].strip() not in ("", "–")]
            numeric = [c for c in cells if c[0].isdigit() or c[0] in "+-.["]
            flags.append(bool(cells) and len(numeric) * 2 > len(cells))
        return flags


@dataclass
class Figure:
    name: str  # file stem for the Markdown copy (figures/<name>.png)
    title: str
    png: bytes
    caption: str = ""

    @property
    def anchor(self) -> str:
        return f"fig-{slug(self.name)}"


@dataclass
class Preformatted:
    title: str
    text: str


@dataclass
class Claim:
    """One answer sentence and the table or chart that backs it (#anchor)."""

    text: str
    anchor: str


@dataclass
class Claims:
    items: list[Claim]


# Scoreboard marks: a symbol (and weight, in both renderers) besides any colour, so each reads in grey scale.
MARKS = {
    "best": "★",  # best in its column
    "best_unresolved": "☆",  # best in its column, but the runner-up's interval overlaps it
    "improved": "▲",  # interval above 0
    "unresolved": "≈",  # interval contains 0
    "worse": "▼",  # interval below 0
    "flag": "⚠",  # hacked
}


@dataclass
class Cell:
    """One scoreboard cell: its text, the anchor of the table or section it comes from, and its mark."""

    text: str
    anchor: str
    mark: str = ""

    def __post_init__(self) -> None:
        if self.mark and self.mark not in MARKS:
            raise ValueError(
                f"scoreboard cell {self.text!r}: unknown mark {self.mark!r} (known: {list(MARKS)})"
            )

    @property
    def shown(self) -> str:
        return f"{MARKS[self.mark]} {self.text}" if self.mark else self.text


@dataclass
class Board:
    """A scoreboard table: every cell links to where its figure is shown in full."""

    title: str
    columns: list[str]
    rows: list[list[Cell]]
    caption: str = ""
    anchor: str = ""

    def as_table(self) -> Table:
        """The same table as plain text (each cell as shown, marks included)."""
        return Table(self.title, self.columns, [[c.shown for c in row] for row in self.rows], self.caption)

    def numeric_columns(self) -> list[bool]:
        """Per column: right-align it (read on the figures, without their marks)."""
        return Table(self.title, self.columns, [[c.text for c in row] for row in self.rows]).numeric_columns()


@dataclass
class Details:
    """Collapsed in HTML (<details>): settings, versions and raw dumps."""

    summary: str
    blocks: list


Block = Paragraph | Heading | Table | Figure | Preformatted | Claims | Details | Board


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)
    anchor: str = ""

    def __post_init__(self) -> None:
        self.anchor = self.anchor or slug(self.title)


@dataclass
class Document:
    title: str
    subtitle: str
    sections: list[Section]
    board: Section | None = None  # the scoreboard, above the sections (and the Markdown contents)

    def blocks(self) -> list[Block]:
        """Every block, the scoreboard's and those inside Details too."""
        out: list[Block] = []
        sections = [self.board, *self.sections] if self.board else self.sections
        stack = [b for s in sections for b in s.blocks]
        while stack:
            block = stack.pop(0)
            out.append(block)
            if isinstance(block, Details):
                stack[:0] = block.blocks
        return out

    def figures(self) -> list[Figure]:
        return [b for b in self.blocks() if isinstance(b, Figure)]

    def tables(self) -> list[Table]:
        """Every table in reading order, the scoreboard's as plain text."""
        return [
            b.as_table() if isinstance(b, Board) else b for b in self.blocks() if isinstance(b, Table | Board)
        ]


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"
