"""Step 2, keyword leg: scorers fitted on chunk texts, ``scores(query)`` per chunk.

  * ``tfidf`` - the seed: tokens ``[a-zA-Z][a-zA-Z']+`` lower-cased,
    ``idf = ln((N+1)/(df+1)) + 1``, score = cosine of tf-idf vectors;
  * ``bm25``  - production: BM25 (Lucene variant, scored as bm25s scores) over stemmed,
    stop-worded tokens that keep digits, so ``E-4012`` and ``build-01`` stay findable;
    kept as postings, so it grows and shrinks without a re-fit (``updated``) and gives
    a clearance its own statistics by masking (``masked``).
Both satisfy ``KeywordScorer``: ``fit``, ``scores``, ``ceiling`` (the best score a
query could reach, which the grounding gate reads as coverage).
"""

from __future__ import annotations

import math
import threading
from array import array
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

import numpy as np

from ..errors import ConfigError
from ..text import bm25_tokens, seed_tokens
from .saved import interleave


class KeywordScorer(Protocol):
    """What retrieval needs of a keyword leg: raw scores per chunk, and how much of the
    query the best chunk covers (the grounding gate's keyword signal)."""

    name: str

    def fit(self, texts: Sequence[str]) -> KeywordScorer: ...

    def scores(self, query: str) -> np.ndarray: ...

    def top(self, query: str, n: int, allowed: np.ndarray | None = None) -> np.ndarray | None:
        """Index positions of the ``n`` best positive scores among ``allowed`` (unordered),
        found without scoring every chunk, or None when the scorer cannot show them so (the
        caller then scores every chunk)."""
        ...

    def scores_at(self, query: str, at: np.ndarray) -> np.ndarray:
        """The scores of the chunks at index positions ``at`` (visible to this scorer), as
        ``scores`` gives them."""
        ...

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

    def top(self, query: str, n: int, allowed: np.ndarray | None = None) -> np.ndarray | None:
        return None  # a cosine has no per-term bound to stop on: every chunk is scored

    def scores_at(self, query: str, at: np.ndarray) -> np.ndarray:
        # Positions among the texts it was fitted on: a clearance's TF-IDF is a fit on its chunks
        # alone, whose positions are not the index's (never asked today: ``top`` is None).
        return self.scores(query)[at]

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
    """BM25 (Lucene variant, as bm25s computes it) over :func:`bm25_tokens`, from postings.

    The index stores what does not depend on the rest of the corpus: per term the chunks
    holding it and how often (``indptr``/``indices``/``tf``, term-major), and each chunk's
    length ``dl``. IDF and the length norm are applied per query from the current
    statistics (N, df, avgdl), so adding or removing chunks (``updated``) rewrites no
    weight, and a clearance's statistics (``masked``) are a mask, not a re-fit. Scores
    equal bm25s' (``method="lucene"``) bit for bit: the same float64 formula, rounded to
    float32 per term and summed in float32, as its eager matrix does.
    """

    name = "bm25"

    def __init__(self, k1: float = 0.9, b: float = 0.4) -> None:
        self.k1, self.b = k1, b
        # Term-major postings: term i's chunks are indices[indptr[i]:indptr[i + 1]], tf times each.
        self.indptr: np.ndarray = np.zeros(1, dtype=np.int64)
        self.indices: np.ndarray = np.zeros(0, dtype=np.int32)
        self.tf: np.ndarray = np.zeros(0, dtype=np.int32)
        self.dl: np.ndarray = np.zeros(0, dtype=np.int32)  # tokens per chunk
        self.n = 0  # chunks the statistics count: all, or a masked view's visible ones
        self.visible: np.ndarray | None = None  # a masked view's chunks (bool per chunk)
        self._avgdl: float | None = None  # mean dl over the counted chunks, made on first use
        self._vocab: dict[str, int] | None = {}
        self._vocab_source: Callable[[], dict[str, int]] | None = None
        self._df: dict[int, int] = {}  # a masked view's df per term id, counted on first use
        self._norm: np.ndarray | None = None  # k1 * (1 - b + b * dl / avgdl) per chunk, made on first use
        # Per term id: its postings in chunk order, and the most its weight can be (``top``), made on first use.
        self._ordered: dict[int, tuple[np.ndarray, np.ndarray, float]] = {}
        # Per term id: its postings' chunk numbers and what each adds to the score (``_addends``), the
        # terms read last first out, up to ``ADDEND_POSTINGS`` per chunk in all.
        self._added: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._added_held = 0  # what they hold, in postings (each entry charged ENTRY_POSTINGS more)
        self._added_lock = threading.Lock()

    def fit(self, texts: Sequence[str]) -> BM25Scorer:
        return BM25Scorer(self.k1, self.b).updated(None, texts)

    def updated(self, keep: np.ndarray | None, texts: Iterable[str] = (), tokens: Iterable[list[str]] | None = None,
                at: np.ndarray | None = None) -> BM25Scorer:
        """A new scorer over this one's chunks where ``keep`` is true (all when ``None``), in
        order, with ``texts`` (or their ``tokens``) at positions ``at`` of the result (ascending;
        ``None``: after them): what ``fit`` on the texts in that order gives, for the price of
        tokenising ``texts`` and one vectorised pass over the postings. ``self`` is left as it
        was: queries running on it are not disturbed."""
        if self.visible is not None:
            raise ValueError("a masked view cannot be updated; update the scorer it masks")
        if keep is not None and len(keep) != len(self.dl):
            raise ValueError(f"keep has {len(keep)} entries for {len(self.dl)} chunks")
        vocab = dict(self.vocab)  # copied: the new terms are not this scorer's
        terms, docs, tfs, dl_new = _postings(tokens if tokens is not None else map(bm25_tokens, texts), vocab)
        indptr, indices, tf = self.indptr, self.indices, self.tf
        kept = np.arange(len(self.dl)) if keep is None else np.flatnonzero(keep)
        if len(kept) < len(self.dl):
            alive = np.asarray(keep)[indices]
            # A term's new bounds: its old ones less the removed postings before them (few: a search, not a sum).
            indptr = indptr - np.searchsorted(np.flatnonzero(~alive), indptr)
            indices, tf = indices[alive], tf[alive]
        dl = interleave(self.dl, keep, dl_new, at)
        fresh = np.arange(len(kept), len(dl)) if at is None else np.asarray(at, dtype=np.int64)  # new chunks' ids
        if at is not None or len(kept) < len(self.dl):  # kept chunks move: renumber their postings
            old_row = np.ones(len(dl), dtype=bool)
            old_row[fresh] = False
            renumber = np.zeros(len(self.dl), dtype=np.int32)
            renumber[kept] = np.flatnonzero(old_row)
            indices = renumber[indices]
        # A new posting goes at the end of its term's block (new terms' blocks after all others):
        # one pass that copies the rest (order within a term does not matter to a sum).
        order = np.argsort(terms, kind="stable")
        ends = np.full(len(vocab), indptr[-1], dtype=np.int64)
        ends[:len(indptr) - 1] = indptr[1:]
        where = ends[terms[order]]
        counts = np.zeros(len(vocab), dtype=np.int64)
        counts[:len(indptr) - 1] = np.diff(indptr)
        counts += np.bincount(terms, minlength=len(vocab))
        if np.count_nonzero(counts == 0) > DEAD_TERMS * len(vocab):
            vocab, counts = _without_dead_terms(vocab, counts)
        new_indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
        np.cumsum(counts, out=new_indptr[1:])
        arrays: dict[str, np.ndarray] = {
            "indptr": new_indptr, "indices": np.insert(np.asarray(indices, dtype=np.int32), where, fresh[docs[order]]),
            "tf": np.insert(np.asarray(tf, dtype=np.int32), where, tfs[order]), "dl": dl}
        return self._new(arrays, lambda: vocab)

    def _new(self, arrays: Mapping[str, np.ndarray], vocab: Callable[[], dict[str, int]]) -> BM25Scorer:
        out = BM25Scorer(self.k1, self.b)
        out.indptr, out.indices, out.tf, out.dl = arrays["indptr"], arrays["indices"], arrays["tf"], arrays["dl"]
        out.n = len(out.dl)
        out._vocab, out._vocab_source = None, vocab
        return out

    def restore(self, arrays: Mapping[str, np.ndarray], terms: Callable[[], list[str]]) -> BM25Scorer:
        """Score with saved postings (``state()``); ``terms`` (the vocabulary, by term id) is
        read on the first query, so opening an index does not wait for it."""
        return self._new(arrays, lambda: {t: i for i, t in enumerate(terms())})

    def state(self) -> tuple[dict[str, np.ndarray], list[str]]:
        """(arrays, vocabulary by term id): what ``restore`` needs."""
        if self.visible is not None:
            raise ValueError("a masked view has no state of its own")
        terms = [""] * len(self.vocab)
        for term, i in self.vocab.items():
            terms[i] = term
        return {"indptr": self.indptr, "indices": self.indices, "tf": self.tf, "dl": self.dl}, terms

    def masked(self, visible: np.ndarray) -> BM25Scorer:
        """This index with the statistics of the ``visible`` chunks only (N, df, avgdl): what
        a fit on just their texts gives, without one. ``scores`` then returns the visible
        chunks' scores, in order (as a scorer fitted on them would)."""
        if self.visible is not None:
            raise ValueError("mask the scorer itself, not a masked view")
        view = BM25Scorer(self.k1, self.b)
        view.indptr, view.indices, view.tf, view.dl = self.indptr, self.indices, self.tf, self.dl
        view.visible = np.asarray(visible, dtype=bool)
        view.n = int(view.visible.sum())
        view._vocab, view._vocab_source = None, lambda: self.vocab  # shared, never copied
        return view

    def masked_to(self, visible: np.ndarray) -> bool:
        """Whether this is a view with the statistics of exactly ``visible``."""
        return self.visible is not None and (self.visible is visible or np.array_equal(self.visible, visible))

    @property
    def vocab(self) -> dict[str, int]:
        if self._vocab is None:
            assert self._vocab_source is not None
            self._vocab = self._vocab_source()
        return self._vocab

    def _doc_freq(self, i: int) -> int:
        lo, hi = int(self.indptr[i]), int(self.indptr[i + 1])
        if self.visible is None:
            return hi - lo
        df = self._df.get(i)
        if df is None:  # threads may both count: the same number
            if len(self._df) >= 100_000:  # query terms of one engine's lifetime; bounded anyway
                self._df.clear()
            df = self._df[i] = int(np.count_nonzero(self.visible[self.indices[lo:hi]]))
        return df

    def _norms(self) -> np.ndarray:
        """``k1 * (1 - b + b * dl / avgdl)`` per chunk, evaluated as bm25s does (float64, in
        that order); made on the first query, so opening an index reads no postings."""
        if self._norm is None:  # threads may both make it: the same array
            if self._avgdl is None:  # sums of integers: exact in float64, as bm25s' mean is
                self._avgdl = float(self.dl.mean() if self.visible is None else self.dl[self.visible].mean())
            self._norm = self.k1 * ((1 - self.b) + self.b * self.dl.astype(np.float64) / self._avgdl)
        return self._norm

    def idf(self, term: str) -> float:
        """Lucene IDF, ``ln(1 + (N - df + 0.5) / (df + 0.5))``; unseen terms get the highest."""
        i = self.vocab.get(term)
        return lucene_idf(self._doc_freq(i) if i is not None else 0, self.n)

    def weight(self, term: str) -> float:
        return self.idf(term)

    def holds(self, term: str) -> bool:
        """Whether any chunk this scorer counts (a masked view: a visible one) holds ``term``."""
        i = self.vocab.get(term)
        return i is not None and self._doc_freq(i) > 0

    def ceiling(self, query: str) -> float:
        """The most any chunk could score for ``query``: Lucene's term weight
        saturates below 1, so it is the sum of the query terms' IDF."""
        return sum(self.idf(t) for t in bm25_tokens(query))

    def coverage(self, query: str, raw_best: float) -> float:
        """``raw_best`` as a share of :meth:`ceiling`: 1 = every term matched heavily, 0 = none."""
        ceiling = self.ceiling(query)
        return raw_best / ceiling if ceiling > 0 else 0.0

    def scores(self, query: str) -> np.ndarray:
        """Each chunk's score (a masked view: each visible chunk's): the sum over the query's
        terms (a repeated term counts each time) of ``idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))``,
        each term's weight rounded to float32 and summed in float32, in query order, as bm25s does."""
        if self.n == 0:
            return np.zeros(0)
        # Unseen terms, or terms seen only in hidden chunks, score no chunk (``_query_terms`` drops them).
        out = self._every_score(self._query_terms(query))
        return (out if self.visible is None else out[self.visible]).astype(np.float64)

    def _every_score(self, terms: list[tuple[int, int, float]]) -> np.ndarray:
        """Every chunk's score (float32; 0 for a masked view's hidden chunks) for the query
        ``terms``, added in query order as ``scores`` promises."""
        out = np.zeros(len(self.dl), dtype=np.float32)
        for i, df, _ in terms:
            idx, add = self._addends(i, df)
            # A term's postings name each chunk once, so a plain indexed add is exact (np.add.at,
            # made for repeated indices, was a third of a 100k query here).
            out[idx] += add
        return out

    def _addends(self, i: int, df: int) -> tuple[np.ndarray, np.ndarray]:
        """Term ``i``'s postings (chunk numbers, as intp: numpy gathers twice as fast by them) and
        what it adds to each chunk's score: ``idf * tf / (tf + norm)`` in float64, rounded to
        float32. Kept for the terms read last: a common term's million postings cost 7 ms to
        weigh at 1M chunks and 1.6 ms to add once weighed."""
        found = self._added.get(i)
        if found is not None:
            with self._added_lock:
                if i in self._added:
                    self._added.move_to_end(i)
            return found
        lo, hi = int(self.indptr[i]), int(self.indptr[i + 1])
        idx, tf32 = self.indices[lo:hi], self.tf[lo:hi]
        if self.visible is not None:  # a clearance's view: its chunks' postings only (a tenth of them at 10%)
            seen = self.visible[idx]
            idx, tf32 = idx[seen], tf32[seen]
        idx = idx.astype(np.intp)
        tf = tf32.astype(np.float64)
        w = tf / (self._norms()[idx] + tf)
        w *= np.float32(lucene_idf(df, self.n))  # bm25s keeps IDF as float32, multiplies in float64
        found = (idx, w.astype(np.float32))
        budget = ADDEND_POSTINGS * max(self.n, 25_000)
        with self._added_lock:  # threads may both weigh a term: the same arrays
            if i not in self._added:
                self._added[i] = found
                self._added_held += len(idx) + ENTRY_POSTINGS
            while len(self._added) > 1 and (self._added_held > budget or len(self._added) > MAX_ADDEND_TERMS):
                self._added_held -= len(self._added.popitem(last=False)[1][0]) + ENTRY_POSTINGS
        return found

    def _query_terms(self, query: str) -> list[tuple[int, int, float]]:
        """(term id, df, float32 IDF) of each query token that a counted chunk holds, in query order."""
        out = []
        for t in bm25_tokens(query):
            i = self.vocab.get(t)
            df = self._doc_freq(i) if i is not None else 0
            if i is not None and df:
                out.append((i, df, float(np.float32(lucene_idf(df, self.n)))))
        return out

    def _ordered_postings(self, i: int) -> tuple[np.ndarray, np.ndarray, float]:
        """Term ``i``'s postings in chunk order (chunk numbers, tf) and the most its saturated
        weight ``tf / (tf + norm)`` reaches over them. ``updated`` appends a chunk's postings at
        the end of their terms' blocks, so a block into which chunks were inserted is out of
        order: sorted here, once per term and scorer."""
        found = self._ordered.get(i)
        if found is None:  # threads may both make it: the same arrays
            lo, hi = int(self.indptr[i]), int(self.indptr[i + 1])
            idx, tf = self.indices[lo:hi], self.tf[lo:hi]
            if idx.size > 1 and not bool(np.all(idx[1:] > idx[:-1])):
                order = np.argsort(idx, kind="stable")
                idx, tf = idx[order], tf[order]
            tf64 = tf.astype(np.float64)
            most = float((tf64 / (self._norms()[idx] + tf64)).max()) if idx.size else 0.0
            if len(self._ordered) >= 10_000:  # query terms of one engine's lifetime; bounded anyway
                self._ordered.clear()
            found = self._ordered[i] = (idx, tf, most)
        return found

    def _score_ordered(self, terms: list[tuple[int, int, float]], at: np.ndarray) -> np.ndarray:
        """Scores at the sorted, distinct chunk numbers ``at``: each term found by binary search
        in its ordered postings, then weighed and summed exactly as ``scores`` does (float64
        per posting, rounded to float32 per term, summed in float32 in query order)."""
        out = np.zeros(len(at), dtype=np.float32)
        if not len(at):
            return out
        norm = self._norms()
        for i, _, idf in terms:
            idx, tf, _ = self._ordered_postings(i)
            if not idx.size:
                continue
            pos = np.minimum(np.searchsorted(idx, at), idx.size - 1)
            hit = idx[pos] == at
            t = tf[pos[hit]].astype(np.float64)
            w = t / (norm[at[hit]] + t)
            w *= np.float32(idf)
            out[hit] += w.astype(np.float32)
        return out

    def scores_at(self, query: str, at: np.ndarray) -> np.ndarray:
        if self.n == 0 or not len(at):
            return np.zeros(len(at))
        at = np.asarray(at, dtype=np.int64)
        order = np.argsort(at, kind="stable")
        out = np.zeros(len(at))
        out[order] = self._score_ordered(self._query_terms(query), at[order])
        return out

    def top(self, query: str, n: int, allowed: np.ndarray | None = None) -> np.ndarray | None:
        """The ``n`` best (MaxScore, as Lucene and PISA prune): score only the chunks holding a
        query term rare enough, with every term, and stop once the ``n``-th of those scores
        reaches what a chunk holding only the other terms could score at most (the sum of
        their IDFs times their largest saturated weight). Until it does, the next rarest term
        joins the rare ones; once their postings would pass ``RARE_BUDGET`` of the chunks,
        every chunk is scored instead (``_top_of_every``: about as cheap then). A chunk this
        scorer does not count (a masked view's hidden ones) or ``allowed`` leaves out is never
        among them. Never None: BM25 always finds its top n without the caller's help."""
        if self.n == 0 or n <= 0:
            return np.zeros(0, dtype=np.int64)
        terms = self._query_terms(query)
        if not terms:
            return np.zeros(0, dtype=np.int64)
        distinct = sorted({i: df for i, df, _ in terms}.items(), key=lambda p: p[1])
        budget, read = RARE_BUDGET * len(self.dl), 0
        # The terms the budget lets it read: if the chunks they give (as counted: a clearance's
        # visible ones) are fewer than n, and some term stays unread, the pass would end in scoring
        # every chunk anyway, having read them for nothing (a small clearance, mostly).
        fits = np.cumsum([int(self.indptr[i + 1] - self.indptr[i]) for i, _ in distinct]) <= budget
        within = int(np.count_nonzero(fits))  # (a prefix: the sums only grow)
        if within < len(distinct) and sum(df for _, df in distinct[:within]) < n:
            return self._top_of_every(terms, n, allowed)
        pieces: list[np.ndarray] = []
        for rare, (i, _) in enumerate(distinct, start=1):
            read += int(self.indptr[i + 1] - self.indptr[i])
            if read > budget:
                return self._top_of_every(terms, n, allowed)
            idx = self._ordered_postings(i)[0]
            keep = None if self.visible is None else self.visible[idx]
            if allowed is not None:
                keep = allowed[idx] if keep is None else keep & allowed[idx]
            pieces.append(idx if keep is None else idx[keep])
            if rare < len(distinct) and sum(len(p) for p in pieces) < n:
                continue  # fewer than n candidates: the next rarest term must join anyway
            cand = np.unique(np.concatenate(pieces))
            got = self._score_ordered(terms, cand)
            cand, got = cand[got > 0], got[got > 0]
            best = _best(cand, got, n)
            if rare == len(distinct):
                return best.astype(np.int64)  # every term read: exact
            # Most a chunk without any rare term can score (float32 sums: a small margin).
            rare_ids = {j for j, _ in distinct[:rare]}
            bound = sum(idf * self._ordered_postings(j)[2] for j, _, idf in terms if j not in rare_ids)
            if cand.size >= n and float(np.partition(got, cand.size - n)[cand.size - n]) >= bound * (1 + 1e-5) + 1e-6:
                return best.astype(np.int64)
        return None  # (not reached: the last term returns above)

    def _top_of_every(self, terms: list[tuple[int, int, float]], n: int, allowed: np.ndarray | None) -> np.ndarray:
        """``top`` by scoring every chunk: the common terms' weighed postings added (``_addends``),
        the n-th best found by a partial sort, and only the chunks at or above it ranked."""
        out = self._every_score(terms)  # (a masked view's hidden chunks score 0)
        if allowed is not None:
            out *= allowed  # (multiplying by a mask: a fifth of the cost of np.where)
        # Partitioned among the positive scores only: numpy's introselect slows five-fold on an
        # array of mostly equal values (a small clearance leaves 99% of it 0).
        pos = np.flatnonzero(out > 0)
        return _best(pos, out[pos], n)


def _best(at: np.ndarray, got: np.ndarray, n: int) -> np.ndarray:
    """The ``n`` positions of ``at`` (ascending) with the highest ``got``; of those tied with the
    n-th, the first in index order, so the same query always finds the same chunks."""
    if at.size <= n:
        return at.astype(np.int64)
    nth = np.partition(got, at.size - n)[at.size - n]
    above = at[got > nth]
    return np.concatenate([above, at[got == nth][: n - above.size]]).astype(np.int64)


# ``updated``: once more than this share of the vocabulary is terms no chunk holds any more (their
# chunks removed), they are dropped and the rest renumbered. Amortised: a dropped term's entry cost
# its copy on every write until then, and dropping copies the vocabulary once more.
DEAD_TERMS = 0.25


def _without_dead_terms(vocab: dict[str, int], counts: np.ndarray) -> tuple[dict[str, int], np.ndarray]:
    """``vocab`` without the terms whose postings ``counts`` says are none, the rest numbered in
    their old order (so their postings' blocks stay where they are), and the live terms' counts."""
    live = counts > 0
    renumber = np.cumsum(live) - 1
    return {t: int(renumber[i]) for t, i in vocab.items() if live[i]}, counts[live]


# ``_addends``: the weighed postings kept, per chunk counted (at least 25,000 chunks' worth): 12
# bytes each, so 96 MB at 1M chunks (a clearance's view counts its visible chunks: the engine keeps
# up to 16 views); a query of common words reads a few million, and a set of queries that needs
# more weighs a term again each time (7 ms for a million postings). Each term kept is charged
# ``ENTRY_POSTINGS`` more (its arrays' and the dict's overhead, ~500 bytes), and at most
# ``MAX_ADDEND_TERMS`` are kept: a query of a thousand rare words cannot fill the budget with entries.
ADDEND_POSTINGS = 8
ENTRY_POSTINGS = 40
MAX_ADDEND_TERMS = 10_000

# ``top``: the rare terms' postings are read first while they number at most this share of the
# chunks; past it every chunk is scored (``scores``), which then costs about as much.
RARE_BUDGET = 0.05


def _postings(tokenised: Iterable[list[str]], vocab: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(term id, chunk number, tf) per distinct term of each chunk, and each chunk's length;
    new terms join ``vocab``. Collected in typed arrays: a million chunks' 44M postings as
    Python ints would take gigabytes. An empty chunk counts as one token long: bm25s
    indexes it as one placeholder token, and avgdl must agree."""
    terms, tfs, distinct, lengths = array("q"), array("q"), array("q"), array("q")
    for tokens in tokenised:
        counted = Counter(tokens)
        terms.extend([vocab.setdefault(t, len(vocab)) for t in counted])
        tfs.extend(counted.values())
        distinct.append(len(counted))
        lengths.append(max(len(tokens), 1))
    docs = np.repeat(np.arange(len(distinct), dtype=np.int64), np.frombuffer(distinct, dtype=np.int64))
    return (np.frombuffer(terms, dtype=np.int64), docs, np.frombuffer(tfs, dtype=np.int64).astype(np.int32),
            np.frombuffer(lengths, dtype=np.int64).astype(np.int32))


def make_keyword(name: str, k1: float = 0.9, b: float = 0.4) -> TfidfScorer | BM25Scorer:
    """The keyword scorer called ``name`` (unfitted)."""
    if name == "tfidf":
        return TfidfScorer()
    if name == "bm25":
        return BM25Scorer(k1=k1, b=b)
    raise ConfigError(f"unknown keyword scorer {name!r}; choose tfidf or bm25")
