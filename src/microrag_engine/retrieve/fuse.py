"""Step 3, fusion (pure): two raw score arrays -> one hybrid score per candidate.

``minmax`` (seed: min-max each leg over the candidates, all-equal -> 0,
``w_kw*kw + (1-w_kw)*em``) or ``rrf`` (weighted reciprocal rank fusion), with the
keyword weight raised for queries that carry an exact-looking token.
"""

from __future__ import annotations

import numpy as np

from .. import rx


def minmax(x: np.ndarray, floor: float | None = None) -> np.ndarray:
    """Scale to [0, 1]; when every value is equal, all become 0 (the seed's rule). ``floor``:
    the least value over a larger set these are drawn from (a first pass's candidates out of
    every chunk), which then maps to 0 instead of the least of ``x``."""
    if x.size == 0:
        return x.astype(np.float64)
    lo, hi = float(x.min()), float(x.max())
    if floor is not None:
        lo = min(lo, floor)
    if hi - lo <= 0:
        return np.zeros_like(x, dtype=np.float64)
    return (x - lo) / (hi - lo)


def fuse_minmax(kw: np.ndarray, em: np.ndarray, w_kw: float,
                floors: tuple[float | None, float | None] = (None, None)) -> np.ndarray:
    """Convex blend of min-max-normalised legs: ``w_kw*kw + (1-w_kw)*em`` (``floors``: each leg's, see ``minmax``)."""
    return w_kw * minmax(kw, floors[0]) + (1.0 - w_kw) * minmax(em, floors[1])


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
