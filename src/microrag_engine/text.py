"""Text helpers shared by several steps: sentence spans, token counts, tokenisers.

* ``sentence_spans`` - (start, end) of each sentence, never across a block
  (paragraph, heading, list item, table row); a fenced code block is one unit; used to chunk, to answer
  extractively and to split premises for verification.
* ``approx_tokens`` - a WordPiece-ish token count for budgets.
* ``seed_tokens`` (the spec's TF-IDF tokens) and ``bm25_tokens`` (stemmed,
  stop-worded, digits kept) - the keyword leg's tokenisers, also used by the
  database store and the extractive answerer.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from pathlib import Path

from . import rx
from .types import Document

# A sentence ends at . ! ? (optionally closed by quotes/brackets) followed by space.
_SENT_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=\S)")


_BLOCK_START = rx.compile(rf"[ \t]*(?:#{{1,6}}{rx.SPACE}|[-*+]{rx.SPACE}|{rx.DIGIT}+[.)]{rx.SPACE}|\|)")


_LIST_MARKER = rx.compile(r"[ \t]*\d{1,3}[.)][ \t]+")


_WORDPIECE = re.compile(r"\w+|[^\w\s]")


def approx_tokens(text: str) -> int:
    """A WordPiece-ish count: words and punctuation, +30% for sub-word splits, +2 specials."""
    return int(len(_WORDPIECE.findall(text)) * 1.3) + 2


def _blocks(text: str) -> list[tuple[int, int]]:
    """Paragraph-like blocks: blank lines end one; headings, list items, table rows stand alone."""
    blocks: list[tuple[int, int]] = []
    start: int | None = None
    pos = prev_end = 0
    code_start: int | None = None
    opened = ""
    for line in text.splitlines(keepends=True):
        s, e = pos, pos + len(line.rstrip("\r\n"))
        pos += len(line)
        stripped = line.lstrip(" \t")
        fence = stripped[:3] if stripped.startswith(("```", "~~~")) else ""
        if code_start is not None:  # inside a fenced code block: one block up to a fence of its kind
            if fence == opened:
                blocks.append((code_start, e))
                code_start = None
            continue
        if fence:
            if start is not None:
                blocks.append((start, prev_end))
                start = None
            code_start, opened = s + len(line) - len(line.lstrip(" \t")), fence
            continue
        if not line.strip():
            if start is not None:
                blocks.append((start, prev_end))
                start = None
            continue
        if start is not None and _BLOCK_START.match(line):
            blocks.append((start, prev_end))
            start = None
        if start is None:
            start = s
        prev_end = e
        if line.lstrip().startswith("#"):  # a heading is its own block
            blocks.append((start, e))
            start = None
    if start is not None:
        blocks.append((start, prev_end))
    if code_start is not None:  # an unclosed fence runs to the end
        blocks.append((code_start, len(text.rstrip())))
    return blocks


def is_code(unit: str) -> bool:
    """Whether a unit from ``sentence_spans`` is a fenced code block."""
    return unit.lstrip(" \t").startswith(("```", "~~~"))


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence, never crossing a block boundary."""
    spans: list[tuple[int, int]] = []
    for bs, be in _blocks(text):
        block = text[bs:be]
        if is_code(block):  # code is quoted whole, never cut at a "." inside it
            spans.append((bs, be))
            continue
        marker = _LIST_MARKER.match(block)  # "1. Install" is one item, not "1." and "Install"
        skip = marker.end() if marker else 0
        cuts = [0] + [m.end() for m in _SENT_END.finditer(block) if m.end() > skip] + [len(block)]
        for a, b in zip(cuts, cuts[1:]):
            seg = block[a:b]
            s = bs + a + (len(seg) - len(seg.lstrip()))
            e = bs + a + len(seg.rstrip())
            if e > s:
                spans.append((s, e))
    return spans


SEED_TOKEN = re.compile(r"[a-zA-Z][a-zA-Z']+")


WORD_TOKEN = re.compile(r"\w+")


def seed_tokens(text: str) -> list[str]:
    """The seed tokenizer: ASCII words of 2+ letters (apostrophes kept), lower-cased."""
    return [t.lower() for t in SEED_TOKEN.findall(text)]


@lru_cache(maxsize=1)
def _stemmer():
    import Stemmer  # PyStemmer (Snowball), a core dependency

    return Stemmer.Stemmer("english")


# bm25s' English list (33 words; bm25s.stopwords.STOPWORDS_EN, copied so that tokenising a
# query does not import bm25s and scipy - tests/test_text.py checks the copy is current) plus
# question and pronoun words: "what does my ..." carries no topic, and left in it dilutes
# BM25 coverage, which the grounding gate reads.
BM25S_STOPWORDS_EN = ("a an and are as at be but by for if in into is it no not of on or such that the their then "
                      "there these they this to was will with").split()
EXTRA_STOPWORDS = """about above after again all am any because been before being below between both can
could did do does doing down during each few from further had has have having he her here hers him his
how i its itself just me more most my myself nor now only other our ours out over own same she should so
some than those through too under until up very we were what when where which while who whom why would
you your yours""".split()


@lru_cache(maxsize=1)
def _stopwords() -> frozenset[str]:
    return frozenset(BM25S_STOPWORDS_EN) | frozenset(EXTRA_STOPWORDS)


def stopwords() -> frozenset[str]:
    """The words the production tokenizer drops (bm25s' list and question/pronoun words)."""
    return _stopwords()


def bm25_tokens(text: str) -> list[str]:
    """Production tokenizer: unicode words incl. digits, lower-cased, stop-worded, stemmed."""
    stop = _stopwords()
    words = [w for w in WORD_TOKEN.findall(text.lower()) if w not in stop]
    return _stemmer().stemWords(words)


@lru_cache(maxsize=1)
def bm25_fingerprint() -> str:
    """What ``bm25_tokens`` is, as a short hash: the word pattern, the stop words and the
    stemmer's version. A saved BM25 matrix is only valid for the same tokeniser."""
    import Stemmer  # its own version string, the one its package declares: importlib.metadata's
    # look-up scans every installed distribution (~30 ms of a 0.3 s `microrag retrieve`)

    stemmer = Stemmer.version()
    spec = "\x00".join([WORD_TOKEN.pattern, " ".join(sorted(_stopwords())), stemmer])
    return hashlib.sha256(spec.encode("utf-8")).hexdigest()[:16]


_TITLE_HEADING = rx.compile(r"(?m)^#{1,2}[ \t]+(\S[^\n]*)$")


def title_of(doc: Document) -> str:
    """``doc``'s first top-level heading, else its file name (a title in its front matter is
    read by the caller first)."""
    m = _TITLE_HEADING.search(doc.text[:20_000])
    return m.group(1).strip() if m else Path(doc.path).stem
