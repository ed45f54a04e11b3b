"""Step 3, the name prior (pure): a query word that names few documents ranks their chunks higher.

A page titled "PRAGMA statements" or saved as ``lang_createtable.html`` is what someone asking
about a pragma or CREATE TABLE wants, even when a longer page mentions it more often. Only the
words of a title and a file name (the stem, its separators read as spaces) count, and only the
ones rare among the names a caller can see: ``name_rare`` of them at most (at least one name),
so "sqlite" in every page's title, or "reference", moves nothing.

The statistic is computed per clearance (``Engine`` makes one per label set), as BM25's is: a
name the caller cannot read never changes how a readable one ranks. Its weight was chosen on
the QA dev sets (``benchmarks/name_prior.py``: benchmarks/results/name-prior.md); ``w_name = 0``
turns it off (the seed).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from functools import lru_cache
from pathlib import PurePosixPath

from ..text import bm25_tokens

_SEPARATORS = str.maketrans("_-.+~", "     ")
MAX_QUERY_WORDS = 32  # distinct words of a question looked up, at most (a pasted page is not a question)


@lru_cache(maxsize=1 << 18)  # each write's engine names the same documents again
def name_tokens(doc: str, title: str) -> frozenset[str]:
    """The production tokens of a document's title and file stem (``sql-createtable`` -> sql, createt)."""
    stem = PurePosixPath(doc).stem.translate(_SEPARATORS)
    return frozenset(bm25_tokens(f"{title} {stem}"))


class DocNames:
    """The rare name words of a set of documents, and which documents each names."""

    def __init__(self, titles: Mapping[str, str], rare: float) -> None:
        tokens = {doc: name_tokens(doc, title) for doc, title in titles.items()}
        df = Counter(t for toks in tokens.values() for t in toks)
        most = max(1, int(rare * len(tokens)))
        self.named: dict[str, list[str]] = defaultdict(list)  # rare word -> the documents it names
        self.rare_words: dict[str, int] = {}  # document -> how many rare words its name has
        for doc, toks in tokens.items():
            rare_toks = [t for t in toks if df[t] <= most]
            for t in rare_toks:
                self.named[t].append(doc)
            if rare_toks:
                self.rare_words[doc] = len(rare_toks)

    def named_by(self, query: str) -> dict[str, float]:
        """For each document whose name holds a rare word of ``query``: the share of its name's
        rare words the query holds ("git config" names ``git-config.html`` whole, and
        ``git-config-global.html`` half)."""
        found: Counter[str] = Counter()
        for t in list(dict.fromkeys(bm25_tokens(query)))[:MAX_QUERY_WORDS]:
            found.update(self.named.get(t, ()))
        return {doc: n / self.rare_words[doc] for doc, n in found.items()}


def name_boost(names: DocNames, query: str, w: float) -> dict[str, float]:
    """``-w`` times the share of a document's rare name words that ``query`` holds, as a prior
    (subtracted like ``cap.long_doc_penalty``, in units of the fused scores' spread)."""
    if w <= 0:
        return {}
    return {doc: -w * share for doc, share in names.named_by(query).items()}
