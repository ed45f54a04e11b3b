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

    def as_dict(self) -> dict[str, Any]:
        c = self.chunk
        return {
            "id": c.id, "doc": c.doc, "chunk": c.index, "start": c.start, "end": c.end,
            "hybrid": self.hybrid, "kw": self.kw, "em": self.em,
            "raw_kw": self.raw_kw, "raw_em": self.raw_em, "text": c.text,
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


# ---------------------------------------------------------------- safeguards (pure)


def grounding_gate(best_raw_kw: float, best_raw_em: float, gate: str, min_kw: float, min_em: float) -> str:
    """'' when the best raw match is strong enough; otherwise why we refuse."""
    if gate == "kw" and best_raw_kw < min_kw:
        return f"best keyword match {best_raw_kw:.3f} is below min_kw {min_kw}"
    if gate == "em" and best_raw_em < min_em:
        return f"best embedding match {best_raw_em:.3f} is below min_em {min_em}"
    return ""


def diversity_cap(order: list[int], docs: list[str], top_k: int, max_per_source: int) -> tuple[list[int], list[int]]:
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
) -> Retrieval:
    """Rank ``index`` for ``query``. ``allowed`` is a boolean mask of visible chunks."""
    cand = np.arange(len(index.chunks)) if allowed is None else np.flatnonzero(allowed)
    if cand.size == 0:
        return Retrieval(query, [], refused=safeguards, reason="no chunks are visible to this caller" if safeguards else "")
    if index.ann is not None:
        # Large index: union of each leg's first pass, then exact scores for those only.
        q = index.query_vector(query)
        kw_all = index.kw_scores(query)
        first = np.union1d(top_n(kw_all, settings.first_pass, allowed), index.ann.top(q, settings.first_pass, allowed))
        first = first.astype(np.int64)
        if allowed is not None:
            first = first[allowed[first]]  # belt and braces: the selector already filtered
        return rank_candidates(query, [index.chunks[i] for i in first], kw_all[first], index.vectors[first] @ q,
                               settings, safeguards)
    chunks = [index.chunks[i] for i in cand]
    return rank_candidates(query, chunks, index.kw_scores(query)[cand], index.em_scores(query)[cand], settings, safeguards)


def rank_candidates(
    query: str,
    chunks: list[Chunk],
    raw_kw: np.ndarray,
    raw_em: np.ndarray,
    settings: Settings,
    safeguards: bool = True,
) -> Retrieval:
    """Fuse, gate, cap and cut candidates whose raw leg scores are already known.

    The candidates are every visible chunk (embedded index) or the union of each
    leg's first-pass top-N (a database backend); normalisation is over them.
    """
    if not chunks:
        return Retrieval(query, [], refused=safeguards, reason="nothing matched the query" if safeguards else "")
    kw_n, em_n = minmax(raw_kw), minmax(raw_em)
    if settings.fusion == "rrf":
        hybrid = fuse_rrf(raw_kw, raw_em, settings.w_kw, settings.rrf_k)
    else:
        hybrid = fuse_minmax(raw_kw, raw_em, settings.w_kw)
    best_kw, best_em = float(raw_kw.max()), float(raw_em.max())
    if safeguards:
        reason = grounding_gate(best_kw, best_em, settings.gate, settings.min_kw, settings.min_em)
        if reason:
            return Retrieval(query, [], refused=True, reason=reason, best_raw_kw=best_kw, best_raw_em=best_em)
    # Deterministic ties: higher score first, then candidate (corpus) order.
    order = np.lexsort((np.arange(len(chunks)), -hybrid)).tolist()
    cap = settings.max_per_source if safeguards else 0
    kept, skipped = diversity_cap(order, [c.doc for c in chunks], settings.top_k, cap)
    hits = [Hit(chunks[j], float(hybrid[j]), float(kw_n[j]), float(em_n[j]), float(raw_kw[j]), float(raw_em[j]))
            for j in kept]
    return Retrieval(query, hits, best_raw_kw=best_kw, best_raw_em=best_em, capped=[chunks[j].id for j in skipped])
