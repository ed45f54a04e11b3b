"""Step 2 - index every chunk twice: a keyword leg and an embedding leg.

Keyword scorers (``fit(texts)`` then ``scores(query) -> raw score per chunk``):
  * ``tfidf`` - the seed: tokens ``[a-zA-Z][a-zA-Z']+`` lower-cased,
    ``idf = ln((N+1)/(df+1)) + 1``, score = cosine of tf-idf vectors;
  * ``bm25``  - production: bm25s (Lucene variant) over stemmed, stop-worded tokens
    that keep digits, so ``E-4012`` and ``build-01`` stay findable.
Embedders (``embed(texts) -> (n, dim) float32 unit rows``; cosine = dot):
  * ``hash``   - the seed: 128 md5 buckets, +1.0 per token, L2-normalised;
  * ``minilm`` - all-MiniLM-L6-v2 (int8 ONNX, 384-d) on onnxruntime, offline.
This module does not fuse, gate or rank: that is ``retrieve``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..types import Chunk
from .ann import HNSW
from .embed import Embedder, cosines, make_embedder
from .keyword import KeywordScorer, make_keyword
from .saved import ChunkTable


class Index:
    """Chunks with both legs fitted: ``keyword.scores(q)`` and unit ``vectors`` (n, dim)."""

    def __init__(self, chunks: Sequence[Chunk], keyword: KeywordScorer | None, embedder: Embedder, vectors: np.ndarray,
                 ann: HNSW | None = None) -> None:
        self.chunks = ChunkTable.from_chunks(chunks)
        self.keyword = keyword
        self.embedder = embedder
        self.vectors = vectors
        self.ann = ann  # an ann.HNSW for large indexes; None = score every vector exactly
        self._sample: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # (vectors, rows, their copy)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1]) if self.vectors.ndim == 2 else 0

    def kw_scores(self, query: str) -> np.ndarray:
        return self.keyword.scores(query) if self.keyword is not None else np.zeros(len(self.chunks))

    def query_vector(self, query: str) -> np.ndarray:
        return self.embedder.embed([query])[0]

    def least_cosine(self, q: np.ndarray, allowed: np.ndarray | None = None) -> float | None:
        """About the least cosine of ``q`` with the vectors ``allowed`` (None when none is): the
        least over an evenly strided sample of ``FLOOR_SAMPLE`` rows (every row of a smaller
        index; 0.2 ms at 1M), or, when fewer than ``MIN_FLOOR_ROWS`` of them are allowed, that of
        the allowed vector the ANN finds farthest (its search for ``-q``: a few ms at 1M)."""
        n = len(self.vectors)
        sample = self._sample
        if sample is None or sample[0] is not self.vectors:  # (made again when the vectors are replaced)
            rows = np.arange(0, n, max(1, n // FLOOR_SAMPLE))
            sample = self._sample = (self.vectors, rows, np.ascontiguousarray(self.vectors[rows]))
        _, rows, mat = sample
        dots = mat @ q if n else np.zeros(0)
        if allowed is not None:
            dots = dots[allowed[rows]]
        if dots.size >= MIN_FLOOR_ROWS or self.ann is None:
            return float(dots.min()) if dots.size else None
        far = self.ann.top(-q, 1, allowed)
        return float((self.vectors[far] @ q)[0]) if far.size else None

    def em_scores(self, query: str) -> np.ndarray:
        if not self.chunks:
            return np.zeros(0)
        return cosines(self.vectors, self.query_vector(query))


# ``Index.least_cosine``: rows of the sample a query's dense floor is read from, and the fewest
# of them a clearance must see before the ANN's farthest vector is asked instead.
FLOOR_SAMPLE = 8192
MIN_FLOOR_ROWS = 256


def build_index(chunks: Sequence, keyword: str = "bm25", embedder: str = "minilm", k1: float = 0.9, b: float = 0.4,
                progress: bool = False) -> Index:
    """Fit the keyword leg and embed every chunk (batched; a progress bar if asked)."""
    emb = make_embedder(embedder)
    texts = [c.text for c in chunks]
    kw = make_keyword(keyword, k1=k1, b=b).fit(texts)
    if not progress or len(texts) < 256:
        vectors = emb.embed(texts) if texts else np.zeros((0, emb.dim), dtype=np.float32)
    else:
        from tqdm import tqdm

        parts = []
        step = 256
        with tqdm(total=len(texts), unit="chunk", desc="embedding", leave=False) as bar:
            for lo in range(0, len(texts), step):
                parts.append(emb.embed(texts[lo : lo + step]))
                bar.update(len(parts[-1]))
        vectors = np.vstack(parts)
    return Index(chunks, kw, emb, vectors)
