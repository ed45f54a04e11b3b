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

from . import rx
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


_HIDDEN_STYLE = rx.compile(r"(?i)display\s*:\s*none|visibility\s*:\s*hidden|font-size\s*:\s*0(?:\.0*)?(?:px|pt|em|rem|%)?\s*(?:;|$)"
                           r"|opacity\s*:\s*0(?:\.0*)?\s*(?:;|$)")


def _read_html(path: Path) -> str:
    return html_text(_read_text(path), path.name)


def html_text(html: str, name: str = "page") -> str:
    """The text a browser shows of ``html`` (``name`` only labels the warning)."""
    from bs4 import BeautifulSoup  # core dependency; imported late to keep start-up fast

    soup = BeautifulSoup(html, "html.parser")
    for tag in soup(["script", "style", "noscript", "template"]):
        tag.decompose()
    # Text a browser never shows (red team #12: instructions hidden from the reader but
    # indexed for the model) is dropped, and the drop is said.
    hidden = [tag for tag in soup.find_all(True) if tag.has_attr("hidden") or _HIDDEN_STYLE.search(tag.get("style") or "")]
    if hidden:
        log.warning("%s: dropped %d element(s) a browser would not show (hidden, display:none, "
                    "visibility:hidden, zero size or opacity)", name, len(hidden))
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
    state = {"white": False, "mode": 0}
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
