"""Step 3 - hybrid retrieval: score both legs, fuse, gate, cap, take top-K.

In:  an ``Index`` (chunks + both legs), a query, the knobs (``top_k``, ``w_kw``,
     ``fusion``, ``gate``/``min_kw``/``min_em``, ``max_per_source``), and optionally
     a mask of chunks the caller may see.
Out: a ``Retrieval``: ranked ``Hit``s carrying raw and normalised scores of both
     legs, or ``refused=True`` with the reason when the grounding gate says the
     corpus does not hold the answer.
Fusion: ``minmax`` (seed: min-max each leg over the candidates, all-equal -> 0,
``w_kw*kw + (1-w_kw)*em``) or ``rrf`` (weighted reciprocal rank fusion).
The gate reads *raw* scores: min-max makes any top hit look like 1.0.
Masked-out chunks are not candidates: they never influence normalisation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..config import Settings
from ..index import Index
from ..index.ann import top_n
from ..index.keyword import KeywordScorer
from ..index.saved import ChunkTable
from ..types import Chunk, Hit, Retrieval
from .cap import ChunkDocs, diversity_cap
from .fuse import dynamic_w_kw, fuse_minmax, fuse_rrf, minmax
from .gate import GateSignals, exact_token_in, grounding_gate
from .rerank import blend, load_reranker, relevance

# ---------------------------------------------------------------- safeguards (pure)


def _ranked(scores: np.ndarray, m: int) -> list[int]:
    """Indices of the best ``m`` scores (plus any tied with the m-th), highest first, ties by index.

    Sorting only a shortlist keeps a 1M-chunk query from paying for a full sort.
    """
    if m < scores.size:
        kth = np.partition(scores, scores.size - m)[scores.size - m]
        idx = np.flatnonzero(scores >= kth)
    else:
        idx = np.arange(scores.size)
    return idx[np.lexsort((idx, -scores[idx]))].tolist()


def _per_candidate(chunks: Sequence[Chunk], by_doc: Mapping[str, float]) -> np.ndarray:
    """``by_doc`` of each candidate's document: through the document codes for a whole
    table (an index below ``ann_threshold``: no loop over its chunks), else chunk by chunk."""
    if isinstance(chunks, ChunkTable):
        values, codes = np.zeros(len(chunks.doc_names)), chunks.codes()
        for doc, v in by_doc.items():
            if doc in codes:
                values[codes[doc]] = v
        return values[np.asarray(chunks.doc_of)]
    return np.array([by_doc.get(c.doc, 0.0) for c in chunks])


# ---------------------------------------------------------------- the step


def retrieve(
    index: Index,
    query: str,
    settings: Settings,
    safeguards: bool = True,
    allowed: np.ndarray | None = None,
    scoped=None,
    penalty: np.ndarray | None = None,
    scoped_on: np.ndarray | None = None,
    named: Mapping[str, float] | None = None,
) -> Retrieval:
    """Rank ``index`` for ``query``. ``allowed`` is a boolean mask of visible chunks.

    ``scoped`` is a keyword scorer fitted on exactly the ``allowed`` chunks (in index
    order): BM25's document frequencies and lengths, and so every keyword score and
    the gate's coverage, then come only from what the caller may read. Without it
    hidden chunks shape the statistics (a quarantined upload could lower a live
    document's score, and refusals could reveal whether a hidden word exists).
    ``scoped_on`` is the mask ``scoped`` was fitted on when ``allowed`` narrows it further
    (a query-time document filter keeps the statistics of the caller's clearance).
    ``penalty`` is the length prior per chunk, aligned with ``index.chunks`` (``cap.long_doc_penalty``);
    ``named`` the name prior per document (``names.name_boost``), applied to the candidates only.
    """
    if not query.strip():
        return Retrieval(query, [], refused=True, reason="the query is empty")
    if not len(index.chunks) or (allowed is not None and not allowed.any()):
        return Retrieval(query, [], refused=safeguards, reason="no chunks are visible to this caller" if safeguards else "")
    keyword = scoped if scoped is not None else index.keyword
    ceiling = _ceiling(keyword, query)
    if index.ann is not None:
        # Large index: union of each leg's first pass, then exact scores for those only. The dense
        # one searches only the label partitions ``allowed`` covers (index/ann.py); the keyword one
        # reads the rare terms' postings first (``KeywordScorer.top``): no pass over every chunk.
        q = index.query_vector(query)
        first, kw_first = first_pass(index, keyword, query, q, settings.first_pass, allowed,
                                     lambda: _keyword_scores(index, query, scoped, scoped_on, allowed))
        return rank_candidates(query, [index.chunks[i] for i in first], kw_first, index.vectors[first] @ q,
                               settings, safeguards, ceiling, None if penalty is None else penalty[first], named,
                               floors=leg_floors(index, q, allowed))
    cand = None if allowed is None else np.flatnonzero(allowed)  # (no arange of every chunk per query)
    kw_full = _keyword_scores(index, query, scoped, scoped_on, allowed) if scoped is not None else None
    if allowed is None:  # no filter: skip copying every chunk and score array
        return rank_candidates(query, index.chunks, index.kw_scores(query), index.em_scores(query), settings,
                               safeguards, ceiling, penalty, named)
    assert cand is not None  # (allowed is not None here)
    chunks = [index.chunks[i] for i in cand]
    kw = index.kw_scores(query)[cand] if kw_full is None else kw_full[cand]
    return rank_candidates(query, chunks, kw, index.em_scores(query)[cand], settings, safeguards, ceiling,
                           None if penalty is None else penalty[cand], named)


def first_pass(index: Index, keyword: KeywordScorer | None, query: str, q: np.ndarray, n: int,
               allowed: np.ndarray | None, every_kw: Callable[[], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Above ``ann_threshold``: the union of each leg's ``n`` best among ``allowed`` (index
    positions, ascending) and their raw keyword scores. The dense leg searches only the label
    partitions ``allowed`` covers (index/ann.py); the keyword leg reads the rare terms' postings
    first (``KeywordScorer.top``), or ranks ``every_kw()``, every chunk's score, where the
    scorer cannot find its top n itself (TF-IDF)."""
    assert index.ann is not None
    found = keyword.top(query, n, allowed) if keyword is not None else np.zeros(0, dtype=np.int64)
    kw_all = every_kw() if found is None else None
    kw_top = top_n(kw_all, n, allowed) if kw_all is not None else found
    assert kw_top is not None
    first = np.union1d(kw_top, index.ann.top(q, n, allowed)).astype(np.int64)
    if allowed is not None:
        first = first[allowed[first]]  # belt and braces: the partitions already filtered
    if kw_all is not None:
        return first, kw_all[first]
    return first, keyword.scores_at(query, first) if keyword is not None else np.zeros(len(first))


def leg_floors(index: Index, q: np.ndarray, allowed: np.ndarray | None) -> tuple[float, float | None]:
    """Each leg's least score over every chunk ``allowed``, so that a first pass's candidates are
    normalised about as every chunk would be (``fuse.minmax``). The keyword leg's is 0: some
    chunk holds none of the query's terms, unless every chunk holds one, and then the commonest
    such term weighs next to nothing (a term in every chunk has an IDF of about 0.5 / N). The
    dense leg's is ``Index.least_cosine``: exact below 8,192 chunks, a sample's least above (a
    floor a little above the true one stretches the dense leg a little, where normalising over
    the candidates alone, whose least cosine is far above it, stretched it a lot)."""
    return 0.0, index.least_cosine(q, allowed)


def _keyword_scores(index: Index, query: str, scoped, scoped_on: np.ndarray | None,
                    allowed: np.ndarray | None) -> np.ndarray:
    """Every chunk's keyword score (0 for those ``scoped``, a clearance's scorer, does not count)."""
    if scoped is None:
        return index.kw_scores(query)
    out = np.zeros(len(index.chunks))
    on = scoped_on if scoped_on is not None else allowed
    out[np.arange(len(index.chunks)) if on is None else np.flatnonzero(on)] = scoped.scores(query)
    return out


def keyword_ceiling(index: Index, query: str) -> float:
    """The keyword leg's best possible score for ``query`` (BM25 only; 0 = unknown)."""
    return _ceiling(index.keyword, query)


def _ceiling(keyword: KeywordScorer | None, query: str) -> float:
    return float(keyword.ceiling(query)) if keyword is not None else 0.0


def rank_candidates(
    query: str,
    chunks: Sequence[Chunk],
    raw_kw: np.ndarray,
    raw_em: np.ndarray,
    settings: Settings,
    safeguards: bool = True,
    kw_ceiling: float = 0.0,
    penalty: np.ndarray | None = None,
    named: Mapping[str, float] | None = None,
    floors: tuple[float | None, float | None] = (None, None),
) -> Retrieval:
    """Fuse, gate, cap and cut candidates whose raw leg scores are already known.

    The candidates are every visible chunk (embedded index) or the union of each
    leg's first-pass top-N (a database backend); normalisation is over them.
    ``penalty`` (aligned with ``chunks``) is subtracted from the fused score with safeguards on, and
    so is ``named`` (per document: the name prior, negative) for the candidates' documents.
    ``floors``: each leg's least score over every chunk the candidates were drawn from
    (``leg_floors``), so min-max fusion scales them as it would every chunk.
    """
    if not chunks:
        return Retrieval(query, [], refused=safeguards, reason="nothing matched the query" if safeguards else "")
    # float64 throughout: float32 cosines would let a blend print as 1.0000000238
    raw_kw, raw_em = np.asarray(raw_kw, dtype=np.float64), np.asarray(raw_em, dtype=np.float64)
    kw_n, em_n = minmax(raw_kw, floors[0]), minmax(raw_em, floors[1])
    w_kw = dynamic_w_kw(query, settings.w_kw) if settings.dynamic_w_kw else settings.w_kw
    if settings.fusion == "rrf":
        hybrid = fuse_rrf(raw_kw, raw_em, w_kw, settings.rrf_k)
    else:
        hybrid = fuse_minmax(raw_kw, raw_em, w_kw, floors)
    ranking = hybrid
    if safeguards and named:
        by_doc = _per_candidate(chunks, named)
        penalty = by_doc if penalty is None else penalty + by_doc
    if safeguards and penalty is not None and penalty.any():
        # The length prior: a long document's chunks rank a little lower. Scaled to the fused
        # scores' spread, so it weighs the same under min-max (0..1) and RRF (~0..0.03);
        # hits still report the fused score itself.
        spread = float(hybrid.max() - hybrid.min())
        ranking = hybrid - penalty * (spread if spread > 0 else 1.0)
    best_kw, best_em = float(raw_kw.max()), float(raw_em.max())
    if safeguards:
        top_kw = [chunks[i].text for i in np.argsort(-raw_kw)[:10] if raw_kw[i] > 0]
        sig = GateSignals(best_kw, best_em, best_kw / kw_ceiling if kw_ceiling > 0 else 0.0,
                          exact_token_in(query, top_kw) if settings.gate == "either" else "")
        reason = grounding_gate(sig, settings)
        if reason:
            return Retrieval(query, [], refused=True, reason=reason, best_raw_kw=best_kw, best_raw_em=best_em)
    order, rr = ranking, {}
    if settings.rerank:
        top = _ranked(ranking, settings.rerank_depth)
        p_rel = relevance(load_reranker(settings.rerank_model), query, [chunks[i].text for i in top])
        order, rr = blend(ranking, top, p_rel, settings.w_rerank), dict(zip(top, p_rel))
    # Deterministic ties: higher score first, then candidate (corpus) order.
    cap = settings.max_per_source if safeguards else 0
    kept, skipped = diversity_cap(_ranked(order, settings.top_k * 8), ChunkDocs(chunks), settings.top_k, cap)
    if len(kept) < settings.top_k and len(kept) + len(skipped) < len(chunks):
        # The cap ate the shortlist: walk the full ranking instead.
        kept, skipped = diversity_cap(_ranked(order, len(chunks)), ChunkDocs(chunks), settings.top_k, cap)
    hits = [Hit(chunks[j], float(hybrid[j]), float(kw_n[j]), float(em_n[j]), float(raw_kw[j]), float(raw_em[j]),
                float(rr[j]) if j in rr else None) for j in kept]
    return Retrieval(query, hits, best_raw_kw=best_kw, best_raw_em=best_em, capped=[chunks[j].id for j in skipped])
