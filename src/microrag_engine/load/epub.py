"""E-books (.epub, ebooklib) -> text: the chapters in spine (reading) order.

In: an .epub (untrusted), its zip size checked before parsing. Out: each spine XHTML
document through ``html_text``, so hidden text is dropped and navigation (the EPUB 3
table of contents is a ``<nav>``) left out, as for any web page.
Not here: the NCX table of contents, images, metadata (title, author), DRM-protected books.
"""

from __future__ import annotations

from pathlib import Path

from .base import check_zip, decode_bytes, needs
from .html import html_text


def epub_text(path: Path, rel: str) -> str:
    """The text of an .epub's chapters in reading order (``rel`` labels warnings)."""
    check_zip(path)
    with needs("formats"):
        import ebooklib
        from ebooklib import epub

    book = epub.read_epub(str(path), {"ignore_ncx": True})
    parts: list[str] = []
    for entry in book.spine:
        idref = entry[0] if isinstance(entry, tuple) else entry  # (idref, linear)
        item = book.get_item_with_id(idref)
        if item is None or item.get_type() != ebooklib.ITEM_DOCUMENT:
            continue
        name = f"{rel}:{item.get_name()}"
        text = html_text(decode_bytes(item.get_content(), name), name)
        if text:
            parts.append(text)
    return "\n\n".join(parts)
