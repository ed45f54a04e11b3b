"""Step 3: fusion, the grounding gate, the diversity cap, candidate masks."""

from __future__ import annotations

import numpy as np
import pytest

from microrag_engine.config import override, preset
from microrag_engine.index import build_index
from microrag_engine.retrieve import retrieve
from microrag_engine.retrieve.cap import diversity_cap
from microrag_engine.retrieve.fuse import dynamic_w_kw, fuse_minmax, fuse_rrf, looks_exact, minmax, ranks
from microrag_engine.retrieve.gate import GateSignals, exact_token_in, grounding_gate
from microrag_engine.types import Chunk


def test_minmax_all_equal_is_zero():
    assert not minmax(np.array([0.3, 0.3, 0.3])).any()
    assert np.allclose(minmax(np.array([1.0, 3.0, 2.0])), [0.0, 1.0, 0.5])
    assert minmax(np.array([])).size == 0


def test_fuse_minmax_is_convex():
    kw, em = np.array([0.0, 2.0, 1.0]), np.array([0.5, 0.1, 0.3])
    assert np.allclose(fuse_minmax(kw, em, 1.0), minmax(kw))
    assert np.allclose(fuse_minmax(kw, em, 0.0), minmax(em))
    assert np.allclose(fuse_minmax(kw, em, 0.5), 0.5 * minmax(kw) + 0.5 * minmax(em))


def test_rrf_weights_and_zero_keyword_scores():
    kw, em = np.array([3.0, 0.0, 1.0]), np.array([0.1, 0.9, 0.5])
    got = fuse_rrf(kw, em, 0.5, k=60)
    assert np.allclose(got, [0.5 / 61 + 0.5 / 63, 0.5 / 61, 0.5 / 62 + 0.5 / 62])
    assert list(ranks(np.array([0.2, 0.9, 0.2]))) == [2, 1, 3]  # ties by position


def test_gate_reads_raw_scores():
    s = override(preset("default"), min_kw=0.05, min_em=0.3, min_kwcov=0.5)
    kw, em, either, none = (override(s, gate=g) for g in ("kw", "em", "either", "none"))
    assert grounding_gate(GateSignals(0.04, 0.9), kw)
    assert not grounding_gate(GateSignals(0.06, 0.0), kw)
    assert grounding_gate(GateSignals(9.0, 0.29), em)
    assert not grounding_gate(GateSignals(0.0, 0.31), em)
    assert not grounding_gate(GateSignals(0.0, 0.0), none)
    # either: refuse only when both legs are weak and nothing exact matched
    assert grounding_gate(GateSignals(1.0, 0.29, kwcov=0.49), either)
    assert not grounding_gate(GateSignals(1.0, 0.31, kwcov=0.1), either)
    assert not grounding_gate(GateSignals(1.0, 0.1, kwcov=0.51), either)
    assert not grounding_gate(GateSignals(1.0, 0.1, kwcov=0.1, exact="E-4012"), either)


def test_exact_tokens_found_verbatim():
    texts = ["| E-4012 | Fleet API | heartbeat timeout |", "plain text"]
    assert exact_token_in("What does error E-4012 mean?", texts) == "E-4012"
    assert exact_token_in("what does error E-9999 mean?", texts) == ""
    assert exact_token_in("heartbeat timeout", texts) == ""  # plain words are not identifiers
    assert looks_exact("db-prod.bw.internal") and looks_exact("v2.3.1") and not looks_exact("well-known")


def test_dynamic_w_kw_leans_on_keywords_for_identifiers():
    assert dynamic_w_kw("what does E-4012 mean", 0.4) == pytest.approx(0.6)
    assert dynamic_w_kw("how many vacation days", 0.4) == 0.4
    assert dynamic_w_kw("E-4012", 0.95) == 1.0


def test_diversity_cap():
    docs = ["a", "a", "a", "b", "c", "a"]
    kept, skipped = diversity_cap([0, 1, 2, 3, 4, 5], docs, top_k=4, max_per_source=2)
    assert kept == [0, 1, 3, 4] and skipped == [2]
    kept, _ = diversity_cap([0, 1, 2, 3], docs, top_k=3, max_per_source=0)
    assert kept == [0, 1, 2]


def _chunks(texts_by_doc):
    out = []
    for doc, texts in texts_by_doc.items():
        for k, t in enumerate(texts):
            out.append(Chunk(f"{doc}#{k}", doc, k, 0, len(t), t))
    return out


CHUNKS = _chunks({
    "db.md": ["database primary hostname", "database backups nightly", "database replica read only", "database cluster"],
    "vpn.md": ["vpn client globalprotect"],
    "hr.md": ["holiday leave database of employees"],
})


@pytest.fixture(scope="module")
def seed_index():
    return build_index(CHUNKS, "tfidf", "hash")


def test_retrieve_caps_and_gates(seed_index):
    s = preset("seed")
    r = retrieve(seed_index, "database", s, safeguards=True)
    docs = [h.chunk.doc for h in r.hits]
    assert docs.count("db.md") == 2 and "hr.md" in docs
    assert r.capped  # the cap really pushed something out
    bare = retrieve(seed_index, "database", s, safeguards=False)
    assert [h.chunk.doc for h in bare.hits].count("db.md") >= 3
    refused = retrieve(seed_index, "flibberjab wuzzle", s, safeguards=True)
    assert refused.refused and not refused.hits and "min_kw" in refused.reason


def test_hits_carry_raw_and_normalised_scores(seed_index):
    r = retrieve(seed_index, "vpn globalprotect", preset("seed"))
    top = r.hits[0]
    assert top.chunk.doc == "vpn.md" and top.kw == 1.0 and top.raw_kw > 0
    d = top.as_dict()
    assert set(d) >= {"id", "doc", "chunk", "hybrid", "kw", "em", "raw_kw", "raw_em", "text"}


def test_top_k_and_w_kw_knobs(seed_index):
    s = override(preset("seed"), top_k=2, w_kw=1.0)
    r = retrieve(seed_index, "database backups", s, safeguards=False)
    assert len(r.hits) == 2
    assert all(abs(h.hybrid - h.kw) < 1e-12 for h in r.hits)


def test_masked_chunks_never_influence_the_result(seed_index):
    s = preset("seed")
    allowed = np.array([c.doc != "db.md" for c in CHUNKS])
    masked = retrieve(seed_index, "database", s, allowed=allowed)
    assert all(h.chunk.doc != "db.md" for h in masked.hits)
    # Same ranking and the same normalised scores as an index that never had db.md.
    alone = retrieve(build_index([c for c in CHUNKS if c.doc != "db.md"], "tfidf", "hash"), "database", s)
    # (TF-IDF's idf depends on the corpus, so compare the normalised em leg only.)
    assert [h.chunk.id for h in masked.hits] == [h.chunk.id for h in alone.hits]
    assert [round(h.em, 9) for h in masked.hits] == [round(h.em, 9) for h in alone.hits]


def test_ties_break_by_corpus_order():
    chunks = _chunks({"a.md": ["same text"], "b.md": ["same text"], "c.md": ["same text"]})
    r = retrieve(build_index(chunks, "tfidf", "hash"), "same text", preset("seed"), safeguards=False)
    assert [h.chunk.doc for h in r.hits] == ["a.md", "b.md", "c.md"]


# ---------------------------------------------------------------- visibility-scoped statistics (red team #3)


def _labelled_engine(tmp_path, settings, extra: dict[str, str] | None = None):
    from microrag_engine.engine import Engine
    from microrag_engine.ingest import ingest_paths
    from microrag_engine.store import open_store

    kb = tmp_path / "kb"
    kb.mkdir(parents=True, exist_ok=True)
    files = {"vpn.md": "# VPN\n\nThe corporate VPN uses WireGuard. Install the client from the portal.",
             "leave.md": "# Leave\n\nEmployees get 20 vacation days a year from the portal.",
             "pay.md": "---\nlabel: restricted\n---\n# Pay\n\nThe zanzibarite bonus pays 9000 dollars.", **(extra or {})}
    for name, text in files.items():
        (kb / name).write_text(text)
    store = open_store(tmp_path / "ix", create=True)
    ingest_paths(store, [kb], settings)
    return Engine.from_store(store, settings)


def test_hidden_words_do_not_change_what_a_reader_is_told(tmp_path):
    """Every query refused (thresholds of 1.0) so the reason prints the keyword coverage:
    a word only a restricted document holds must read exactly like a word nobody has."""
    s = override(preset("seed"), keyword="bm25", gate="either", min_em=1.0, min_kwcov=1.0)
    eng = _labelled_engine(tmp_path, s)
    hidden = eng.retrieve("portal zanzibarite", safeguards=True, labels=["public"])
    absent = eng.retrieve("portal qorvexulon", safeguards=True, labels=["public"])
    assert hidden.refused and absent.refused
    assert hidden.reason == absent.reason and hidden.best_raw_kw == absent.best_raw_kw
    # ...while a caller cleared for it does get the word's weight
    assert eng.retrieve("portal zanzibarite", safeguards=True, labels=["public", "restricted"]).reason != absent.reason


def test_hidden_documents_do_not_move_visible_scores(tmp_path):
    s = override(preset("seed"), keyword="bm25")
    plain = _labelled_engine(tmp_path / "a", s)
    stuffed = _labelled_engine(tmp_path / "b", s, {"stuffed.md": "---\nlabel: restricted\n---\n" + "vpn portal " * 300})
    q = "vpn portal"
    a = plain.retrieve(q, safeguards=False, labels=["public"])
    b = stuffed.retrieve(q, safeguards=False, labels=["public"])
    assert [(h.chunk.doc, h.raw_kw) for h in a.hits] == [(h.chunk.doc, h.raw_kw) for h in b.hits]


def test_long_doc_penalty_depends_on_each_documents_own_size():
    from microrag_engine.retrieve.cap import long_doc_penalty

    pen = long_doc_penalty([("short.md", 5), ("ref.md", 20), ("changelog.md", 2000)], 0.08, 20)
    assert set(pen) == {"changelog.md"} and pen["changelog.md"] == pytest.approx(0.08 * np.log(100))
    assert long_doc_penalty([("changelog.md", 2000)], 0.0, 20) == {}


@pytest.mark.parametrize("weight,first", [(0.0, "CHANGELOG.md"), (0.08, "facilities.md")])
def test_a_long_documents_chunk_loses_a_tie_to_a_normal_documents(weight, first):
    """#15: the length prior. The same sentence in a 300-chunk changelog and in a short
    page: without the prior the tie goes by corpus order (the changelog, read first);
    with it the short page wins. Its effect on real documents - release notes taking
    top-4 slots from unrelated questions - is measured in benchmarks/results/qa.md."""
    from microrag_engine.engine import Engine
    from microrag_engine.types import Document

    fact = "The parking records are kept by the facilities team."
    notes = [f"Fixed printer queue number {i}." for i in range(300)] + [fact]
    docs = [Document("CHANGELOG.md", "", prechunked=tuple(Chunk(f"CHANGELOG.md#{i}", "CHANGELOG.md", i, 0, len(t), t)
                                                         for i, t in enumerate(notes))),
            Document("facilities.md", "", prechunked=(Chunk("facilities.md#0", "facilities.md", 0, 0, len(fact), fact),))]
    settings = override(preset("default"), embedder="hash", w_long_doc=weight)
    engine = Engine.from_documents(docs, settings)
    assert sum(c.doc == "CHANGELOG.md" for c in engine.index.chunks) > 20
    hits = engine.retrieve("who keeps the parking records?").hits
    assert [h.chunk.text for h in hits[:2]] == [fact, fact]  # the same text: only the prior tells them apart
    assert hits[0].chunk.doc == first
