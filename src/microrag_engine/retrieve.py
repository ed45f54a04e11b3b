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

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import rx
from .chunk import Chunk
from .config import Settings
from .ann import top_n
from .index import Index


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk with every score that decided its place."""

    chunk: Chunk
    hybrid: float
    kw: float  # keyword leg, normalised over the candidates
    em: float  # embedding leg, normalised over the candidates
    raw_kw: float
    raw_em: float
    rerank: float | None = None  # p(relevant) from the cross-encoder, when reranking is on

    def as_dict(self) -> dict[str, Any]:
        c = self.chunk
        return {
            "id": c.id, "doc": c.doc, "chunk": c.index, "start": c.start, "end": c.end,
            "hybrid": self.hybrid, "kw": self.kw, "em": self.em,
            "raw_kw": self.raw_kw, "raw_em": self.raw_em, "rerank": self.rerank, "text": c.text,
        }


@dataclass(frozen=True)
class Retrieval:
    """The outcome of one query: hits, or a refusal with its reason."""

    query: str
    hits: list[Hit]
    refused: bool = False
    reason: str = ""
    best_raw_kw: float = 0.0
    best_raw_em: float = 0.0
    capped: list[str] = field(default_factory=list)  # ids the diversity cap pushed out


# ---------------------------------------------------------------- fusion (pure)


def minmax(x: np.ndarray) -> np.ndarray:
    """Scale to [0, 1]; when every value is equal, all become 0 (the seed's rule)."""
    if x.size == 0:
        return x.astype(np.float64)
    lo, hi = float(x.min()), float(x.max())
    if hi - lo <= 0:
        return np.zeros_like(x, dtype=np.float64)
    return (x - lo) / (hi - lo)


def fuse_minmax(kw: np.ndarray, em: np.ndarray, w_kw: float) -> np.ndarray:
    """Convex blend of min-max-normalised legs: ``w_kw*kw + (1-w_kw)*em``."""
    return w_kw * minmax(kw) + (1.0 - w_kw) * minmax(em)


def ranks(x: np.ndarray) -> np.ndarray:
    """1-based rank of each value, highest first, ties by position."""
    order = np.lexsort((np.arange(x.size), -x))
    r = np.empty(x.size, dtype=np.int64)
    r[order] = np.arange(1, x.size + 1)
    return r


def fuse_rrf(kw: np.ndarray, em: np.ndarray, w_kw: float, k: int = 60) -> np.ndarray:
    """Weighted reciprocal rank fusion (Cormack et al. 2009).

    A chunk that shares no term with the query (keyword score 0) gets no keyword
    contribution: ranking it among the zeros would be noise.
    """
    kw_part = np.where(kw > 0, w_kw / (k + ranks(kw)), 0.0)
    return kw_part + (1.0 - w_kw) / (k + ranks(em))


# Tokens a user copies verbatim: error codes (E-4012), hostnames (db-prod.bw.internal),
# versions and ids (v2.3.1, AB12), paths and quoted strings. Embeddings blur these;
# BM25 matches them exactly.
_EXACT = rx.compile(rf"""^(?:[`'"].+[`'"]|.*{rx.DIGIT}.*[A-Za-z].*|.*[A-Za-z].*{rx.DIGIT}.*|/?[\pL\pN_-]+(?:[._:/\\][\pL\pN_-]+)+)$""")


def looks_exact(token: str) -> bool:
    """Whether ``token`` looks like something to match literally (code, host, id, path)."""
    return bool(_EXACT.match(token.strip(",;?!()")))


def dynamic_w_kw(query: str, w_kw: float, boost: float = 0.2) -> float:
    """``w_kw`` raised by ``boost`` (capped at 1) when the query holds an exact-looking token."""
    return min(1.0, w_kw + boost) if any(looks_exact(t) for t in query.split()) else w_kw


# ---------------------------------------------------------------- safeguards (pure)


@dataclass(frozen=True)
class GateSignals:
    """What the grounding gate reads, all raw (never min-max normalised)."""

    best_kw: float  # best raw keyword score (TF-IDF cosine or BM25)
    best_em: float  # best raw embedding cosine
    kwcov: float = 0.0  # best BM25 score / the query's BM25 ceiling (sum of IDF), 0..1
    exact: str = ""  # an identifier from the query found verbatim in a top keyword hit


def grounding_gate(sig: GateSignals, settings: Settings) -> str:
    """'' when the corpus plausibly holds the answer; otherwise why we refuse.

    ``kw``: the seed rule, raw TF-IDF cosine below ``min_kw``. ``em``: best cosine
    below ``min_em``. ``either`` (default): refuse only when *both* legs are weak -
    cosine below ``min_em`` and BM25 coverage below ``min_kwcov`` - and no code,
    hostname or id typed in the query occurs verbatim in a top keyword hit
    (embeddings blur ``E-4012``; a verbatim match is strong evidence).
    Thresholds and their measured trade-off: benchmarks/results/gate.md.
    """
    g, s = settings.gate, settings
    if g == "kw" and sig.best_kw < s.min_kw:
        return f"best keyword match {sig.best_kw:.3f} is below min_kw {s.min_kw}"
    if g == "em" and sig.best_em < s.min_em:
        return f"best embedding match {sig.best_em:.3f} is below min_em {s.min_em}"
    if g == "either" and sig.best_em < s.min_em and sig.kwcov < s.min_kwcov and not sig.exact:
        return (f"best embedding match {sig.best_em:.3f} < min_em {s.min_em} and keyword coverage "
                f"{sig.kwcov:.3f} < min_kwcov {s.min_kwcov}")
    return ""


def exact_token_in(query: str, texts: list[str]) -> str:
    """The first exact-looking query token that occurs verbatim (case-insensitive) in ``texts``."""
    lowered = [t.lower() for t in texts]
    for tok in query.split():
        tok = tok.strip(",;?!()'\"`")
        if looks_exact(tok) and any(tok.lower() in t for t in lowered):
            return tok
    return ""


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


class _Docs:
    """``docs[i]`` without building the list: the cap only looks at the first few."""

    def __init__(self, chunks: list[Chunk]) -> None:
        self.chunks = chunks

    def __getitem__(self, i: int) -> str:
        return self.chunks[i].doc


def diversity_cap(order: list[int], docs, top_k: int, max_per_source: int) -> tuple[list[int], list[int]]:
    """Walk ``order``; keep at most ``max_per_source`` per doc until ``top_k`` kept.

    Returns (kept, skipped). ``max_per_source=0`` turns the cap off.
    """
    kept: list[int] = []
    skipped: list[int] = []
    per_doc: dict[str, int] = {}
    for i in order:
        if len(kept) == top_k:
            break
        if max_per_source and per_doc.get(docs[i], 0) >= max_per_source:
            skipped.append(i)
            continue
        per_doc[docs[i]] = per_doc.get(docs[i], 0) + 1
        kept.append(i)
    return kept, skipped


# ---------------------------------------------------------------- the step


def retrieve(
    index: Index,
    query: str,
    settings: Settings,
    safeguards: bool = True,
    allowed: np.ndarray | None = None,
    scoped=None,
) -> Retrieval:
    """Rank ``index`` for ``query``. ``allowed`` is a boolean mask of visible chunks.

    ``scoped`` is a keyword scorer fitted on exactly the ``allowed`` chunks (in index
    order): BM25's document frequencies and lengths, and so every keyword score and
    the gate's coverage, then come only from what the caller may read. Without it
    hidden chunks shape the statistics (a quarantined upload could lower a live
    document's score, and refusals could reveal whether a hidden word exists).
    """
    if not query.strip():
        return Retrieval(query, [], refused=True, reason="the query is empty")
    cand = np.arange(len(index.chunks)) if allowed is None else np.flatnonzero(allowed)
    if cand.size == 0:
        return Retrieval(query, [], refused=safeguards, reason="no chunks are visible to this caller" if safeguards else "")
    if scoped is not None:
        kw_full = np.zeros(len(index.chunks))
        kw_full[cand] = scoped.scores(query)
        ceiling = _ceiling(scoped, query)
    else:
        kw_full, ceiling = None, keyword_ceiling(index, query)
    if index.ann is not None:
        # Large index: union of each leg's first pass, then exact scores for those only.
        q = index.query_vector(query)
        kw_all = index.kw_scores(query) if kw_full is None else kw_full
        first = np.union1d(top_n(kw_all, settings.first_pass, allowed), index.ann.top(q, settings.first_pass, allowed))
        first = first.astype(np.int64)
        if allowed is not None:
            first = first[allowed[first]]  # belt and braces: the selector already filtered
        return rank_candidates(query, [index.chunks[i] for i in first], kw_all[first], index.vectors[first] @ q,
                               settings, safeguards, ceiling)
    if allowed is None:  # no filter: skip copying every chunk and score array
        return rank_candidates(query, index.chunks, index.kw_scores(query), index.em_scores(query), settings,
                               safeguards, ceiling)
    chunks = [index.chunks[i] for i in cand]
    kw = index.kw_scores(query)[cand] if kw_full is None else kw_full[cand]
    return rank_candidates(query, chunks, kw, index.em_scores(query)[cand], settings, safeguards, ceiling)


def keyword_ceiling(index: Index, query: str) -> float:
    """The keyword leg's best possible score for ``query`` (BM25 only; 0 = unknown)."""
    return _ceiling(index.keyword, query)


def _ceiling(keyword, query: str) -> float:
    ceiling = getattr(keyword, "ceiling", None)
    return float(ceiling(query)) if ceiling else 0.0


def rank_candidates(
    query: str,
    chunks: list[Chunk],
    raw_kw: np.ndarray,
    raw_em: np.ndarray,
    settings: Settings,
    safeguards: bool = True,
    kw_ceiling: float = 0.0,
) -> Retrieval:
    """Fuse, gate, cap and cut candidates whose raw leg scores are already known.

    The candidates are every visible chunk (embedded index) or the union of each
    leg's first-pass top-N (a database backend); normalisation is over them.
    """
    if not chunks:
        return Retrieval(query, [], refused=safeguards, reason="nothing matched the query" if safeguards else "")
    # float64 throughout: float32 cosines would let a blend print as 1.0000000238
    raw_kw, raw_em = np.asarray(raw_kw, dtype=np.float64), np.asarray(raw_em, dtype=np.float64)
    kw_n, em_n = minmax(raw_kw), minmax(raw_em)
    w_kw = dynamic_w_kw(query, settings.w_kw) if settings.dynamic_w_kw else settings.w_kw
    if settings.fusion == "rrf":
        hybrid = fuse_rrf(raw_kw, raw_em, w_kw, settings.rrf_k)
    else:
        hybrid = fuse_minmax(raw_kw, raw_em, w_kw)
    best_kw, best_em = float(raw_kw.max()), float(raw_em.max())
    if safeguards:
        top_kw = [chunks[i].text for i in np.argsort(-raw_kw)[:10] if raw_kw[i] > 0]
        sig = GateSignals(best_kw, best_em, best_kw / kw_ceiling if kw_ceiling > 0 else 0.0,
                          exact_token_in(query, top_kw) if settings.gate == "either" else "")
        reason = grounding_gate(sig, settings)
        if reason:
            return Retrieval(query, [], refused=True, reason=reason, best_raw_kw=best_kw, best_raw_em=best_em)
    order, rr = hybrid, {}
    if settings.rerank:
        from .rerank import blend, load_reranker, relevance

        top = _ranked(hybrid, settings.rerank_depth)
        p_rel = relevance(load_reranker(), query, [chunks[i].text for i in top])
        order, rr = blend(hybrid, top, p_rel, settings.w_rerank), dict(zip(top, p_rel))
    # Deterministic ties: higher score first, then candidate (corpus) order.
    cap = settings.max_per_source if safeguards else 0
    kept, skipped = diversity_cap(_ranked(order, settings.top_k * 8), _Docs(chunks), settings.top_k, cap)
    if len(kept) < settings.top_k and len(kept) + len(skipped) < len(chunks):
        # The cap ate the shortlist: walk the full ranking instead.
        kept, skipped = diversity_cap(_ranked(order, len(chunks)), _Docs(chunks), settings.top_k, cap)
    hits = [Hit(chunks[j], float(hybrid[j]), float(kw_n[j]), float(em_n[j]), float(raw_kw[j]), float(raw_em[j]),
                float(rr[j]) if j in rr else None) for j in kept]
    return Retrieval(query, hits, best_raw_kw=best_kw, best_raw_em=best_em, capped=[chunks[j].id for j in skipped])
