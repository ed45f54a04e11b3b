"""Step 2, keyword leg: scorers fitted on chunk texts, ``scores(query)`` per chunk.

  * ``tfidf`` - the seed: tokens ``[a-zA-Z][a-zA-Z']+`` lower-cased,
    ``idf = ln((N+1)/(df+1)) + 1``, score = cosine of tf-idf vectors;
  * ``bm25``  - production: bm25s (Lucene variant) over stemmed, stop-worded tokens
    that keep digits, so ``E-4012`` and ``build-01`` stay findable.
Both satisfy ``KeywordScorer``: ``fit``, ``scores``, ``ceiling`` (the best score a
query could reach, which the grounding gate reads as coverage).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from ..errors import ConfigError
from ..text import bm25_tokens, seed_tokens


class KeywordScorer(Protocol):
    """What retrieval needs of a keyword leg: raw scores per chunk, and how much of the
    query the best chunk covers (the grounding gate's keyword signal)."""

    name: str

    def fit(self, texts: Sequence[str]) -> KeywordScorer: ...

    def scores(self, query: str) -> np.ndarray: ...

    def ceiling(self, query: str) -> float: ...

    def coverage(self, query: str, raw_best: float) -> float: ...

    def weight(self, term: str) -> float:
        """How much a (tokenised) query term says: its IDF over the chunks this scorer was fitted on."""
        ...


class TfidfScorer:
    """Seed TF-IDF cosine, exactly as the spec writes it."""

    name = "tfidf"

    def fit(self, texts: Sequence[str]) -> TfidfScorer:
        from scipy.sparse import csr_matrix

        docs = [Counter(seed_tokens(t)) for t in texts]
        self.n = len(docs)
        df = Counter(t for d in docs for t in d)
        self.vocab = {t: i for i, t in enumerate(sorted(df))}
        self.idf = np.array([np.log((self.n + 1) / (df[t] + 1)) + 1 for t in sorted(df)])
        rows, cols, vals = [], [], []
        for r, d in enumerate(docs):
            for t, tf in d.items():
                rows.append(r)
                cols.append(self.vocab[t])
                vals.append(tf * self.idf[self.vocab[t]])
        self.matrix = csr_matrix((vals, (rows, cols)), shape=(self.n, len(self.vocab)), dtype=np.float64)
        self.norms = np.sqrt(np.asarray(self.matrix.multiply(self.matrix).sum(axis=1)).ravel())
        return self

    def weight(self, term: str) -> float:
        """The seed's smoothed IDF; an unseen term gets the highest."""
        i = self.vocab.get(term)
        return float(self.idf[i]) if i is not None else float(np.log(self.n + 1) + 1)

    def ceiling(self, query: str) -> float:
        """0 = unknown: a cosine has no per-term ceiling (the seed's gate reads ``min_kw``)."""
        return 0.0

    def coverage(self, query: str, raw_best: float) -> float:
        return 0.0

    def scores(self, query: str) -> np.ndarray:
        q = np.zeros(len(self.vocab))
        qnorm2 = 0.0
        for t, tf in Counter(seed_tokens(query)).items():
            # A term the corpus never saw has df=0: it still lengthens |q|, by the formula.
            w = tf * (self.idf[self.vocab[t]] if t in self.vocab else np.log(self.n + 1) + 1)
            qnorm2 += w * w
            if t in self.vocab:
                q[self.vocab[t]] = w
        dot = self.matrix @ q
        return dot / (np.sqrt(qnorm2) * self.norms + 1e-9)


def lucene_idf(df: int, n: int) -> float:
    """Lucene's IDF, ``ln(1 + (N - df + 0.5) / (df + 0.5))``: in memory and in the database alike."""
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


class BM25Scorer:
    """BM25 (Lucene variant) over :func:`bm25_tokens`: bm25s builds the term-by-chunk
    weight matrix; scoring reads it directly (the same sum bm25s computes), so a matrix
    saved beside an index scores queries without importing bm25s or scipy."""

    name = "bm25"

    def __init__(self, k1: float = 0.9, b: float = 0.4) -> None:
        self.k1, self.b = k1, b
        self.n = 0
        self._vocab: dict[str, int] | None = {}
        self._vocab_source: Callable[[], list[str]] | None = None

    def fit(self, texts: Sequence[str]) -> BM25Scorer:
        import bm25s

        model = bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
        corpus = [bm25_tokens(t) or ["\x00empty"] for t in texts]  # bm25s rejects empty docs
        model.index(corpus, show_progress=False)
        df = Counter(t for doc in corpus for t in set(doc))
        vocab = dict(model.vocab_dict)
        terms = [""] * len(vocab)
        for term, i in vocab.items():
            terms[i] = term
        arrays = {"data": np.asarray(model.scores["data"]), "indices": np.asarray(model.scores["indices"]),
                  "indptr": np.asarray(model.scores["indptr"]), "df": np.array([df.get(t, 0) for t in terms], dtype=np.int64)}
        return self.restore(arrays, lambda: terms, len(texts))

    def restore(self, arrays: dict[str, np.ndarray], terms: Callable[[], list[str]], n: int) -> BM25Scorer:
        """Score with a saved matrix (``state()``); ``terms`` (the vocabulary, by term id) is
        read on the first query, so opening an index does not wait for it."""
        self.data, self.indices, self.indptr, self.df = arrays["data"], arrays["indices"], arrays["indptr"], arrays["df"]
        self.n, self._vocab, self._vocab_source = n, None, terms
        return self

    def state(self) -> tuple[dict[str, np.ndarray], list[str]]:
        """(arrays, vocabulary by term id): what ``restore`` needs."""
        vocab = self.vocab
        terms = [""] * len(vocab)
        for term, i in vocab.items():
            terms[i] = term
        return {"data": self.data, "indices": self.indices, "indptr": self.indptr, "df": self.df}, terms

    @property
    def vocab(self) -> dict[str, int]:
        if self._vocab is None:
            assert self._vocab_source is not None
            self._vocab = {t: i for i, t in enumerate(self._vocab_source())}
        return self._vocab

    def idf(self, term: str) -> float:
        """Lucene IDF, ``ln(1 + (N - df + 0.5) / (df + 0.5))``; unseen terms get the highest."""
        i = self.vocab.get(term)
        return lucene_idf(int(self.df[i]) if i is not None else 0, self.n)

    def weight(self, term: str) -> float:
        return self.idf(term)

    def ceiling(self, query: str) -> float:
        """The most any chunk could score for ``query``: Lucene's term weight
        saturates below 1, so it is the sum of the query terms' IDF."""
        return sum(self.idf(t) for t in bm25_tokens(query))

    def coverage(self, query: str, raw_best: float) -> float:
        """``raw_best`` as a share of :meth:`ceiling`: 1 = every term matched heavily, 0 = none."""
        ceiling = self.ceiling(query)
        return raw_best / ceiling if ceiling > 0 else 0.0

    def scores(self, query: str) -> np.ndarray:
        """Each chunk's score: the sum of its weights for the query's terms (a repeated
        term counts each time), accumulated in the matrix's own precision as bm25s does."""
        if self.n == 0:
            return np.zeros(0)
        vocab = self.vocab
        out = np.zeros(self.n, dtype=self.data.dtype)
        for t in bm25_tokens(query):
            i = vocab.get(t)
            if i is not None and i + 1 < len(self.indptr):  # bm25s' "" entry has no column
                lo, hi = int(self.indptr[i]), int(self.indptr[i + 1])
                np.add.at(out, self.indices[lo:hi], self.data[lo:hi])
        return out.astype(np.float64)


def make_keyword(name: str, k1: float = 0.9, b: float = 0.4) -> TfidfScorer | BM25Scorer:
    """The keyword scorer called ``name`` (unfitted)."""
    if name == "tfidf":
        return TfidfScorer()
    if name == "bm25":
        return BM25Scorer(k1=k1, b=b)
    raise ConfigError(f"unknown keyword scorer {name!r}; choose tfidf or bm25")
