"""Dense first pass for large indexes: faiss HNSW instead of scoring every vector.

Below ``ann_threshold`` chunks the exact matrix product is fast enough (100k x
384 is ~20 ms here) and retrieval scores every chunk. Above it, retrieval takes
the union of the BM25 top-``first_pass`` and the HNSW top-``first_pass`` and
scores only those exactly - the production request path of the spec. Label
filters are applied inside the HNSW search (an ID selector), so a filtered
query still gets ``first_pass`` allowed candidates. The graph is derived data:
built from the stored vectors, cached next to the index, keyed by generation.
faiss is optional (extra ``ann``); without it large indexes stay exact.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

log = logging.getLogger("microrag")


def faiss_available() -> bool:
    try:
        import faiss  # noqa: F401

        return True
    except ImportError:
        return False


class HNSW:
    """Inner-product HNSW over unit vectors (so inner product = cosine)."""

    # Below this share of visible vectors, scoring the visible ones exactly is both
    # cheaper and exact; an HNSW walk restricted by a selective filter loses recall
    # (measured in benchmarks/scale.py: 10% filter, ef 128 -> recall@10 0.59).
    exact_below = 0.25

    def __init__(self, vectors: np.ndarray, m: int = 16, ef_construction: int = 100, ef_search: int = 256,
                 cache: Path | None = None) -> None:
        import faiss

        self.ef_search = ef_search
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.vectors = vectors
        if cache is not None and cache.exists():
            self.index = _read(cache)
            if self.index.ntotal == len(vectors):
                return
        self.index = faiss.IndexHNSWFlat(vectors.shape[1], m, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = ef_construction
        self.index.add(vectors)
        if cache is not None:
            tmp = cache.with_suffix(".tmp")
            faiss.write_index(self.index, str(tmp))
            tmp.replace(cache)  # atomic: a reader never loads half a graph

    def top(self, q: np.ndarray, n: int, allowed: np.ndarray | None = None) -> np.ndarray:
        """Indices of (approximately) the ``n`` best vectors for ``q`` among ``allowed``."""
        import faiss

        if allowed is not None and allowed.mean() < self.exact_below:
            idx = np.flatnonzero(allowed)
            scores = self.vectors[idx] @ q
            return idx[np.argsort(-scores)[:n]]
        params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]  # (faiss ships partial stubs)
        # A filter that hides a share of the graph needs a proportionally wider beam.
        share = 1.0 if allowed is None else max(float(allowed.mean()), 1e-3)
        params.efSearch = int(max(self.ef_search, n) / share)
        if allowed is not None:
            bits = np.packbits(np.asarray(allowed, dtype=bool), bitorder="little")
            sel = faiss.IDSelectorBitmap(len(allowed), faiss.swig_ptr(bits))
            params.sel = sel  # the locals bits/sel keep the bitmap alive until search returns
        _, ids = self.index.search(np.ascontiguousarray(q[None, :], dtype=np.float32), n, params=params)
        return ids[0][ids[0] >= 0]


def _read(path: Path):
    """A saved graph, its vectors memory-mapped where faiss can (``IO_FLAG_MMAP_IFC``, faiss
    1.10+): 12 ms instead of 116 ms to open 100k vectors here; pages load as searches touch them."""
    import faiss

    flag = getattr(faiss, "IO_FLAG_MMAP_IFC", None)
    if flag is not None:
        try:
            return faiss.read_index(str(path), flag)
        except RuntimeError:  # an older file layout or a faiss built without it: read it whole
            pass
    return faiss.read_index(str(path))


def top_n(scores: np.ndarray, n: int, allowed: np.ndarray | None = None) -> np.ndarray:
    """Indices of the ``n`` highest positive scores among ``allowed`` (unordered)."""
    mask = scores > 0 if allowed is None else (scores > 0) & allowed
    idx = np.flatnonzero(mask)
    if idx.size <= n:
        return idx
    return idx[np.argpartition(-scores[idx], n - 1)[:n]]
