"""Step 1a - load: paths and uploads -> ``Document`` records.

Reads .md/.markdown/.txt/.html/.htm/.pdf and pre-chunked .jsonl
(``{"id","doc","text"}``), with front matter (``label: restricted``) as metadata.
What a reader would not see is dropped with a warning: hidden HTML elements, and
PDF text in white, under 1 pt or in an invisible render mode. A file we cannot
read is skipped with one warning line naming it. This module does not chunk.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .errors import CorpusError
from .types import Chunk, Document

log = logging.getLogger("microrag")


TEXT_SUFFIXES = {".md", ".markdown", ".txt"}


HTML_SUFFIXES = {".html", ".htm"}


SUPPORTED = TEXT_SUFFIXES | HTML_SUFFIXES | {".pdf", ".jsonl"}


_FRONT = re.compile(r"\A---[ \t]*\n(.*?)\n---[ \t]*(?:\n|\Z)", re.S)


def split_front_matter(text: str) -> tuple[dict[str, str], str]:
    """``key: value`` lines between leading ``---`` fences, and the text after them."""
    m = _FRONT.match(text)
    if not m:
        return {}, text
    meta = {}
    for line in m.group(1).splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            meta[key.strip().lower()] = value.strip().strip("'\"")
    return meta, text[m.end() :]


def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    if b"\x00" in raw[:8192]:
        raise ValueError("looks binary (NUL bytes)")
    return raw.decode("utf-8")  # UnicodeDecodeError is a ValueError


def _read_html(path: Path) -> str:
    return html_text(_read_text(path), path.name)


# ---------------------------------------------------------------- what a browser would not show

# Red team #12: instructions hidden from the reader but indexed for the model. Styles are
# parsed as CSS (tinycss2: comments, escapes and !important handled as a browser does),
# inline and in <style> rules (matched with soupsieve's selectors), and judged by effect.
_OFFSCREEN_PX = 999  # position/indent this far off the page (the "left:-9999px" trick)


def _values(decl) -> list:
    return [t for t in decl.value if t.type not in ("whitespace", "comment")]


def _length_px(token) -> float | None:
    """A length in CSS px where the unit says so (0 in any unit is 0); None otherwise."""
    if token.type == "number" and token.value == 0:
        return 0.0
    if token.type == "percentage":
        return token.value / 100 * 16
    if token.type == "dimension":
        scale = {"px": 1, "pt": 4 / 3, "em": 16, "rem": 16, "ex": 8, "ch": 8, "cm": 37.8, "mm": 3.78, "in": 96}.get(token.lower_unit)
        return None if scale is None else token.value * scale
    return None


def _transparent(tokens) -> bool:
    from tinycss2.color3 import parse_color

    color = parse_color(tokens[0]) if len(tokens) == 1 else None
    return color is not None and color != "currentColor" and (color.alpha <= 0.05 or color[:3] == (1.0, 1.0, 1.0))


def _hides(declarations: list) -> str:
    """Why these declarations hide an element's text ("" when they do not)."""
    found = {d.lower_name: _values(d) for d in declarations if d.type == "declaration"}
    first = {k: (v[0] if v else None) for k, v in found.items()}
    ident = {k: (t.lower_value if t is not None and t.type == "ident" else "") for k, t in first.items()}
    if ident.get("display") == "none":
        return "display:none"
    if ident.get("visibility") in ("hidden", "collapse"):
        return "visibility"
    opacity = first.get("opacity")
    if opacity is not None and opacity.type in ("number", "percentage") and opacity.value <= (5 if opacity.type == "percentage" else 0.05):
        return "opacity"
    size = _length_px(first["font-size"]) if first.get("font-size") is not None else None
    if size is not None and size < 2:
        return "font-size"
    # White or transparent text (a page without a background is white): as with PDFs.
    if found.get("color") and "background" not in found and "background-color" not in found and _transparent(found["color"]):
        return "colour"
    for prop in ("left", "top", "right", "text-indent", "margin-left", "margin-top"):
        off = _length_px(first[prop]) if first.get(prop) is not None else None
        if off is not None and off <= -_OFFSCREEN_PX:
            return "off-screen"
    sizes = [_length_px(first[p]) for p in ("width", "height") if first.get(p) is not None]
    if ident.get("overflow") == "hidden" and any(size is not None and size <= 1 for size in sizes):
        return "zero size"
    clip = found.get("clip-path") or found.get("clip")
    if clip and clip[0].type == "function" and clip[0].lower_name in ("inset", "rect", "circle"):
        args = [_length_px(t) for t in clip[0].arguments if t.type in ("number", "dimension", "percentage")]
        if clip[0].lower_name == "inset" and any(t.type == "percentage" and t.value >= 50 for t in clip[0].arguments):
            return "clipped"
        if args and all(a == 0 for a in args if a is not None):
            return "clipped"
    transform = first.get("transform")
    if transform is not None and transform.type == "function" and transform.lower_name.startswith("scale"):
        if any(t.type == "number" and t.value == 0 for t in transform.arguments):
            return "scaled to zero"
    return ""


def _hidden_elements(soup) -> list:
    """Elements whose text a browser would not show: the ``hidden`` attribute, hiding
    inline styles, and elements a hiding <style> rule selects."""
    import tinycss2

    def background(tag) -> bool:  # white text is only hidden on the default white page
        return any("background" in (t.get("style") or "").lower() or t.has_attr("bgcolor") for t in [tag, *tag.parents])

    sheets = " ".join(sheet.get_text() for sheet in soup.find_all("style")).lower()
    hidden = [tag for tag in soup.find_all(True) if tag.has_attr("hidden")]
    for tag in soup.find_all(style=True):
        why = _hides(tinycss2.parse_declaration_list(tag["style"], skip_comments=True, skip_whitespace=True))
        if why and not (why == "colour" and ("background" in sheets or background(tag))):
            hidden.append(tag)
    for sheet in soup.find_all("style"):
        for rule in tinycss2.parse_stylesheet(sheet.get_text(), skip_comments=True, skip_whitespace=True):
            if rule.type != "qualified-rule":
                continue  # @media and friends: screen-dependent, left alone
            declarations = tinycss2.parse_declaration_list(rule.content, skip_comments=True, skip_whitespace=True)
            why = _hides(declarations)
            if not why or (why == "colour" and "background" in sheets):
                continue
            try:
                hidden += soup.select(tinycss2.serialize(rule.prelude).strip())
            except Exception:  # a selector soupsieve does not know (:hover, vendor pseudo-classes)
                continue
    return hidden


def html_text(html: str, name: str = "page") -> str:
    """The text a browser shows of ``html`` (``name`` only labels the warning)."""
    from bs4 import BeautifulSoup  # core dependency; imported late to keep start-up fast

    soup = BeautifulSoup(html, "html.parser")
    hidden = _hidden_elements(soup)  # before <style> goes: its rules hide elements too
    for tag in soup(["script", "style", "noscript", "template"]):
        tag.decompose()
    if hidden:
        log.warning("%s: dropped %d element(s) a browser would not show (hidden, display:none, visibility, "
                    "zero size, opacity or font, white or transparent text, off-screen, clipped)", name, len(hidden))
        for tag in hidden:
            if not tag.decomposed:
                tag.decompose()
    # One block element per paragraph so the sentence chunker sees boundaries.
    text = soup.get_text("\n")
    return re.sub(r"\n\s*\n+", "\n\n", re.sub(r"[ \t]+", " ", text)).strip()


# A real page holds a few thousand characters; a crafted one can hold 70 MB of text
# that takes minutes and gigabytes to extract. Pages whose content stream is larger
# than MAX_PDF_PAGE_BYTES are skipped unread, and extracted text is cut at
# MAX_PDF_PAGE_CHARS per page, each with a warning naming the page.
MAX_PDF_PAGE_BYTES = 4_000_000


MAX_PDF_PAGE_CHARS = 100_000


def _read_pdf(path: Path) -> str:
    from pypdf import PdfReader

    reader = PdfReader(str(path))
    pages = []
    for number, page in enumerate(reader.pages, 1):
        contents = page.get_contents()
        size = len(contents.get_data()) if contents is not None else 0
        if size > MAX_PDF_PAGE_BYTES:
            log.warning("%s: page %d skipped: its content stream is %d bytes (limit %d)",
                        path.name, number, size, MAX_PDF_PAGE_BYTES)
            continue
        text, hidden = _visible_page_text(page)
        if hidden:
            log.warning("%s: page %d: dropped %d piece(s) of text a reader would not see (white, under 1 pt, "
                        "or invisible render mode)", path.name, number, hidden)
        if len(text) > MAX_PDF_PAGE_CHARS:
            log.warning("%s: page %d cut to %d of its %d characters", path.name, number, MAX_PDF_PAGE_CHARS, len(text))
            text = text[:MAX_PDF_PAGE_CHARS]
        pages.append(text)
    return "\n\n".join(p for p in pages if p)


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


def _read_jsonl(path: Path, rel: str) -> list[Document]:
    return jsonl_documents(_read_text(path), rel)


def jsonl_documents(text: str, rel: str) -> list[Document]:
    """Pre-chunked records (one JSON object per line of ``text``, the file ``rel``)
    grouped by their ``doc``, in first-seen order."""
    by_doc: dict[str, list[Chunk]] = {}
    taken: set[tuple[str, int]] = set()  # (doc, chunk index): the store keys chunks by it
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            text, doc = str(rec["text"]), str(rec.get("doc") or rel)
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"line {lineno} is not a {{\"id\",\"doc\",\"text\"}} record ({exc})") from None
        chunks = by_doc.setdefault(doc, [])
        k = len(chunks)
        m = re.search(r"#(\d+)$", str(rec.get("id") or ""))
        index = int(m.group(1)) if m else k
        # The id is always "<doc>#<index>", whatever the record says: a record cannot take
        # the id of another document's chunk (the store keys chunks by id).
        cid = f"{doc}#{index}"
        if (doc, index) in taken:
            raise ValueError(f"line {lineno}: chunk {cid!r} repeats chunk {index} of {doc!r}; give each record its own id")
        taken.add((doc, index))
        chunks.append(Chunk(id=cid, doc=doc, index=index, start=0, end=len(text), text=text))
    # Each record names its own document; "from_file" keeps where it really came from, so
    # ingest can refuse a record that claims a document some other file provides.
    return [Document(path=doc, text="\n\n".join(c.text for c in cs), prechunked=tuple(cs), meta=(("from_file", rel),))
            for doc, cs in by_doc.items()]


def load_file(path: Path, rel: str | None = None) -> list[Document]:
    """Load one file; raises ``ValueError``/``OSError`` when it cannot be read."""
    rel = rel or path.name
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _read_jsonl(path, rel)
    if suffix in HTML_SUFFIXES:
        return [Document(rel, _read_html(path))]
    if suffix == ".pdf":
        return [Document(rel, _read_pdf(path))]
    meta, text = split_front_matter(_read_text(path))
    return [Document(rel, text, meta=tuple(meta.items()))]


def parse_upload(rel: str, text: str) -> list[Document]:
    """The documents of a file sent as text (an upload named ``rel``), parsed by its
    suffix as ``load_file`` parses one on disk: hidden HTML dropped, .jsonl records
    grouped (each naming its document; the caller confines them), front matter read."""
    suffix = Path(rel).suffix.lower()
    if suffix == ".jsonl":
        return jsonl_documents(text, rel)
    if suffix in HTML_SUFFIXES:
        return [Document(rel, html_text(text, rel))]
    meta, body = split_front_matter(text)
    return [Document(rel, body, meta=tuple(meta.items()))]


def iter_files(root: Path) -> Iterator[tuple[Path, str]]:
    """(file, doc path relative to ``root``) in sorted order; hidden entries skipped."""
    if root.is_file():
        yield root, root.name
        return
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if any(part.startswith(".") for part in Path(rel).parts) or not path.is_file():
            continue
        yield path, rel


def load_documents(paths: Iterable[str | Path]) -> list[Document]:
    """All readable documents under ``paths``. Unreadable files: one warning each."""
    docs: list[Document] = []
    for p in paths:
        root = Path(p)
        if not root.exists():
            raise CorpusError(f"corpus path {str(p)!r} does not exist; pass a folder or a .jsonl file")
        for path, rel in iter_files(root):
            if path.suffix.lower() not in SUPPORTED:
                log.warning("skipping %s: unsupported file type (supported: %s)", rel, " ".join(sorted(SUPPORTED)))
                continue
            try:
                loaded = load_file(path, rel)
            except (OSError, ValueError) as exc:
                reason = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else str(exc)
                log.warning("skipping %s: %s", rel, reason)
                continue
            except Exception as exc:  # a broken PDF can raise anything from its parser
                log.warning("skipping %s: cannot parse (%s)", rel, type(exc).__name__)
                continue
            for d in loaded:
                if d.text.strip() or d.prechunked:
                    docs.append(d)
                else:
                    log.warning("skipping %s: no text in it", d.path)
    return docs
