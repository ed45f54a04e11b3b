"""Office files -> Markdown-like text: .docx (python-docx), .pptx (python-pptx), .xlsx (openpyxl).

In: a file (untrusted), its zip size checked before parsing. Out: its text, with
"#" headings, "- " list items, " | " between table cells.
* .docx: body paragraphs and tables in document order; heading styles -> "#", list
  paragraphs -> "- ". Runs a reader would not see (hidden, white, under 2 pt) dropped.
* .pptx: "# Slide N: title" a slide, its text frames, tables, then its speaker notes.
  Hidden slides and shapes dropped.
* .xlsx: "# Sheet: name" a sheet, a row a line, read streaming (read-only mode) and
  bounded: MAX_XLSX_ROWS rows, MAX_XLSX_COLS columns a sheet, MAX_XLSX_CELLS cells a file.
  Hidden sheets dropped. Formulas read as their last computed value.
Each drop or cut is said in one warning.
Not here: headers and footers (page furniture), footnotes, comments, text boxes, content
controls and tables nested in a cell (python-docx does not expose them), charts, white
text in slides and sheets.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .base import cell, check_zip, layout, needs

log = logging.getLogger("microrag")

_HEADING_STYLE = re.compile(r"^Heading ([1-9])$")
_TINY_PT = 2.0  # text smaller than this is unreadable


# ---------------------------------------------------------------- .docx


def docx_text(path: Path, rel: str) -> str:
    """The text of a .docx, body order kept (see the module doc)."""
    check_zip(path)
    with needs("formats"):
        import docx
        from docx.table import Table

    document = docx.Document(str(path))
    styles = _Styles(document)
    out: list[str] = []
    hidden = 0
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            out.append("")
            for row in _docx_rows(block):
                line = []
                for c in row:
                    texts = [_docx_paragraph(p, styles) for p in c.paragraphs]
                    hidden += sum(n for _, n in texts)
                    line.append(cell(" ".join(t for t, _ in texts)))
                out.append(" | ".join(line))
            out.append("")
            continue
        text, dropped = _docx_paragraph(block, styles)
        hidden += dropped
        prefix = _docx_prefix(block, styles)
        if text.strip():  # list items on consecutive lines, other paragraphs between blank lines
            out += [prefix + text.strip()] if prefix == "- " else ["", prefix + text.strip(), ""]
    if hidden:
        log.warning("%s: dropped %d run(s) of text a reader would not see (hidden, white or under %g pt)", rel, hidden, _TINY_PT)
    return layout("\n".join(out))


def _docx_rows(table: Any) -> Iterator[list[Any]]:
    """Each row's cells, a horizontally merged cell once (python-docx repeats it per grid column)."""
    for row in table.rows:
        cells: list[Any] = []
        for c in row.cells:
            if not cells or c._tc is not cells[-1]._tc:
                cells.append(c)
        yield cells


class _Styles:
    """One document's styles by id, resolved as python-docx resolves them (a missing id, or
    one of another type, falls back to the type's default: the last marked default), each
    looked up once per document. python-docx walks every style for each lookup, in Python
    (the default one by reading each style's attributes): that was 2 s of 7.4 s to read 300
    one-page files (#34); here one XPath query per id or default."""

    def __init__(self, document: Any) -> None:
        from docx.enum.style import WD_STYLE_TYPE
        from docx.oxml.ns import nsmap
        from docx.styles.style import StyleFactory
        from lxml import etree

        self._kinds = WD_STYLE_TYPE
        self._factory = StyleFactory
        self._element = document.styles.element
        # The id and type go in as XPath variables, never into the query's text: python-docx's
        # own lookup pastes the id in, so a hostile id ('A" or "1"="1') picked another style
        # (a hidden one read as shown, or the reverse) and a '"' in an id failed the file.
        self._by_id = etree.XPath("w:style[@w:styleId=$sid]", namespaces=nsmap)
        self._marked = etree.XPath("w:style[@w:type=$kind][@w:default]", namespaces=nsmap)
        self._made: dict[tuple[str | None, Any], Any] = {}

    def _style(self, style_id: str | None, kind: Any) -> Any:
        key = (style_id, kind)
        if key not in self._made:
            found = self._by_id(self._element, sid=style_id) if style_id else []
            element = found[0] if found else None
            if element is None or element.type != kind:
                # ``CT_Style.default`` reads the on/off value as python-docx does ("1", "true", "on")
                defaults = [e for e in self._marked(self._element, kind=kind.xml_value) if e.default]
                element = defaults[-1] if defaults else None
            self._made[key] = None if element is None else self._factory(element)
        return self._made[key]

    def of_paragraph(self, paragraph: Any) -> Any:
        return self._style(paragraph._p.style, self._kinds.PARAGRAPH)

    def of_run(self, run: Any) -> Any:
        return self._style(run._r.style, self._kinds.CHARACTER)


def _docx_prefix(paragraph: Any, styles: _Styles) -> str:
    own = styles.of_paragraph(paragraph)
    style = own.name if own is not None else ""
    heading = _HEADING_STYLE.match(style)
    if heading or style == "Title":
        return "#" * (int(heading.group(1)) if heading else 1) + " "
    ppr = paragraph._p.pPr
    if style.startswith("List") or (ppr is not None and ppr.numPr is not None):
        return "- "
    return ""


def _docx_paragraph(paragraph: Any, styles: _Styles) -> tuple[str, int]:
    """(the visible text of a paragraph, hyperlinks included; how many runs were hidden)."""
    from docx.text.hyperlink import Hyperlink

    own = styles.of_paragraph(paragraph)
    style_hidden = bool(own is not None and own.font.hidden)
    parts: list[str] = []
    dropped = 0
    for item in paragraph.iter_inner_content():
        for run in item.runs if isinstance(item, Hyperlink) else [item]:
            if not run.text:
                continue
            if style_hidden or _docx_run_hidden(run, styles):
                dropped += 1
            else:
                parts.append(run.text)
    return "".join(parts).replace("\n", " "), dropped


def _docx_run_hidden(run: Any, styles: _Styles) -> bool:
    font = run.font
    own = styles.of_run(run)
    if font.hidden or (own is not None and own.font.hidden):
        return True
    if font.size is not None and font.size.pt < _TINY_PT:
        return True
    # White text on the default white page; a highlight makes it readable.
    rgb = font.color.rgb if font.color is not None and font.color.type is not None else None
    return rgb is not None and str(rgb).upper() in ("FFFFFF", "FEFEFE") and font.highlight_color is None


# ---------------------------------------------------------------- .pptx


def pptx_text(path: Path, rel: str) -> str:
    """The text of a .pptx: a section a slide, speaker notes last (see the module doc)."""
    check_zip(path)
    with needs("formats"):
        from pptx import Presentation
        from pptx.shapes.group import GroupShape

    out: list[str] = []
    hidden_slides = hidden_shapes = 0
    for number, slide in enumerate(Presentation(str(path)).slides, 1):
        if slide._element.get("show") in ("0", "false"):
            hidden_slides += 1
            continue
        title = slide.shapes.title
        heading = cell(title.text_frame.text) if title is not None and title.has_text_frame else ""
        out += ["", f"# Slide {number}: {heading}" if heading else f"# Slide {number}", ""]
        shapes = list(slide.shapes)
        while shapes:  # groups opened in place, without recursion
            shape = shapes.pop(0)
            if _pptx_hidden(shape):
                hidden_shapes += 1
            elif isinstance(shape, GroupShape):
                shapes[:0] = list(shape.shapes)
            elif title is not None and shape.shape_id == title.shape_id:
                continue
            elif getattr(shape, "has_table", False) and shape.has_table:
                out += ["", *(" | ".join(cell(c.text) for c in row.cells) for row in shape.table.rows), ""]
            elif shape.has_text_frame:
                bullet = "- " if shape.is_placeholder and _pptx_body(shape) else ""
                out += [bullet + cell(p.text) for p in shape.text_frame.paragraphs if p.text.strip()]
                out.append("")
        notes = slide.notes_slide.notes_text_frame if slide.has_notes_slide else None
        if notes is not None and notes.text.strip():
            out += ["", "Notes: " + cell(notes.text), ""]
    if hidden_slides or hidden_shapes:
        log.warning("%s: dropped %d hidden slide(s) and %d hidden shape(s)", rel, hidden_slides, hidden_shapes)
    return layout("\n".join(out))


def _pptx_hidden(shape: Any) -> bool:
    props = shape._element.find(".//{http://schemas.openxmlformats.org/presentationml/2006/main}cNvPr")
    return props is not None and props.get("hidden") in ("1", "true")


def _pptx_body(shape: Any) -> bool:
    """A body or content placeholder: its paragraphs are bullets."""
    from pptx.enum.shapes import PP_PLACEHOLDER

    try:
        kind = shape.placeholder_format.type
    except ValueError:
        return False
    return kind in (PP_PLACEHOLDER.BODY, PP_PLACEHOLDER.OBJECT, None)


# ---------------------------------------------------------------- .xlsx

# A sheet can declare a million rows of sixteen thousand columns; these bound the work.
MAX_XLSX_ROWS = 10_000  # a sheet
MAX_XLSX_COLS = 256  # a sheet
MAX_XLSX_CELLS = 500_000  # non-empty, a file


def xlsx_text(path: Path, rel: str) -> str:
    """The text of an .xlsx: a section a visible sheet, a line a row (see the module doc)."""
    check_zip(path)
    with needs("formats"):
        from openpyxl import load_workbook

    with warnings.catch_warnings():  # openpyxl warns on every extension it does not read
        warnings.simplefilter("ignore")
        book = load_workbook(str(path), read_only=True, data_only=True)
    out: list[str] = []
    cells = 0
    hidden: list[str] = []
    try:
        for sheet in book.worksheets:
            if sheet.sheet_state != "visible":
                hidden.append(sheet.title)
                continue
            out += ["", f"# Sheet: {sheet.title}", ""]
            if (sheet.max_column or 0) > MAX_XLSX_COLS:
                log.warning("%s: sheet %r: columns past %d not read", rel, sheet.title, MAX_XLSX_COLS)
            sheet.reset_dimensions()  # the declared size may be a lie: read what is there
            for k, row in enumerate(sheet.iter_rows(max_row=MAX_XLSX_ROWS + 1, max_col=MAX_XLSX_COLS, values_only=True)):
                if k == MAX_XLSX_ROWS:
                    log.warning("%s: sheet %r: rows past %d not read", rel, sheet.title, MAX_XLSX_ROWS)
                    break
                values = [_xlsx_value(v) for v in row]
                while values and not values[-1]:
                    values.pop()
                cells += sum(1 for v in values if v)
                if cells > MAX_XLSX_CELLS:
                    log.warning("%s: cut at %d cells (sheet %r, row %d)", rel, MAX_XLSX_CELLS, sheet.title, k + 1)
                    break
                if values:
                    out.append(" | ".join(values))
            if cells > MAX_XLSX_CELLS:
                break
    finally:
        book.close()
    if hidden:
        log.warning("%s: dropped %d hidden sheet(s): %s", rel, len(hidden), ", ".join(map(repr, hidden)))
    return layout("\n".join(out))


def _xlsx_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, dt.datetime) and value.time() == dt.time(0):
        return value.date().isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return cell(str(value))


READERS: dict[str, Callable[[Path, str], str]] = {".docx": docx_text, ".pptx": pptx_text, ".xlsx": xlsx_text}
