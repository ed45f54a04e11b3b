"""The HNSW first pass for large indexes agrees with exact scoring and honours filters."""

from __future__ import annotations

import random

import numpy as np
import pytest

from microrag_engine.config import override, preset
from microrag_engine.engine import _maybe_ann
from microrag_engine.index import build_index
from microrag_engine.index.ann import top_n
from microrag_engine.retrieve import retrieve
from microrag_engine.types import Chunk

faiss = pytest.importorskip("faiss", reason="faiss-cpu not installed (extra 'ann')")

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau".split()


@pytest.fixture(scope="module")
def big():
    rng = random.Random(7)
    chunks = [Chunk(f"d{i // 3}.md#{i % 3}", f"d{i // 3}.md", i % 3, 0, 0, " ".join(rng.choices(WORDS, k=12)))
              for i in range(3000)]
    return chunks, build_index(chunks, "bm25", "hash")


def test_top_n():
    s = np.array([0.0, 3.0, 1.0, 2.0, 0.0])
    assert sorted(top_n(s, 2)) == [1, 3]
    assert sorted(top_n(s, 10)) == [1, 2, 3]  # zero scores are not candidates
    assert sorted(top_n(s, 2, np.array([1, 0, 1, 1, 1], bool))) == [2, 3]


def test_ann_first_pass_matches_exact_ranking(big):
    chunks, index = big
    settings = override(preset("default"), keyword="bm25", embedder="hash", ann_threshold=1000, first_pass=200,
                        gate="none")
    ann_index = build_index(chunks, "bm25", "hash")
    ann_index.ann = _maybe_ann(ann_index.vectors, settings)
    assert ann_index.ann is not None
    rng = random.Random(3)
    agree = 0
    for _ in range(30):
        q = " ".join(rng.choices(WORDS, k=3))
        exact = [h.chunk.id for h in retrieve(index, q, settings).hits]
        approx = [h.chunk.id for h in retrieve(ann_index, q, settings).hits]
        agree += exact[0] == approx[0]
    # min-max over a candidate subset can reorder near-ties, but the winner should hold.
    assert agree >= 27


def test_ann_honours_the_label_filter(big):
    chunks, _ = big
    settings = override(preset("default"), keyword="bm25", embedder="hash", ann_threshold=1000, gate="none", top_k=8)
    index = build_index(chunks, "bm25", "hash")
    index.ann = _maybe_ann(index.vectors, settings)
    allowed = np.array([int(c.doc[1:].split(".")[0]) % 10 == 0 for c in chunks])  # 10% visible
    r = retrieve(index, "alpha beta gamma", settings, allowed=allowed)
    assert len(r.hits) == 8
    assert all(int(h.chunk.doc[1:].split(".")[0]) % 10 == 0 for h in r.hits)


def test_small_indexes_stay_exact():
    assert _maybe_ann(np.zeros((10, 4), np.float32), preset("default")) is None


def test_a_saved_graph_reopens_memory_mapped_and_searches_alike(tmp_path):
    from microrag_engine.index.ann import HNSW

    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((2000, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    built = HNSW(vectors, cache=tmp_path / "hnsw-1.faiss")
    reopened = HNSW(vectors, cache=tmp_path / "hnsw-1.faiss")
    assert reopened.index.ntotal == 2000
    allowed = np.arange(2000) % 3 != 0
    for q in vectors[:20]:
        assert list(reopened.top(q, 10)) == list(built.top(q, 10))
        assert list(reopened.top(q, 10, allowed)) == list(built.top(q, 10, allowed))
