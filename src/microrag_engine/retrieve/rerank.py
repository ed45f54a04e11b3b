"""Step 3b - rerank: a cross-encoder reads (query, chunk) pairs for the top fused candidates.

In:  the query, the fused candidates' texts and their hybrid scores.
Out: a blended score ``w_rerank * p(relevant) + (1 - w_rerank) * minmax(hybrid)``
     for the first ``rerank_depth`` candidates; the rest keep their order below them.
The model is any cross-encoder folder with a 'relevant' label (``rerank_model``).
None ships: the one we trained (``training/RERANKER.md``) learned from
non-commercial data, and measured, it did not earn its latency
(``benchmarks/results/rerank.md``), so reranking is off by default. The
grounding gate still reads the raw leg scores; reranking never un-refuses a query.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..runtime.crossencoder import CrossEncoder, load_encoder, softmax


@lru_cache(maxsize=2)
def load_reranker(folder: str | Path) -> CrossEncoder:
    """The cross-encoder in ``folder`` (its config names a 'relevant' label), loaded once."""
    return load_encoder(Path(folder))


def relevance(model: CrossEncoder, query: str, texts: Sequence[str]) -> np.ndarray:
    """p(relevant) per text. One-logit models (sigmoid) and two-way (softmax) both work."""
    logits = model.logits([(query, t) for t in texts])
    if logits.size == 0:
        return np.zeros(0)
    if logits.shape[1] == 1:
        return 1.0 / (1.0 + np.exp(-logits[:, 0]))
    labels = {str(v).lower(): int(k) for k, v in model.config.get("id2label", {}).items()}
    return softmax(logits)[:, labels.get("relevant", logits.shape[1] - 1)]


def blend(hybrid: np.ndarray, top: Sequence[int], p_rel: np.ndarray, w_rerank: float) -> np.ndarray:
    """Scores whose order puts the reranked ``top`` first, by the blend, then the rest by hybrid."""
    out = np.asarray(hybrid, dtype=np.float64) - 2.0  # hybrid is in [0, 1]: below every blend
    h = np.asarray(hybrid, dtype=np.float64)[list(top)]
    span = h.max() - h.min() if len(h) else 0.0
    h_n = (h - h.min()) / span if span > 0 else np.ones_like(h)
    out[list(top)] = w_rerank * np.asarray(p_rel) + (1.0 - w_rerank) * h_n
    return out
