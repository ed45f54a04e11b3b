"""Pre-chunked .jsonl: one ``{"id", "doc", "text"}`` record a line -> ``Document``s with chunks.

A file on disk keeps its good lines and names the bad ones in one warning; an upload
(``jsonl_documents``) is refused at its first bad line, so the sender hears why.
Not here: chunking (records are the chunks), or confining records to their file (ingest
and the server do that with the ``from_file`` meta).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .. import rx
from ..types import Chunk, Document
from .base import read_text

log = logging.getLogger("microrag")

_INDEX = rx.compile(r"#(\d{1,9})$")  # "<doc>#<index>"; a longer number is no index (and int() of it is slow)
MAX_BAD_LINES_LISTED = 10


def jsonl_records(text: str, rel: str) -> tuple[list[Document], list[tuple[int, str]]]:
    """(documents of the good records of ``text``, the file ``rel``, grouped by their ``doc``
    in first-seen order; (line number, why) of each bad line)."""
    by_doc: dict[str, list[Chunk]] = {}
    taken: set[tuple[str, int]] = set()  # (doc, chunk index): the store keys chunks by it
    bad: list[tuple[int, str]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):  # JSONDecodeError, or nesting deeper than the parser's stack
            bad.append((lineno, "not JSON"))
            continue
        if not isinstance(rec, dict):
            bad.append((lineno, "not a JSON object"))
            continue
        if rec.get("text") is None:
            bad.append((lineno, 'no "text" field'))
            continue
        body, doc = str(rec["text"]), str(rec.get("doc") or rel)
        chunks = by_doc.get(doc, [])
        m = _INDEX.search(str(rec.get("id") or ""))
        index = int(m.group(1)) if m else len(chunks)
        if (doc, index) in taken:
            bad.append((lineno, f"repeats chunk {index} of {doc!r}; give each record its own id"))
            continue
        taken.add((doc, index))
        # The id is always "<doc>#<index>", whatever the record says: a record cannot take
        # the id of another document's chunk (the store keys chunks by id).
        by_doc.setdefault(doc, chunks).append(Chunk(id=f"{doc}#{index}", doc=doc, index=index, start=0, end=len(body), text=body))
    # Each record names its own document; "from_file" keeps where it really came from, so
    # ingest can refuse a record that claims a document some other file provides.
    docs = [Document(path=doc, text="\n\n".join(c.text for c in cs), prechunked=tuple(cs), meta=(("from_file", rel),))
            for doc, cs in by_doc.items()]
    return docs, bad


def jsonl_documents(text: str, rel: str) -> list[Document]:
    """The documents of an uploaded .jsonl; raises ``ValueError`` naming its first bad line."""
    docs, bad = jsonl_records(text, rel)
    if bad:
        lineno, why = bad[0]
        raise ValueError(f"line {lineno} is not a {{\"id\",\"doc\",\"text\"}} record ({why})")
    return docs


def read_jsonl(path: Path, rel: str) -> list[Document]:
    """The good records of a .jsonl file; its bad lines are skipped with one warning."""
    docs, bad = jsonl_records(read_text(path), rel)
    if bad:
        listed = ", ".join(f"{n} ({why})" for n, why in bad[:MAX_BAD_LINES_LISTED])
        more = ", ..." if len(bad) > MAX_BAD_LINES_LISTED else ""
        log.warning("%s: skipped %d bad line(s): %s%s", rel, len(bad), listed, more)
    return docs
