"""PDF -> one ``Document`` whose ``meta["pages"]`` says where each page starts.

In: a .pdf file. Out: its visible text, pages joined by a blank line, with
``meta = (("pages", "0,1834,3920,..."),)``: the character offset in ``Document.text``
at which page 1, 2, 3... starts (a page without text starts where the next one does,
so page k spans ``[starts[k-1], starts[k])`` and a bisect on an offset finds its page).
Dropped: text a reader would not see (red team #12), table-of-contents dot leaders
(the title stays), running headers and footers. Pages with no text layer are read by
OCR when the ``ocr`` extra and Tesseract are installed, else named in one warning.
Not here: layout analysis (columns, tables stay as pypdf orders them), forms, annotations.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from .. import rx
from ..types import Document
from .base import needs

log = logging.getLogger("microrag")

# A real page holds a few thousand characters; a crafted one can hold 70 MB of text
# that takes minutes and gigabytes to extract. Pages whose content stream is larger
# than MAX_PDF_PAGE_BYTES are skipped unread, and extracted text is cut at
# MAX_PDF_PAGE_CHARS per page, each with a warning naming the page.
MAX_PDF_PAGE_BYTES = 4_000_000


MAX_PDF_PAGE_CHARS = 100_000

# OCR of pages without a text layer: rendered at OCR_DPI (Tesseract reads ~200-300 dpi
# best), at most MAX_OCR_PIXELS a page (a crafted 200-inch page would be a 1.6 GB
# bitmap), the first MAX_OCR_PAGES pages of a file (a minute-scale cost each), each
# given OCR_TIMEOUT_S.
OCR_DPI = 200
MAX_OCR_PIXELS = 40_000_000
MAX_OCR_PAGES = 50
OCR_TIMEOUT_S = 60


def read_pdf(path: Path, rel: str) -> Document:
    """The visible text of a PDF, its page starts in ``meta["pages"]`` (see the module doc)."""
    from pypdf import PdfReader  # core dependency, imported when a PDF is met

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its own warnings ("EOF marker not found") are ours to word
    reader = PdfReader(str(path))
    pages: list[str] = []
    scanned: list[int] = []  # numbers of pages with no text layer but an image: scans
    for number, page in enumerate(reader.pages, 1):
        contents = page.get_contents()
        size = len(contents.get_data()) if contents is not None else 0
        if size > MAX_PDF_PAGE_BYTES:
            log.warning("%s: page %d skipped: its content stream is %d bytes (limit %d)",
                        rel, number, size, MAX_PDF_PAGE_BYTES)
            pages.append("")
            continue
        text, hidden = _visible_page_text(page)
        if hidden:
            log.warning("%s: page %d: dropped %d piece(s) of text a reader would not see (white, under 1 pt, "
                        "or invisible render mode)", rel, number, hidden)
        if not text and not hidden and _has_images(page):
            scanned.append(number)
        if len(text) > MAX_PDF_PAGE_CHARS:
            log.warning("%s: page %d cut to %d of its %d characters", rel, number, MAX_PDF_PAGE_CHARS, len(text))
            text = text[:MAX_PDF_PAGE_CHARS]
        pages.append(text)
    if scanned:
        if ocr_available():
            try:
                for number, text in _ocr(path, rel, scanned).items():
                    pages[number - 1] = text[:MAX_PDF_PAGE_CHARS]
            except Exception as exc:  # pdfium refusing a file pypdf read: keep the text layer we have
                log.warning("%s: OCR of %d page(s) failed (%s: %s)", rel, len(scanned), type(exc).__name__, str(exc)[:200])
        else:
            log.warning("%s: %d page(s) have no text layer (scanned?); install microrag-engine[ocr] and Debian's "
                        "tesseract-ocr to read them", rel, len(scanned))
    text, starts = join_pages(drop_running_lines([drop_leaders(p) for p in pages]))
    return Document(rel, text, meta=(("pages", ",".join(map(str, starts))),))


def join_pages(pages: list[str]) -> tuple[str, list[int]]:
    """(the pages' texts joined by blank lines, the offset where each starts); a page
    without text starts where the next page with text does (or at the end)."""
    parts: list[str] = []
    starts: list[int] = []
    size, waiting = 0, 0  # characters so far; pages without text waiting for the next start
    for page in pages:
        page = page.strip()
        if not page:
            waiting += 1
            continue
        if parts:
            parts.append("\n\n")
            size += 2
        starts += [size] * (waiting + 1)
        waiting = 0
        parts.append(page)
        size += len(page)
    return "".join(parts), starts + [size] * waiting


# ---------------------------------------------------------------- printed-page furniture

# "asn1_der_decoding . . . . . . 20", "Intro ........ 3", "Preface ...... xi": a
# table-of-contents line; the title stays, the leader and the page number go.
_LEADER = rx.compile(r"(?mi)^([ \t]*\S.*?)[ \t]*(?:(?:[.\x{b7}][ \t]*){4,}|(?:\x{2026}[ \t]*){2,})(?:\d{1,5}|[ivxlcdm]{1,8})[ \t]*$")
_RUNNING_ZONE = 2  # lines at the top and at the bottom of a page where headers and footers sit


def drop_leaders(text: str) -> str:
    """``text`` with the dot leaders and page numbers of table-of-contents lines removed."""
    return _LEADER.sub(r"\1", text)


_PAGE_NUMBER = re.compile(r"^(?:page )?[-–(]? ?(?:0|[ivxlc]{2,}) ?[-–)]?$")


def _running_key(line: str) -> str:
    return " ".join(re.sub(r"\d+", "0", line).split()).lower()  # digits ignored: every number reads 0


def drop_running_lines(pages: list[str]) -> list[str]:
    """The pages without their running headers and footers: a line that recurs (digits
    ignored: "Page 3 of 40") among the top or bottom lines of at least half of the pages,
    when there are three pages or more. A recurring line without digits (the document's
    title) is kept where it first appears: page 1 is often where it is the title."""
    zones: list[tuple[list[str], set[int]]] = []  # (lines, indexes of those in the top or bottom zone)
    seen: Counter[str] = Counter()  # key -> pages where it is in a zone
    for page in pages:
        lines = page.split("\n")
        filled = [i for i, line in enumerate(lines) if line.strip()]
        zone = set(filled[:_RUNNING_ZONE] + filled[-_RUNNING_ZONE:])
        zones.append((lines, zone))
        seen.update({_running_key(lines[i]) for i in zone})
    with_text = sum(1 for p in pages if p.strip())
    if with_text < 3:
        return pages
    running = {k for k, n in seen.items() if n >= 2 and 2 * n >= with_text}
    met: set[str] = set()  # running lines without digits already kept once
    out = []
    for lines, zone in zones:
        kept = []
        for i, line in enumerate(lines):
            key = _running_key(line) if i in zone else ""
            if (key in running and ("0" in key or key in met)) or (key and _PAGE_NUMBER.match(key)):
                continue  # a running line, or a bare page number ("5", "- 12 -", "xiv") at the top or bottom
            met.add(key)
            kept.append(line)
        out.append("\n".join(kept))
    return out


# ---------------------------------------------------------------- pages without a text layer


def _has_images(page: Any) -> bool:
    try:
        return len(page.images) > 0
    except Exception:  # a broken image dictionary: not worth failing the page for
        return False


def ocr_available() -> bool:
    """Whether scanned pages can be read: the ``ocr`` extra and the ``tesseract`` program."""
    try:
        import pypdfium2  # noqa: F401
        import pytesseract
    except ImportError:
        return False
    return shutil.which(pytesseract.pytesseract.tesseract_cmd) is not None


def _ocr(path: Path, rel: str, numbers: list[int]) -> dict[int, str]:
    """Page number -> text Tesseract reads on the rendered page, for the first MAX_OCR_PAGES."""
    with needs("ocr"):
        import pypdfium2 as pdfium
        import pytesseract

    if len(numbers) > MAX_OCR_PAGES:
        log.warning("%s: %d pages have no text layer; OCR reads the first %d", rel, len(numbers), MAX_OCR_PAGES)
    found: dict[int, str] = {}
    pdf = pdfium.PdfDocument(str(path))
    try:
        for number in numbers[:MAX_OCR_PAGES]:
            page = pdf[number - 1]
            width, height = page.get_size()  # points, 72 an inch
            scale = min(OCR_DPI / 72, (MAX_OCR_PIXELS / max(width * height, 1.0)) ** 0.5)
            image = page.render(scale=scale, grayscale=True).to_pil()
            try:
                found[number] = pytesseract.image_to_string(image, timeout=OCR_TIMEOUT_S)
            except RuntimeError as exc:  # pytesseract's timeout
                log.warning("%s: page %d: OCR stopped (%s)", rel, number, exc)
    finally:
        pdf.close()
    return found


# ---------------------------------------------------------------- what a reader would not see

_SHOW_TEXT = {b"Tj", b"TJ", b"'", b'"'}


def _visible_page_text(page) -> tuple[str, int]:
    """(the text of a pypdf page a reader can see, how many pieces were dropped).

    Red team #12: an instruction in white, sub-point or invisible-mode (``3 Tr``) text is
    read by the model but never by the person who approved the file. The graphics state
    (fill colour, render mode, ``q``/``Q``) is tracked operator by operator; pypdf hands
    text over in pieces (at ``ET`` and line moves), and a piece is dropped when every
    text-showing operator in it was hidden. A piece that mixes hidden and visible text is
    kept: the visible words must not be lost (the residual risk, SECURITY.md).
    """
    state: dict[str, Any] = {"white": False, "mode": 0}  # graphics state: fill is white, render mode, font size
    stack: list[dict] = []
    shown: list[bool] = []  # hidden? per text-showing operator since the last piece
    kept: list[str] = []
    dropped = 0

    def number(x) -> float:
        try:
            return float(x)
        except (TypeError, ValueError):
            return 0.0

    def before(op: bytes, args, cm, tm) -> None:
        if op == b"q":
            stack.append(dict(state))
        elif op == b"Q" and stack:
            state.update(stack.pop())
        elif op == b"Tr" and args:
            state["mode"] = int(number(args[0]))
        elif op in (b"rg", b"sc", b"scn", b"g") and len(args) in (1, 3) and not hasattr(args[-1], "startswith"):
            state["white"] = all(number(a) >= 0.95 for a in args)
        elif op == b"k" and len(args) == 4:
            state["white"] = all(number(a) <= 0.05 for a in args)
        elif op in _SHOW_TEXT:
            scale = abs(tm[0] * tm[3] - tm[1] * tm[2]) ** 0.5 * abs(cm[0] * cm[3] - cm[1] * cm[2]) ** 0.5
            shown.append(state["white"] or state["mode"] in (3, 7) or scale * state.get("size", 12.0) < 1.0)
        if op == b"Tf" and len(args) == 2:
            state["size"] = number(args[1])

    def text(piece: str, cm, tm, font, size) -> None:
        nonlocal dropped
        hidden = bool(shown) and all(shown)
        if piece.strip():
            shown.clear()
        if hidden and piece.strip():
            dropped += 1
        else:
            kept.append(piece)

    page.extract_text(visitor_operand_before=before, visitor_text=text)
    return re.sub(r"\n{3,}", "\n\n", "".join(kept)).strip(), dropped
