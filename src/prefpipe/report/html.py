"""Render a Document as one self-contained HTML file: inline CSS, PNGs as base64 data URIs, no scripts, nothing
fetched from anywhere (it opens offline and can be attached to an email).

Layout for a first screen of 1366x768: a one-line title, the scoreboard (compact tables and verdicts), then the
answers, then the contents. Tables never
widen the page: a cell longer than CELL_CHARS is shortened and keeps its full text in a title= hover. Every
piece of text goes through html.escape, sample completions written by a policy included.
"""

from __future__ import annotations

import base64
import html

from prefpipe.report.document import (
    Board,
    Claims,
    Details,
    Document,
    Figure,
    Heading,
    Paragraph,
    Preformatted,
    Section,
    Table,
)

CELL_CHARS = 48

CSS = """
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 0 auto;
       max-width: 1280px; padding: 0.6em 1.5em 2em; color: #1d1d1f; line-height: 1.4; background: #fff;
       font-size: 15px; }
h1 { font-size: 1.35em; margin: 0.2em 0 0; }
h2 { font-size: 1.2em; border-bottom: 2px solid #d0d7de; padding-bottom: 0.15em; margin-top: 1.6em; }
h3 { font-size: 1.05em; margin-top: 1.2em; }
.subtitle { color: #57606a; margin: 0 0 0.3em; font-size: 0.85em; }
#answers h2 { margin-top: 0.4em; }
#answers ul { margin: 0.2em 0; padding-left: 1.2em; }
#answers li { margin: 0.15em 0; }
#answers a { color: #0969da; text-decoration: none; font-size: 0.85em; }
nav { font-size: 0.85em; color: #57606a; margin-top: 0.6em; }
nav a { color: #0969da; text-decoration: none; margin-right: 0.9em; white-space: nowrap; }
.tablewrap { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 0.5em 0 0.2em; font-size: 0.85em; font-variant-numeric: tabular-nums;
        max-width: 100%; }
th, td { border: 1px solid #d0d7de; padding: 0.2em 0.5em; vertical-align: top; overflow-wrap: anywhere; }
th { background: #f6f8fa; }
.num { text-align: right; white-space: nowrap; }
.text { text-align: left; }
caption { caption-side: top; text-align: left; font-weight: 600; padding-bottom: 0.2em; }
tr.ref td { color: #57606a; font-style: italic; background: #fbfbfb; }
tr.flag td { background: #ffebe9; }
span[title] { text-decoration: underline dotted #8c959f; }
p.tablenote, figcaption { color: #57606a; font-size: 0.85em; margin-top: 0.15em; }
p.note { color: #57606a; font-size: 0.9em; margin: 0.3em 0; }
p.warning { color: #82071e; background: #ffebe9; padding: 0.3em 0.6em; border-left: 3px solid #cf222e; }
figure { margin: 0.8em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eaeef2; }
details { margin: 0.5em 0; }
summary { cursor: pointer; font-weight: 600; }
pre { background: #f6f8fa; padding: 0.6em; overflow-x: auto; white-space: pre-wrap; word-break: break-word;
      font-size: 0.82em; border: 1px solid #eaeef2; }
.pretitle { font-weight: 600; margin-bottom: 0.2em; font-size: 0.9em; }
#scoreboard h2 { margin-top: 0.3em; }
#scoreboard table { margin: 0.25em 0 0; font-size: 0.76em; }
#scoreboard th, #scoreboard td { padding: 0.05em 0.45em; }
#scoreboard p.tablenote { margin: 0 0 0.2em; font-size: 0.72em; }
.boards { display: flex; flex-wrap: wrap; column-gap: 1.5em; align-items: flex-start; }
.boardbox { max-width: 100%; }
.boardbox p.tablenote { width: 0; min-width: 100%; }
table.board td:first-child { white-space: nowrap; }
#scoreboard ul { margin: 0.3em 0 0; padding-left: 1.2em; font-size: 0.9em; }
#scoreboard li { margin: 0.05em 0; }
#scoreboard li a { color: #0969da; text-decoration: none; font-size: 0.85em; }
table.board a { color: inherit; text-decoration: none; }
table.board a:hover { text-decoration: underline; }
td.mark-best, td.mark-best_unresolved, td.mark-flag { font-weight: 700; }
td.mark-improved { color: #1a7f37; font-weight: 600; }
td.mark-worse, td.mark-flag { color: #cf222e; }
td.mark-worse { font-weight: 600; }
td.mark-unresolved, td.mark-best_unresolved { color: #9a6700; }
"""


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _cell(text: str) -> str:
    if len(text) <= CELL_CHARS:
        return _esc(text)
    return f'<span title="{_esc(text)}">{_esc(text[: CELL_CHARS - 1].rstrip())}…</span>'


def _html_table(table: Table, align: list[str], body: list[str], css_class: str = "") -> str:
    """The table's wrapper (its anchor), caption, header, the given <tr> rows and its note."""
    head = "".join(f'<th class="{a}">{_cell(c)}</th>' for a, c in zip(align, table.columns, strict=True))
    anchor = f' id="{_esc(table.anchor)}"' if table.anchor else ""
    cls = f' class="{css_class}"' if css_class else ""
    caption = f'<p class="tablenote">{_esc(table.caption)}</p>' if table.caption else ""
    return (
        f'<div class="tablewrap"{anchor}><table{cls}><caption>{_esc(table.title)}</caption><thead><tr>{head}</tr>'
        f"</thead><tbody>{''.join(body)}</tbody></table></div>{caption}"
    )


def _table(table: Table) -> str:
    align = ["num" if n else "text" for n in table.numeric_columns()]
    body = []
    for row, cls in zip(table.rows, table.row_classes, strict=True):
        attr = f' class="{_esc(cls)}"' if cls else ""
        cells = "".join(f'<td class="{a}">{_cell(c)}</td>' for a, c in zip(align, row, strict=True))
        body.append(f"<tr{attr}>{cells}</tr>")
    return _html_table(table, align, body)


def _board(board: Board) -> str:
    """A scoreboard table: each cell a link to its source, its mark as a symbol and a class (colour, weight)."""
    table = board.as_table()
    table.anchor = board.anchor
    align = ["num" if n else "text" for n in board.numeric_columns()]
    body = []
    for row in board.rows:
        cells = [
            f'<td class="{a}{f" mark-{c.mark}" if c.mark else ""}"><a href="#{_esc(c.anchor)}">{_cell(c.shown)}</a></td>'
            for a, c in zip(align, row, strict=True)
        ]
        body.append(f"<tr>{''.join(cells)}</tr>")
    return _html_table(table, align, body, "board")


def _figure(figure: Figure) -> str:
    data = base64.b64encode(figure.png).decode("ascii")
    caption = f"<figcaption>{_esc(figure.caption)}</figcaption>" if figure.caption else ""
    return (
        f'<figure id="{_esc(figure.anchor)}"><img alt="{_esc(figure.title)}" '
        f'src="data:image/png;base64,{data}">{caption}</figure>'
    )


def _block(block: object) -> str:
    if isinstance(block, Paragraph):
        return f'<p class="{_esc(block.kind)}">{_esc(block.text)}</p>'
    if isinstance(block, Heading):
        return f"<h3>{_esc(block.text)}</h3>"
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Figure):
        return _figure(block)
    if isinstance(block, Board):
        return _board(block)
    if isinstance(block, Preformatted):
        return f'<div class="pretitle">{_esc(block.title)}</div><pre>{_esc(block.text)}</pre>'
    if isinstance(block, Claims):
        items = "".join(
            f'<li>{_esc(c.text)} <a href="#{_esc(c.anchor)}">[details]</a></li>' for c in block.items
        )
        return f"<ul>{items}</ul>"
    if isinstance(block, Details):
        inner = "\n".join(_block(b) for b in block.blocks)
        return f"<details><summary>{_esc(block.summary)}</summary>\n{inner}\n</details>"
    raise TypeError(f"unknown report block {type(block).__name__}")


def _blocks(blocks: list) -> str:
    """Blocks in order; consecutive scoreboard boards share a row, side by side where they fit the page (a
    board's note takes its table's width, not the row's: width 0 / min-width 100%), else one under another."""
    out: list[str] = []
    row: list[str] = []
    for block in [*blocks, None]:
        if isinstance(block, Board):
            row.append(f'<div class="boardbox">{_board(block)}</div>')
            continue
        if row:
            out.append(f'<div class="boards">{"".join(row)}</div>')
            row = []
        if block is not None:
            out.append(_block(block))
    return "\n".join(out)


def _section(section: Section) -> str:
    inner = _blocks(section.blocks)
    return f'<section id="{_esc(section.anchor)}"><h2>{_esc(section.title)}</h2>\n{inner}\n</section>'


def render_html(doc: Document) -> str:
    first = ([doc.board] if doc.board else []) + doc.sections[:1]
    rest = doc.sections[1:]
    toc = " ".join(f'<a href="#{_esc(s.anchor)}">{_esc(s.title)}</a>' for s in rest)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # No network at all: images only from data: URIs, no scripts, no external styles or fonts.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:; '
        "style-src 'unsafe-inline'\">"
        f"<title>{_esc(doc.title)}</title><style>{CSS}</style></head>\n<body>\n"
        f'<h1>{_esc(doc.title)}</h1><p class="subtitle">{_esc(doc.subtitle)}</p>\n'
        + "\n".join(_section(s) for s in first)
        + f"\n<nav>Contents: {toc}</nav>\n"
        + "\n".join(_section(s) for s in rest)
        + "\n</body></html>\n"
    )
