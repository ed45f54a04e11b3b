"""The BM25 leg scores from its postings exactly as bm25s scores, on public text - whole, masked
to a clearance, and after chunks are added and removed without a re-fit."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SHARED
from microrag_engine.index import keyword
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
    return ours, ref, words, texts


def _reference(ref, query: str, n: int) -> np.ndarray:
    tokens = bm25_tokens(query)
    return np.asarray(ref.get_scores(tokens), dtype=np.float64) if tokens else np.zeros(n)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_scores_equal_bm25s_for_queries_of_corpus_words_and_noise(fitted, data):
    ours, ref, words, _ = fitted
    picked = data.draw(st.lists(st.sampled_from(words), max_size=8))  # repeats and stop words included
    noise = data.draw(st.text(max_size=20))
    query = " ".join([*picked, noise])
    assert np.array_equal(ours.scores(query), _reference(ref, query, ours.n))


def test_a_restored_matrix_scores_and_bounds_alike(fitted):
    ours, ref, words, _ = fitted
    arrays, terms = ours.state()
    restored = BM25Scorer(0.9, 0.4).restore(arrays, lambda: terms)
    for q in ["vitamin D deficiency", "protein protein folding", "zzzz unknown", ""]:
        assert np.array_equal(restored.scores(q), _reference(ref, q, ours.n))
        assert restored.ceiling(q) == ours.ceiling(q)


def _fit_reference(texts: list[str]):
    ref = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
    ref.index([bm25_tokens(t) or ["\x00empty"] for t in texts], show_progress=False)
    return ref


def test_a_masked_view_scores_as_a_fit_on_the_visible_chunks_alone(fitted):
    """A clearance's statistics (N, df, avgdl) are those of what it may read: the view must
    equal bm25s fitted on just the visible texts - scores, bounds and term weights."""
    ours, _, words, texts = fitted
    visible = np.random.default_rng(7).random(len(texts)) < 0.3
    view = ours.masked(visible)
    ref = _fit_reference([t for t, v in zip(texts, visible) if v])
    alone = BM25Scorer(0.9, 0.4).fit([t for t, v in zip(texts, visible) if v])
    for q in ["vitamin D deficiency", "protein protein folding", "zzzz unknown", "", " ".join(words[:40])]:
        assert np.array_equal(view.scores(q), _reference(ref, q, int(visible.sum())))
        assert view.ceiling(q) == alone.ceiling(q)
        assert [view.weight(t) for t in bm25_tokens(q)] == [alone.weight(t) for t in bm25_tokens(q)]


def test_added_and_removed_chunks_score_as_a_fit_from_scratch(fitted):
    """Removing chunks and adding others (appended, or placed among the kept ones) equals a
    fit on the resulting texts, and the scorer that was updated is left as it was."""
    ours, _, words, texts = fitted
    rng = np.random.default_rng(3)
    keep = rng.random(len(texts)) < 0.8
    new = texts[:40] + ["", "E-4012 build-01 vitamin"]
    before = ours.scores("vitamin D deficiency")
    queries = ["vitamin D deficiency", "E-4012", "protein protein folding", " ".join(words[100:130])]
    kept = [t for t, k in zip(texts, keep) if k]
    appended = ours.updated(keep, new)
    ref = _fit_reference(kept + new)
    for q in queries:
        assert np.array_equal(appended.scores(q), _reference(ref, q, len(kept) + len(new)))
    at = np.sort(rng.choice(len(kept) + len(new), size=len(new), replace=False))
    placed = ours.updated(keep, new, at=at)
    rest, fresh, slots = iter(kept), iter(new), set(at.tolist())
    scratch = BM25Scorer(0.9, 0.4).fit([next(fresh) if i in slots else next(rest) for i in range(len(kept) + len(new))])
    for q in queries:
        assert np.array_equal(placed.scores(q), scratch.scores(q))
        assert placed.ceiling(q) == scratch.ceiling(q)
    assert np.array_equal(ours.scores("vitamin D deficiency"), before)


WORDS = ["alpha", "beta", "gamma", "delta", "vpn", "port", "51820", "e-4012", "the", "refund"]


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join), min_size=1, max_size=25),
       data=st.data())
def test_any_sequence_of_writes_equals_a_fit_on_what_is_left(texts, data):
    """Drawn corpora and writes (removals, additions, both, repeatedly): the updated scorer and
    every masked view of it score exactly as fits from scratch on the same texts."""
    scorer, current = BM25Scorer(0.9, 0.4).fit(texts), list(texts)
    for _ in range(data.draw(st.integers(1, 3))):
        keep = np.array(data.draw(st.lists(st.booleans(), min_size=len(current), max_size=len(current))), dtype=bool)
        new = data.draw(st.lists(st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join), max_size=5))
        scorer, current = scorer.updated(keep, new), [t for t, k in zip(current, keep) if k] + new
        # Terms whose chunks are all gone are dropped once they pass a share of the vocabulary (#35).
        assert np.count_nonzero(np.diff(scorer.indptr) == 0) <= keyword.DEAD_TERMS * len(scorer.vocab)
        assert sorted(scorer.vocab.values()) == list(range(len(scorer.vocab)))
    if not current:
        assert scorer.n == 0 and scorer.scores("alpha").size == 0
        return
    scratch = BM25Scorer(0.9, 0.4).fit(current)
    visible = np.array(data.draw(st.lists(st.booleans(), min_size=len(current), max_size=len(current))), dtype=bool)
    query = " ".join(data.draw(st.lists(st.sampled_from(WORDS + ["unseen"]), max_size=6)))
    assert np.array_equal(scorer.scores(query), scratch.scores(query))
    assert scorer.ceiling(query) == scratch.ceiling(query)
    if visible.any():
        alone = BM25Scorer(0.9, 0.4).fit([t for t, v in zip(current, visible) if v])
        assert np.array_equal(scorer.masked(visible).scores(query), alone.scores(query))
        assert scorer.masked(visible).ceiling(query) == alone.ceiling(query)


def test_holds_says_whether_a_readable_chunk_has_the_term():
    scorer = BM25Scorer(0.9, 0.4).fit(["os.path.splitdrive splits a path", "the secret splitroot helper"])
    assert scorer.holds(bm25_tokens("splitroot")[0]) and not scorer.holds("zzzz")
    view = scorer.masked(np.array([True, False]))
    assert not view.holds(bm25_tokens("splitroot")[0])  # only in a chunk the view cannot read
    assert view.holds(bm25_tokens("splitdrive")[0])


# ---------------------------------------------------------------- the top n without scoring every chunk (#35)

ZIPF = [f"w{i}" for i in range(60)]


def _dense_top(scorer: BM25Scorer, query: str, n: int, allowed, visible=None) -> np.ndarray:
    """The scores of the dense top ``n`` (positive, allowed), sorted: what ``top`` must match."""
    full = np.zeros(len(scorer.dl))
    got = scorer.scores(query)
    full[np.arange(len(full)) if visible is None else np.flatnonzero(visible)] = got
    ok = full > 0 if allowed is None else (full > 0) & allowed
    return np.sort(full[ok])[::-1][:n]


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_top_finds_the_dense_top_n_and_scores_at_equals_scores(data):
    """Zipf-like corpora, written to (chunks placed among others: out-of-order postings),
    masked to a clearance and filtered: ``top`` returns the n best positive scores exactly
    (ties may pick either chunk) or None, never a hidden or filtered-out chunk; ``scores_at``
    equals ``scores`` at any positions. Forcing a small rare budget exercises the stop."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    p = 1 / np.arange(1, len(ZIPF) + 1)
    p /= p.sum()
    texts = [" ".join(rng.choice(ZIPF, size=rng.integers(0, 30), p=p)) for _ in range(data.draw(st.integers(1, 120)))]
    scorer = BM25Scorer(0.9, 0.4).fit(texts)
    if data.draw(st.booleans()):
        new = [" ".join(rng.choice(ZIPF, size=rng.integers(1, 20), p=p)) for _ in range(rng.integers(1, 20))]
        keep = rng.random(len(texts)) < 0.8
        total = int(keep.sum()) + len(new)
        scorer = scorer.updated(keep, new, at=np.sort(rng.choice(total, size=len(new), replace=False)))
    visible = (rng.random(len(scorer.dl)) < 0.7) if data.draw(st.booleans()) else None
    view = scorer.masked(visible) if visible is not None and visible.any() else scorer
    visible = view.visible
    allowed = (rng.random(len(scorer.dl)) < 0.6) if data.draw(st.booleans()) else None
    query = " ".join(data.draw(st.lists(st.sampled_from(ZIPF + ["unseen"]), max_size=6)))
    n = data.draw(st.integers(1, 15))
    budget_before = keyword.RARE_BUDGET
    budget = data.draw(st.sampled_from([budget_before, 0.0, 0.01, 1.0]))  # 0: every chunk scored
    try:
        keyword.RARE_BUDGET = budget
        found = view.top(query, n, allowed)
    finally:
        keyword.RARE_BUDGET = budget_before
    at = np.flatnonzero(visible) if visible is not None else np.arange(len(scorer.dl))
    want_all = view.scores(query)
    assert np.array_equal(view.scores_at(query, at[::-1]), want_all[::-1])
    assert found is not None  # BM25 always finds its top n itself
    assert len(set(found.tolist())) == len(found)
    if visible is not None:
        assert visible[found].all()
    if allowed is not None:
        assert allowed[found].all()
    got = np.sort(view.scores_at(query, found))[::-1]
    assert np.array_equal(got, _dense_top(view, query, n, allowed, visible))


def test_top_stops_on_the_rare_terms_when_they_prove_the_top_n():
    """A rare term that enough chunks hold, with common words: the n best are found from the
    rare term's postings (the common terms are read only at those chunks) and equal the dense top."""
    texts = [f"kiwi {'common ' * (i % 5)}words here" if i % 40 == 0 else f"common words here filler{i % 7}" for i in range(4000)]
    scorer = BM25Scorer(0.9, 0.4).fit(texts)
    scored: list[int] = []
    real = scorer._score_ordered
    scorer._score_ordered = lambda terms, at: (scored.append(len(at)), real(terms, at))[1]  # type: ignore[method-assign]
    found = scorer.top("kiwi common words", 50)
    assert found is not None and len(found) == 50
    assert scored == [100]  # kiwi's 100 chunks were scored, not the 4000 holding a common word
    assert np.array_equal(np.sort(scorer.scores_at("kiwi common words", found))[::-1],
                          _dense_top(scorer, "kiwi common words", 50, None))
    assert all(texts[i].startswith("kiwi") for i in found)


def test_removing_most_chunks_drops_the_terms_only_they_held():
    """The vocabulary does not keep every term a removed chunk ever had: once dead terms pass
    ``DEAD_TERMS`` of it they are dropped, and what is left scores as a fit from scratch and
    survives a save and restore."""
    texts = [f"shared words unique{i} rare{i}x" for i in range(400)]
    scorer = BM25Scorer(0.9, 0.4).fit(texts)
    keep = np.zeros(400, dtype=bool)
    keep[:10] = True
    smaller = scorer.updated(keep, ["shared newcomer"])
    assert len(smaller.vocab) == len(BM25Scorer(0.9, 0.4).fit(texts[:10] + ["shared newcomer"]).vocab)
    assert "unique399" not in smaller.vocab and len(scorer.vocab) > 800  # the old scorer is left as it was
    scratch = BM25Scorer(0.9, 0.4).fit(texts[:10] + ["shared newcomer"])
    restored = BM25Scorer(0.9, 0.4).restore(*smaller.state()[:1], lambda: smaller.state()[1])
    for q in ["shared unique3", "newcomer words", "unique399", "rare5x shared"]:
        assert np.array_equal(smaller.scores(q), scratch.scores(q))
        assert np.array_equal(restored.scores(q), scratch.scores(q))


def test_weighed_postings_are_kept_within_their_budget(monkeypatch):
    """The weighed postings of the terms read last are kept, the oldest dropped past
    ``ADDEND_POSTINGS`` per chunk (each term charged ``ENTRY_POSTINGS`` more) or past
    ``MAX_ADDEND_TERMS`` terms; the scores do not depend on what is kept."""
    monkeypatch.setattr(keyword, "ADDEND_POSTINGS", 0.08)  # 2,000 at the floor of 25,000 chunks
    rng = np.random.default_rng(5)
    texts = [" ".join(rng.choice(ZIPF, size=12)) for _ in range(300)]
    scorer, fresh = BM25Scorer(0.9, 0.4).fit(texts), BM25Scorer(0.9, 0.4).fit(texts)
    for word in ZIPF:
        got = scorer.scores(f"{word} w1")
        held = sum(len(idx) + keyword.ENTRY_POSTINGS for idx, _ in scorer._added.values())
        assert held == scorer._added_held and (held <= 2000 or len(scorer._added) == 1)
        monkeypatch.setattr(keyword, "ADDEND_POSTINGS", 0.0)  # the reference keeps one term at a time
        assert np.array_equal(got, fresh.scores(f"{word} w1"))
        monkeypatch.setattr(keyword, "ADDEND_POSTINGS", 0.08)
    monkeypatch.setattr(keyword, "MAX_ADDEND_TERMS", 5)
    scorer.scores(" ".join(ZIPF))
    assert len(scorer._added) == 5


def test_top_picks_the_first_of_tied_chunks_and_nothing_for_n_0():
    """Chunks tied at the n-th score: the first ones in index order, on the rare-term pass and on
    the pass over every chunk alike (the same query always finds the same chunks)."""
    texts = ["kiwi words"] * 300 + ["plain words"] * 3000
    scorer = BM25Scorer(0.9, 0.4).fit(texts)
    assert scorer.top("kiwi", 10).tolist() == list(range(10))  # rare: read from kiwi's postings
    assert sorted(scorer.top("words", 10).tolist()) == list(range(10))  # common: every chunk scored
    assert scorer.top("kiwi", 0).size == 0 and scorer.top("words", 0).size == 0
