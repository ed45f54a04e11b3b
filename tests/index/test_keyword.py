"""The BM25 leg scores from its own matrix exactly as bm25s scores, on public text."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SHARED
from microrag_engine.index.keyword import BM25Scorer
from microrag_engine.text import bm25_tokens

bm25s = pytest.importorskip("bm25s")
CORPUS = SHARED / "datasets" / "scifact" / "corpus.jsonl.gz"


@pytest.fixture(scope="module")
def fitted():
    if not CORPUS.exists():
        pytest.skip(f"{CORPUS} is absent (public SciFact abstracts beside the checkout)")
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(1500), f)]
    ours = BM25Scorer(k1=0.9, b=0.4).fit(texts)
    ref = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
    ref.index([bm25_tokens(t) or ["\x00empty"] for t in texts], show_progress=False)
    words = sorted({w for t in texts[:200] for w in t.split()})
    return ours, ref, words


def _reference(ref, query: str, n: int) -> np.ndarray:
    tokens = bm25_tokens(query)
    return np.asarray(ref.get_scores(tokens), dtype=np.float64) if tokens else np.zeros(n)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_scores_equal_bm25s_for_queries_of_corpus_words_and_noise(fitted, data):
    ours, ref, words = fitted
    picked = data.draw(st.lists(st.sampled_from(words), max_size=8))  # repeats and stop words included
    noise = data.draw(st.text(max_size=20))
    query = " ".join([*picked, noise])
    assert np.array_equal(ours.scores(query), _reference(ref, query, ours.n))


def test_a_restored_matrix_scores_and_bounds_alike(fitted):
    ours, ref, words = fitted
    arrays, terms = ours.state()
    restored = BM25Scorer(0.9, 0.4).restore(arrays, lambda: terms, ours.n)
    for q in ["vitamin D deficiency", "protein protein folding", "zzzz unknown", ""]:
        assert np.array_equal(restored.scores(q), _reference(ref, q, ours.n))
        assert restored.ceiling(q) == ours.ceiling(q)
