"""Step 1 - load documents and split them into chunks.

In:  a path (file or folder) -> ``Document`` records (doc path + text).
Out: ``Chunk`` records: id ``<doc>#<k>``, doc path, chunk index, character span, text.

Two chunkers, chosen by name:
  * ``chars``     - the seed's sliding character window (``size``, ``overlap``);
  * ``sentences`` - paragraph/sentence boundaries packed within a token budget
                    (``max_tokens``) that fits the embedder.
Documents come from ``load`` (every format it reads, and pre-chunked .jsonl). A paged
document (PDF) is chunked page by page, each chunk knowing its page. This module does
not index, score or embed anything.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Protocol

from .text import approx_tokens, sentence_spans
from .types import Chunk, Document

log = logging.getLogger("microrag")


# ---------------------------------------------------------------- loaders


# ---------------------------------------------------------------- chunkers


def chunk_chars(doc: str, text: str, size: int = 300, overlap: int = 60) -> list[Chunk]:
    """The seed window: ``text[i:i+size].strip()``, ``i += size - overlap``, empties dropped."""
    out: list[Chunk] = []
    step = size - overlap
    for i in range(0, len(text), step):
        window = text[i : i + size]
        stripped = window.strip()
        if not stripped:
            continue
        start = i + (len(window) - len(window.lstrip()))
        out.append(Chunk(f"{doc}#{len(out)}", doc, len(out), start, start + len(stripped), stripped))
    return out


def _split_long(text: str, s: int, e: int, max_tokens: int, count: Callable[[str], int]) -> list[tuple[int, int]]:
    """Cut one over-long sentence at word boundaries so each piece fits the budget."""
    pieces: list[tuple[int, int]] = []
    words = [(m.start() + s, m.end() + s) for m in re.finditer(r"\S+", text[s:e])]
    cur = 0
    def fits(end: int) -> bool:
        return count(text[words[cur][0] : words[end - 1][1]]) <= max_tokens

    while cur < len(words):
        # Gallop first (1, 2, 4... words), then binary search the longest prefix that fits: each
        # count reads about one piece's text, so a long file with no sentence break costs linear
        # time, not a count of the whole remaining text per step.
        step, lo = 1, cur + 1
        while lo + step <= len(words) and fits(lo + step):
            lo += step
            step *= 2
        hi = min(len(words), lo + step - 1)
        while lo < hi:  # binary search the longest prefix that fits
            mid = (lo + hi + 1) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid - 1
        pieces.append((words[cur][0], words[lo - 1][1]))
        cur = lo
    return pieces


# A gap of ASCII whitespace between two pieces of text is a word break to every tokenizer we
# count with additively (BERT's normalizer turns it into spaces, its pre-tokenizer splits there).
_CLEAN_GAP = re.compile(r"[ \t\n\r]+")


class TokenCounter(Protocol):
    """How a chunker counts tokens: an embedder is one.

    ``additive_counts``: the count of two texts joined by whitespace is the sum of their counts
    less the specials every count carries (``count_tokens("")``), as with WordPiece. A chunker
    then counts each sentence once instead of re-counting the chunk it grows per sentence."""

    @property
    def additive_counts(self) -> bool: ...

    def count_tokens(self, text: str) -> int: ...


class ApproxCounter:
    """``text.approx_tokens``: rounded per call, so counts do not add up."""

    @property
    def additive_counts(self) -> bool:
        return False

    def count_tokens(self, text: str) -> int:
        return approx_tokens(text)


APPROX = ApproxCounter()


def chunk_sentences(
    doc: str,
    text: str,
    max_tokens: int = 256,
    counter: TokenCounter = APPROX,
) -> list[Chunk]:
    """Greedily pack whole sentences into chunks of at most ``max_tokens`` tokens.

    Sentences never straddle chunks; a Markdown heading starts a new chunk when the
    current one is already half full, so sections tend to stay together.
    """
    count_tokens, additive = counter.count_tokens, counter.additive_counts
    # With additive counts, a span of units whose gaps are all whitespace counts as the sum of
    # its units' counts (each unit counted once: linear, where re-counting the growing chunk per
    # sentence was quadratic in the sentences per chunk); any other span is counted whole.
    units: list[tuple[int, int]] = []
    counts: list[int] = []
    for s, e in sentence_spans(text):
        n = count_tokens(text[s:e])
        if n <= max_tokens:
            units.append((s, e))
            counts.append(n)
        else:
            pieces = _split_long(text, s, e, max_tokens, count_tokens)
            units.extend(pieces)
            counts.extend(count_tokens(text[a:b]) for a, b in pieces)
    specials = count_tokens("") if additive else 0
    chunks: list[Chunk] = []
    cur: list[tuple[int, int]] = []
    held = 0  # tokens of the units in ``cur`` less their specials, while ``clean``
    clean = True  # every gap between the units in ``cur`` is whitespace

    def flush() -> None:
        if cur:
            s, e = cur[0][0], cur[-1][1]
            chunks.append(Chunk(f"{doc}#{len(chunks)}", doc, len(chunks), s, e, text[s:e]))
            cur.clear()

    def tokens(a: int, b: int, summed: int, exact: bool) -> int:
        return summed + specials if exact else count_tokens(text[a:b])

    for k, (s, e) in enumerate(units):
        if cur:
            joins = additive and clean and _CLEAN_GAP.fullmatch(text, cur[-1][1], s) is not None
            heading = text[s] == "#" and tokens(cur[0][0], cur[-1][1], held, additive and clean) > max_tokens // 2
            if heading or tokens(cur[0][0], e, held + (counts[k] - specials if additive else 0), joins) > max_tokens:
                flush()
            else:
                clean = joins
        if not cur:
            held, clean = 0, True
        cur.append((s, e))
        if additive:
            held += counts[k] - specials
    flush()
    return chunks


def chunk_documents(
    docs: Iterable[Document],
    chunker: str = "chars",
    size: int = 300,
    overlap: int = 60,
    max_tokens: int = 256,
    counter: TokenCounter = APPROX,
) -> list[Chunk]:
    """Chunk every document with the named chunker; pre-chunked ones pass through.

    A paged document (meta "pages": the offset each page starts at) gives each chunk the
    page its text starts on, so citations can say "p. 12"."""
    out: list[Chunk] = []
    for d in docs:
        if d.prechunked:
            out.extend(d.prechunked)
            continue
        starts = page_starts(d)
        if not starts or starts[0] != 0:
            out.extend(chunk_chars(d.path, d.text, size, overlap) if chunker == "chars" else
                       chunk_sentences(d.path, d.text, max_tokens, counter))
            continue
        # page by page: a chunk never straddles two pages, so its citation's page is exact
        n = 0
        for page, (a, b) in enumerate(zip(starts, [*starts[1:], len(d.text)]), start=1):
            part = chunk_chars(d.path, d.text[a:b], size, overlap) if chunker == "chars" else \
                chunk_sentences(d.path, d.text[a:b], max_tokens, counter)
            for c in part:
                out.append(replace(c, id=f"{d.path}#{n}", index=n, start=a + c.start, end=a + c.end, page=page))
                n += 1
    return out


def page_starts(doc: Document) -> list[int]:
    """Where each page of ``doc`` starts in its text (meta "pages": "0,1834,..."); [] if not paged."""
    raw = dict(doc.meta).get("pages", "")
    try:
        return sorted(int(x) for x in raw.split(",") if x.strip())
    except ValueError:
        return []
