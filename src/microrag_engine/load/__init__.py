"""Step 1a - load: paths and uploads -> ``Document`` records.

In:  files or folders (``load_documents``), one file (``load_file``), an upload's text
     (``parse_upload``).
Out: ``Document``s, their text in light Markdown: "#" headings, "- " list items,
     " | " between table cells, fenced code; ``meta`` from front matter
     (``label: restricted``) and, for PDFs, where each page starts (``pdf.py``).

One module a format: ``base`` (bytes -> text, shared guards), ``markdown``, ``html``,
``rst``, ``pdf``, ``office`` (.docx .pptx .xlsx), ``notebook`` (.ipynb), ``epub``, ``jsonl``
(pre-chunked records). Office, e-book and reStructuredText readers need the
``formats`` extra, OCR the ``ocr`` extra; without them those files are skipped with one
warning per extension naming the extra. What a reader would not see is dropped with a
warning (hidden HTML, invisible PDF text, hidden runs, slides and sheets). A file we
cannot read is skipped with one warning naming it and why; unsupported files are
counted, one line per extension. This package does not chunk.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

# Every reader module imports its parser library (and an extra's) only when it reads a file.
from ..errors import CorpusError
from ..types import Document
from .base import MissingExtraError, decode_bytes, read_text, split_front_matter
from .epub import epub_text
from .html import MAX_STYLE_WORK, html_page, html_text
from .jsonl import jsonl_documents, jsonl_records, read_jsonl
from .markdown import markdown_text
from .notebook import notebook_text
from .office import docx_text, pptx_text, xlsx_text
from .pdf import MAX_PDF_PAGE_BYTES, MAX_PDF_PAGE_CHARS, read_pdf
from .rst import rst_text

__all__ = ["SUPPORTED", "TEXT_SUFFIXES", "HTML_SUFFIXES", "MAX_PDF_PAGE_BYTES", "MAX_PDF_PAGE_CHARS", "MAX_STYLE_WORK",
           "MissingExtraError", "decode_bytes", "html_text", "iter_files", "iter_loaded", "iter_tagged", "jsonl_documents", "jsonl_records",
           "load_documents", "load_file", "markdown_text", "parse_upload", "split_front_matter"]

log = logging.getLogger("microrag")


TEXT_SUFFIXES = {".md", ".markdown", ".txt"}


HTML_SUFFIXES = {".html", ".htm"}


# ---------------------------------------------------------------- one reader a suffix

Reader = Callable[[Path, str, str], list[Document]]  # (file, doc path, markup) -> documents


def _text(path: Path, rel: str, markup: str) -> list[Document]:
    """Markdown and plain text (front matter read); also .html, .rst and .ipynb, which are text too."""
    return parse_upload(rel, read_text(path), markup)


def _binary(read: Callable[[Path, str], str]) -> Reader:
    """A reader of a binary format: one document; ``markup`` does not apply."""
    return lambda path, rel, markup: [Document(rel, read(path, rel))]


READERS: dict[str, Reader] = {
    **dict.fromkeys(TEXT_SUFFIXES | HTML_SUFFIXES | {".rst", ".ipynb"}, _text),
    ".pdf": lambda path, rel, markup: [read_pdf(path, rel)],
    ".docx": _binary(docx_text), ".pptx": _binary(pptx_text), ".xlsx": _binary(xlsx_text), ".epub": _binary(epub_text),
    ".jsonl": lambda path, rel, markup: read_jsonl(path, rel),  # bad lines warned, not refused (uploads refuse)
}
SUPPORTED = frozenset(READERS)


def load_file(path: Path, rel: str | None = None, markup: str = "clean") -> list[Document]:
    """Load one file; raises ``ValueError``/``OSError`` when it cannot be read and
    ``MissingExtraError`` when its reader's extra is not installed. ``markup``: "clean"
    renders markup to what a reader sees, "raw" keeps Markdown and reStructuredText as
    written (the seed). A suffix we do not know is read as plain text."""
    return READERS.get(path.suffix.lower(), _text)(path, rel or path.name, markup)


def parse_upload(rel: str, text: str, markup: str = "clean") -> list[Document]:
    """The documents of a file sent as text (an upload named ``rel``), parsed by its
    suffix as ``load_file`` parses one on disk: hidden HTML dropped, .jsonl records
    grouped (each naming its document; the caller confines them; a bad line refuses the
    upload), front matter read. Binary formats (PDF, office, e-book) cannot arrive as
    text and are kept as sent."""
    suffix = Path(rel).suffix.lower()
    if suffix == ".jsonl":
        return jsonl_documents(text, rel)
    if suffix in HTML_SUFFIXES:
        body, title = html_page(text, rel)
        return [Document(rel, body, meta=(("title", title),) if title else ())]
    if suffix == ".rst":
        return [Document(rel, rst_text(text, rel) if markup == "clean" else text)]
    if suffix == ".ipynb":
        return [Document(rel, notebook_text(text, rel, markup))]
    meta, body = split_front_matter(text)
    clean = markup == "clean" and suffix in (".md", ".markdown")
    return [Document(rel, markdown_text(body) if clean else body, meta=tuple(meta.items()))]


# ---------------------------------------------------------------- folders


def iter_files(root: Path) -> Iterator[tuple[Path, str]]:
    """(file, doc path relative to ``root``) in sorted order; hidden entries skipped."""
    if root.is_file():
        if _utf8(root.name):
            yield root, root.name
        else:
            log.warning("skipping a file whose name is not UTF-8 (rename it)")
        return
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if any(part.startswith(".") for part in Path(rel).parts) or not path.is_file():
            continue
        if not _utf8(rel):  # undecodable bytes: no id could hold the name, nor DLP read it
            log.warning("skipping a file whose name is not UTF-8 (rename it): %s",
                        rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
            continue
        yield path, rel


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def load_documents(paths: Iterable[str | Path], markup: str = "clean") -> list[Document]:
    """All readable documents under ``paths`` (``markup`` as in ``load_file``); see ``iter_loaded``."""
    roots = [Path(p) for p in paths]
    for root in roots:
        if not root.exists():
            raise CorpusError(f"corpus path {str(root)!r} does not exist; pass a folder or a .jsonl file")
    return list(iter_loaded((f for root in roots for f in iter_files(root)), markup))


def iter_loaded(files: Iterable[tuple[Path, str]], markup: str = "clean") -> Iterator[Document]:
    """The readable documents of ``files`` ((file, doc path) pairs), one file at a time, so a
    corpus of any size streams. A file that cannot be read: one warning each, with the reason.
    Unsupported files, and files whose extra is missing: one warning per extension, at the end."""
    for _, doc in iter_tagged(((None, path, rel) for path, rel in files), markup):
        yield doc


T = TypeVar("T")


def iter_tagged(files: Iterable[tuple[T, Path, str]], markup: str = "clean") -> Iterator[tuple[T, Document]]:
    """``iter_loaded`` for (tag, file, doc path) triples: each document comes with its file's tag."""
    unsupported: dict[str, list[str]] = defaultdict(list)  # suffix -> doc paths
    missing: dict[tuple[str, str], int] = defaultdict(int)  # (suffix, extra) -> files
    for tag, path, rel in files:
        suffix = path.suffix.lower()
        if suffix not in SUPPORTED:
            unsupported[suffix].append(rel)
            continue
        try:
            loaded = load_file(path, rel, markup)
        except MissingExtraError as exc:
            missing[(suffix, exc.extra)] += 1
            continue
        except (OSError, ValueError) as exc:
            log.warning("skipping %s: %s", rel, _one_line(str(exc)))
            continue
        except Exception as exc:  # a broken PDF, office file or e-book can raise anything from its parser
            log.warning("skipping %s: cannot parse (%s: %s)", rel, type(exc).__name__, _one_line(str(exc)))
            continue
        for d in loaded:
            if d.text.strip() or d.prechunked:
                yield tag, d
            else:
                log.warning("skipping %s: no text in it", d.path)
    for (suffix, extra), n in sorted(missing.items()):
        log.warning("skipping %d %s file(s): install microrag-engine[%s] to read them", n, suffix, extra)
    for suffix, rels in sorted(unsupported.items()):
        kind = f"{suffix} file(s)" if suffix else "file(s) without an extension"
        examples = ", ".join(rels[:3]) + (", ..." if len(rels) > 3 else "")
        log.warning("skipped %d %s: unsupported type (supported: %s): %s", len(rels), kind, " ".join(sorted(SUPPORTED)), examples)


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
