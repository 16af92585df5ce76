"""Render a Document as Markdown (GitHub pipe tables) with the same tables as the HTML, for papers.

Figures are referenced as files (figures/<name>.png, written beside report.md) or left out.
"""

from __future__ import annotations

import re

from prefpipe.report.document import (
    Board,
    Claims,
    Details,
    Document,
    Figure,
    Heading,
    Paragraph,
    Preformatted,
    Table,
)

# CommonMark ends a line at \n, \r or \r\n: any of them inside a cell, heading or list item would end it early.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# Characters that would start markup (code, emphasis, raw HTML, strikethrough), always escaped; '_' only where it
# can open or close emphasis (not inside words like kl_k3_mean); ']' only where it could close a link; '&' only
# where it would start an entity.
_MARKUP = re.compile(r"[\\`*<~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|\](?=[(\[:])|&(?=#?[A-Za-z0-9]+;)")
_LINK_MARKUP = re.compile(_MARKUP.pattern + r"|[\[\]]")
PIPE = "\\|"  # a '|' inside a table cell


def _one_line(text: object) -> str:
    """Text on one line (line breaks shown as ' / '), for places Markdown ends at a line break."""
    return _LINE_BREAK.sub(" / ", str(text))


def _inline(text: object, markup: re.Pattern[str] = _MARKUP) -> str:
    """Plain text as one line of Markdown that renders as exactly that text (line breaks as ' / ')."""
    return _one_line(markup.sub(lambda m: "\\" + m.group(0), str(text)))


def _link_text(text: object) -> str:
    """Text between [ and ] of a link or image: _inline with every bracket escaped."""
    return _inline(text, _LINK_MARKUP)


def _cell(text: object) -> str:
    """Table-cell text: _inline plus the cell separator '|' escaped."""
    return _inline(text).replace("|", "\\|")


def _pipe_table(table: Table, numeric: list[bool], rows: list[list[str]]) -> str:
    """The table's bold title, header, alignment row, the given Markdown rows and its caption."""
    lines = [f"**{_cell(table.title)}**", ""]
    lines.append("| " + " | ".join(_cell(c) for c in table.columns) + " |")
    lines.append("|" + "|".join("---:" if n else "---" for n in numeric) + "|")
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    if table.caption:
        lines += ["", f"_{_cell(table.caption)}_"]
    return "\n".join(lines)


def _table(table: Table) -> str:
    rows = []
    for row, cls in zip(table.rows, table.row_classes, strict=True):
        cells = [_cell(c) for c in row]
        rows.append([f"*{c}*" if c else c for c in cells] if cls == "ref" else cells)
    return _pipe_table(table, table.numeric_columns(), rows)


def _board(board: Board) -> str:
    """A scoreboard as a pipe table whose cells link to their source; best-in-column cells in bold."""
    rows = []
    for row in board.rows:
        links = [f"[{_link_text(c.shown).replace('|', PIPE)}](#{c.anchor})" for c in row]
        rows.append([f"**{t}**" if c.mark.startswith("best") else t for t, c in zip(links, row, strict=True)])
    return _pipe_table(board.as_table(), board.numeric_columns(), rows)


def _fence(text: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _blocks(blocks: list, figure_dir: str | None) -> list[str]:
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, Paragraph):
            prefix = {"note": "> ", "warning": "> **Warning:** "}.get(block.kind, "")
            parts.append(prefix + _inline(block.text))
        elif isinstance(block, Heading):
            parts.append(f"### {_inline(block.text)}")
        elif isinstance(block, Table):
            parts.append(_table(block))
        elif isinstance(block, Board):
            parts.append(_board(block))
        elif isinstance(block, Figure):
            if figure_dir is None:
                parts.append(f"_Figure omitted: {_inline(block.title)}._")
            else:
                parts.append(f"![{_link_text(block.title)}]({figure_dir}/{block.name}.png)")
                parts.append(f"_{_inline(block.caption or block.title)}_")
        elif isinstance(block, Preformatted):
            fence = _fence(block.text)
            parts += [f"**{_inline(block.title)}**", "", fence + "text", block.text, fence]
        elif isinstance(block, Claims):
            parts += [f"- {_inline(c.text)} ([details](#{c.anchor}))" for c in block.items]
        elif isinstance(block, Details):
            parts += [f"### {_inline(block.summary)}", "", *_blocks(block.blocks, figure_dir)]
        parts.append("")
    return parts


def render_markdown(doc: Document, figure_dir: str | None = "figures") -> str:
    """Markdown text; with figure_dir=None the plots are omitted (their titles stay as a note)."""
    parts = [f"# {_inline(doc.title)}", "", _inline(doc.subtitle), ""]
    if doc.board is not None:  # the scoreboard first, above the contents: what follows it is unchanged
        parts += [f"## {_inline(doc.board.title)}", "", *_blocks(doc.board.blocks, figure_dir)]
    parts += [f"{i}. [{_link_text(s.title)}](#{s.anchor})" for i, s in enumerate(doc.sections, start=1)]
    for section in doc.sections:
        parts += ["", f"## {_inline(section.title)}", ""]
        parts += _blocks(section.blocks, figure_dir)
    return "\n".join(parts).rstrip() + "\n"
