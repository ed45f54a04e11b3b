"""The ANN first pass for large indexes agrees with exact scoring and honours filters.

``HNSW`` partitions the vectors by label: a clearance searches only its labels'
partitions (small ones exactly, large ones through their own graph), and any other
mask is split by partition. Here ``exact_max`` is lowered so that small synthetic data
exercises both kinds of partition.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from microrag_engine.config import override, preset
from microrag_engine.engine import Engine, _maybe_ann
from microrag_engine.index import ann as ann_module
from microrag_engine.index import build_index
from microrag_engine.index.ann import HNSW, top_n
from microrag_engine.retrieve import retrieve
from microrag_engine.types import Chunk

faiss = pytest.importorskip("faiss", reason="faiss-cpu not installed (extra 'ann')")

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau".split()
SHARES = {"a": 0.02, "b": 0.08, "c": 0.40, "d": 0.45, "_quarantine": 0.05}
EXACT_MAX = 400  # with 6,000 vectors: "a" (~120) and "_quarantine" (~300) exact, the others graphs


@pytest.fixture(scope="module")
def big():
    rng = random.Random(7)
    chunks = [Chunk(f"d{i // 3}.md#{i % 3}", f"d{i // 3}.md", i % 3, 0, 0, " ".join(rng.choices(WORDS, k=12)))
              for i in range(3000)]
    return chunks, build_index(chunks, "bm25", "hash")


@pytest.fixture(scope="module")
def labelled():
    """6,000 clustered unit vectors (iid ones say nothing about ANN recall) with labels drawn by SHARES."""
    rng = np.random.default_rng(5)
    centres = rng.standard_normal((60, 32)).astype(np.float32)
    x = centres[rng.integers(0, 60, 6000)] + 0.5 * rng.standard_normal((6000, 32)).astype(np.float32) / np.sqrt(32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    labels = rng.choice(list(SHARES), size=6000, p=list(SHARES.values())).astype(object)
    queries = centres[rng.integers(0, 60, 60)] + 0.05 * rng.standard_normal((60, 32)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return x, labels, queries, HNSW(x, labels, exact_max=EXACT_MAX)


def exact(x: np.ndarray, q: np.ndarray, k: int, allowed: np.ndarray | None = None) -> list[int]:
    s = x @ q
    if allowed is not None:
        s = np.where(allowed, s, -np.inf)
    return [int(i) for i in np.argsort(-s)[:k] if np.isfinite(s[i])]


def clearance(labels: np.ndarray, visible: list[str]) -> np.ndarray:
    mask = np.isin(labels, visible)
    mask.setflags(write=False)  # as Engine.mask hands it out
    return mask


def recall(x, queries, h, allowed, k=10, n=100) -> float:
    hits = 0
    for q in queries:
        got = h.top(q, n, allowed)
        assert allowed is None or allowed[got].all()
        hits += len(set(exact(x, q, k, allowed)) & set(got[:k].tolist()))
    return hits / (k * len(queries))


def test_top_n():
    s = np.array([0.0, 3.0, 1.0, 2.0, 0.0])
    assert sorted(top_n(s, 2)) == [1, 3]
    assert sorted(top_n(s, 10)) == [1, 2, 3]  # zero scores are not candidates
    assert sorted(top_n(s, 2, np.array([1, 0, 1, 1, 1], bool))) == [2, 3]


def test_partitions_are_exact_when_small_and_graphs_when_large(labelled):
    x, labels, _, h = labelled
    kinds = {p.label: p.graph is not None for p in h.parts}
    assert kinds == {"a": False, "_quarantine": False, "b": True, "c": True, "d": True}
    assert sum(p.ids.size for p in h.parts) == len(x)
    for p in h.parts:
        assert (labels[p.ids] == p.label).all() and (np.diff(p.ids) > 0).all()


@pytest.mark.parametrize("visible", [["a"], ["a", "b"], ["a", "b", "c"], ["a", "b", "c", "d"], None])
def test_a_clearance_finds_what_exact_filtered_search_finds(labelled, visible):
    x, labels, queries, h = labelled
    allowed = None if visible is None else clearance(labels, visible)
    assert recall(x, queries, h, allowed) >= 0.99
    got = h.top(queries[0], 100, allowed)
    s = x[got] @ queries[0]
    assert (np.diff(s) <= 1e-6).all()  # best first, as the exact merge promises


def test_only_the_visible_labels_partitions_are_searched(labelled, monkeypatch):
    x, labels, _, h = labelled
    searched: list[str] = []
    real = h._search
    monkeypatch.setattr(h, "_search", lambda part, *a: searched.append(part.label) or real(part, *a))
    hidden = int(np.flatnonzero(labels == "d")[0])
    allowed = clearance(labels, ["a", "b"])
    got = h.top(x[hidden], 100, allowed)  # the query is a hidden chunk itself: its own nearest
    assert sorted(searched) == ["a", "b"] and hidden not in got and allowed[got].all()
    assert h.top(x[hidden], 1, clearance(labels, ["d"]))[0] == hidden  # visible, it is found first


def test_document_filters_not_aligned_with_labels_stay_correct(labelled):
    x, labels, queries, h = labelled
    rng = np.random.default_rng(9)
    clear = np.isin(labels, ["a", "b", "c"])
    for share in (0.01, 0.08, 0.5, 0.9):  # gathered exactly / through a selector with a widened beam
        allowed = clear & (rng.random(len(x)) < share)
        assert recall(x, queries, h, allowed) >= 0.99
    allowed = np.zeros(len(x), bool)
    assert h.top(queries[0], 10, allowed).size == 0


def test_a_writable_mask_is_never_taken_from_the_plan_cache(labelled):
    x, labels, queries, h = labelled
    allowed = np.isin(labels, ["c"])
    first = h.top(queries[0], 10, allowed)
    allowed[first] = False  # the same array object, different contents
    again = h.top(queries[0], 10, allowed)
    assert not set(first.tolist()) & set(again.tolist()) and allowed[again].all()


def test_a_cached_graph_reopens_and_searches_alike(tmp_path, labelled, monkeypatch):
    x, labels, queries, _ = labelled
    cache = tmp_path / "index.hnsw-1.faiss"
    built = HNSW(x, labels, cache=cache, exact_max=EXACT_MAX)
    assert json.loads((cache / "manifest.json").read_text())["labels"] == sorted(SHARES)
    monkeypatch.setattr(ann_module, "_build", lambda *a: pytest.fail("rebuilt a valid cache"))
    reopened = HNSW(x, labels, cache=cache, exact_max=EXACT_MAX)
    allowed = clearance(labels, ["b", "d"])
    for q in queries[:20]:
        assert list(reopened.top(q, 10)) == list(built.top(q, 10))
        assert list(reopened.top(q, 10, allowed)) == list(built.top(q, 10, allowed))


def test_a_stale_or_damaged_cache_is_rebuilt_never_trusted(tmp_path, labelled, monkeypatch):
    x, labels, queries, _ = labelled
    cache = tmp_path / "index.hnsw-1.faiss"
    HNSW(x, labels, cache=cache, exact_max=EXACT_MAX)
    builds: list[int] = []
    real = ann_module._build
    monkeypatch.setattr(ann_module, "_build", lambda v, *a: builds.append(len(v)) or real(v, *a))

    moved = labels.copy()  # same vectors and generation, another label layout (a document relabelled)
    d_rows = np.flatnonzero(labels == "d")
    moved[d_rows[:200]] = "a"
    h = HNSW(x, moved, cache=cache, exact_max=EXACT_MAX)
    assert builds  # the old graphs were not loaded
    victim = int(d_rows[0])
    assert h.top(x[victim], 1, clearance(moved, ["a"]))[0] == victim  # searched under its new label
    assert victim not in h.top(x[victim], 100, clearance(moved, ["d"]))

    builds.clear()
    other = x[::-1].copy()  # other vectors under the same name
    h = HNSW(other, moved, cache=cache, exact_max=EXACT_MAX)
    assert builds and h.top(other[7], 1)[0] == 7

    builds.clear()
    graph = next(cache.glob("part-*.faiss"))
    graph.write_bytes(graph.read_bytes()[:1000])  # truncated
    assert HNSW(other, moved, cache=cache, exact_max=EXACT_MAX).top(other[7], 1)[0] == 7 and builds

    builds.clear()
    HNSW(other, moved, cache=cache, exact_max=EXACT_MAX)
    assert not builds  # the rebuilt folder is good

    legacy = tmp_path / "index.hnsw-2.faiss"  # an older release's single-file cache at the same name
    legacy.write_bytes(b"not a folder")
    HNSW(other, moved, cache=legacy, exact_max=EXACT_MAX)
    assert builds and (legacy / "manifest.json").exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_ann_first_pass_matches_exact_ranking(big, monkeypatch):
    monkeypatch.setattr(HNSW, "exact_max", 500)  # 3,000 chunks in one partition: a graph
    chunks, index = big
    settings = override(preset("default"), keyword="bm25", embedder="hash", ann_threshold=1000, first_pass=200,
                        gate="none")
    ann_index = build_index(chunks, "bm25", "hash")
    ann_index.ann = _maybe_ann(ann_index.vectors, settings)
    assert ann_index.ann is not None and ann_index.ann.parts[0].graph is not None
    rng = random.Random(3)
    agree = 0
    for _ in range(30):
        q = " ".join(rng.choices(WORDS, k=3))
        exact_ids = [h.chunk.id for h in retrieve(index, q, settings).hits]
        approx = [h.chunk.id for h in retrieve(ann_index, q, settings).hits]
        agree += exact_ids[0] == approx[0]
    # min-max over a candidate subset can reorder near-ties, but the winner should hold.
    assert agree >= 27


def test_ann_honours_the_label_filter(big, monkeypatch):
    monkeypatch.setattr(HNSW, "exact_max", 500)
    chunks, _ = big
    settings = override(preset("default"), keyword="bm25", embedder="hash", ann_threshold=1000, gate="none", top_k=8)
    index = build_index(chunks, "bm25", "hash")
    index.ann = _maybe_ann(index.vectors, settings)
    allowed = np.array([int(c.doc[1:].split(".")[0]) % 10 == 0 for c in chunks])  # 10% visible, across the graph
    r = retrieve(index, "alpha beta gamma", settings, allowed=allowed)
    assert len(r.hits) == 8
    assert all(int(h.chunk.doc[1:].split(".")[0]) % 10 == 0 for h in r.hits)


def test_an_engine_searches_each_clearance_in_its_own_partitions(big, monkeypatch):
    monkeypatch.setattr(HNSW, "exact_max", 300)
    chunks, _ = big
    settings = override(preset("default"), keyword="bm25", embedder="hash", ann_threshold=1000, gate="none", top_k=8)
    index = build_index(chunks, "bm25", "hash")
    labels = ["_quarantine" if i % 10 == 0 else ("internal" if i % 3 == 0 else "public") for i in range(len(chunks))]
    index.ann = _maybe_ann(index.vectors, settings, labels=labels)
    engine = Engine(settings, index, labels=labels)
    assert engine.mask(["public"]) is engine.mask(["public", "_quarantine"])  # one cached mask per clearance
    assert not engine.mask(None).flags.writeable
    searched: list[str] = []
    real = index.ann._search
    monkeypatch.setattr(index.ann, "_search", lambda part, *a: searched.append(part.label) or real(part, *a))
    label_of = {c.id: label for c, label in zip(chunks, labels)}
    for visible, seen in ((None, {"internal", "public"}), (["public"], {"public"})):
        searched.clear()
        hits = engine.retrieve("alpha beta gamma", labels=visible).hits
        assert len(hits) == 8 and {label_of[h.chunk.id] for h in hits} <= seen
        assert set(searched) == seen  # the quarantine partition is never visited


# ---------------------------------------------------------------- after a write: graphs kept, not rebuilt


def _write(x: np.ndarray, labels: np.ndarray, rng: np.random.Generator, add: int, delete: int, move: int,
           to: str = "d") -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One write as Engine.updated lays it out: ``delete`` rows removed, ``move`` rows relabelled
    ``to``, ``add`` new clustered vectors placed among the rest. (new x, new labels, remap, new rows)."""
    from microrag_engine.engine import _remap
    from microrag_engine.index.saved import interleave

    keep = np.ones(len(x), dtype=bool)
    keep[rng.choice(len(x), size=delete, replace=False)] = False
    labels = labels.copy()
    if move:
        labels[rng.choice(np.flatnonzero(keep), size=move, replace=False)] = to
    fresh = x[rng.integers(0, len(x), add)] + 0.2 * rng.standard_normal((add, x.shape[1])).astype(np.float32) / np.sqrt(x.shape[1])
    fresh /= np.linalg.norm(fresh, axis=1, keepdims=True)
    n = int(keep.sum()) + add
    at = np.sort(rng.choice(n, size=add, replace=False))
    new_labels = interleave(labels, keep, rng.choice(list(SHARES), size=add).astype(object), at)
    return interleave(x, keep, fresh.astype(np.float32), at), new_labels, _remap(keep, at, n), at


def _graphs(h: HNSW) -> dict[str, object]:
    return {p.label: p.graph for p in h.parts if p.graph is not None}


def _consistent(h: HNSW, labels: np.ndarray) -> None:
    """Each partition's slot table names exactly its label's rows, each once, ``local`` aligned."""
    for p in h.parts:
        assert np.array_equal(p.ids, np.flatnonzero(labels == p.label))
        assert np.array_equal(p.slots[p.local], p.ids)
        assert np.array_equal(np.sort(p.slots[p.slots >= 0]), p.ids)


def test_a_write_keeps_every_graph_and_finds_what_exact_search_finds(labelled, monkeypatch):
    x, labels, queries, _ = labelled
    h = HNSW(x, labels, exact_max=EXACT_MAX)
    monkeypatch.setattr(ann_module, "_build", lambda *a: pytest.fail("a graph was rebuilt for a small write"))
    rng = np.random.default_rng(11)
    x2, labels2, remap, at = _write(x, labels, rng, add=60, delete=40, move=30)
    h2 = h.updated(x2, remap, labels2)
    assert _graphs(h2) == _graphs(h)  # the same graph objects, added to
    _consistent(h2, labels2)
    for visible in (None, ["b", "d"], ["c"]):
        allowed = None if visible is None else clearance(labels2, visible)
        assert recall(x2, queries, h2, allowed) >= 0.98
    for row in at:  # every new vector is found under its own label, and only there
        assert h2.top(x2[row], 1, clearance(labels2, [labels2[row]]))[0] == row
    moved = np.flatnonzero((remap >= 0) & (labels != "d"))
    moved = [int(remap[r]) for r in moved if labels2[remap[r]] == "d"]
    assert moved
    for row in moved:
        assert h2.top(x2[row], 1, clearance(labels2, ["d"]))[0] == row
        assert row not in h2.top(x2[row], 50, clearance(labels2, [v for v in SHARES if v != "d"]))
    doc_filter = np.zeros(len(x2), dtype=bool)
    doc_filter[::7] = True  # a mask across partitions, not a union of labels
    assert recall(x2, queries, h2, doc_filter) >= 0.98


def test_the_engine_before_a_write_answers_as_it_did(labelled):
    x, labels, queries, _ = labelled
    h = HNSW(x, labels, exact_max=EXACT_MAX)
    allowed = clearance(labels, ["c", "d"])
    before = [(h.top(q, 20).tolist(), h.top(q, 20, allowed).tolist()) for q in queries[:20]]
    rng = np.random.default_rng(12)
    x2, labels2, remap, _ = _write(x, labels, rng, add=300, delete=100, move=50)
    h.updated(x2, remap, labels2)  # adds to the graphs h searches too
    assert [(h.top(q, 20).tolist(), h.top(q, 20, allowed).tolist()) for q in queries[:20]] == before


def test_ten_thousand_mixed_writes_keep_recall_against_exact_search(labelled, monkeypatch):
    """Adds, deletions and relabels one row at a time: tombstones pile up, partitions are
    compacted as they cross ``compact_at``, and the result still agrees with exact search."""
    x, labels, queries, _ = labelled
    x, labels = x[:3000], labels[:3000]
    h = HNSW(x, labels, exact_max=EXACT_MAX)
    builds: list[int] = []
    real = ann_module._build
    monkeypatch.setattr(ann_module, "_build", lambda v, *a: builds.append(len(v)) or real(v, *a))
    rng = np.random.default_rng(13)
    kinds = rng.choice(3, size=10_000)
    for kind in kinds:
        x, labels, remap, _ = _write(x, labels, rng, add=int(kind == 0), delete=int(kind == 1), move=int(kind == 2),
                                     to=str(rng.choice(["b", "c", "d"])))
        h = h.updated(x, remap, labels)
    # compacted now and then (a few rebuilds, not one per write), with tombstones left since
    assert 0 < len(builds) < 50 and sum(p.dead for p in h.parts) > 0
    _consistent(h, labels)
    for visible in (None, ["c"], ["a", "b", "d"]):
        assert recall(x, queries, h, None if visible is None else clearance(labels, visible)) >= 0.98


def test_a_partition_is_rebuilt_once_a_quarter_of_it_is_tombstones(labelled, monkeypatch):
    x, labels, _, _ = labelled
    h = HNSW(x, labels, exact_max=EXACT_MAX)
    builds: list[int] = []
    real = ann_module._build
    monkeypatch.setattr(ann_module, "_build", lambda v, *a: builds.append(len(v)) or real(v, *a))
    keep = np.ones(len(x), dtype=bool)
    d_rows = np.flatnonzero(labels == "d")
    keep[d_rows[: len(d_rows) // 5]] = False  # a fifth: tombstones
    from microrag_engine.engine import _remap

    at = np.zeros(0, dtype=np.int64)
    h2 = h.updated(x[keep], _remap(keep, at, int(keep.sum())), labels[keep])
    assert not builds and next(p for p in h2.parts if p.label == "d").dead == len(d_rows) // 5
    keep2 = np.ones(int(keep.sum()), dtype=bool)
    keep2[np.flatnonzero(labels[keep] == "d")[: len(d_rows) // 10]] = False  # 30% in all: compacted
    h3 = h2.updated(x[keep][keep2], _remap(keep2, at, int(keep2.sum())), labels[keep][keep2])
    d3 = next(p for p in h3.parts if p.label == "d")
    assert builds == [d3.ids.size] and d3.dead == 0


def test_a_write_is_saved_and_reopens_without_a_rebuild_then_takes_more_writes(tmp_path, labelled, monkeypatch):
    x, labels, queries, _ = labelled
    h = HNSW(x, labels, cache=tmp_path / "ix.hnsw-1.faiss", exact_max=EXACT_MAX)
    rng = np.random.default_rng(14)
    x2, labels2, remap, at = _write(x, labels, rng, add=80, delete=50, move=20)
    h2 = h.updated(x2, remap, labels2)
    h2.save(tmp_path / "ix.hnsw-2.faiss")
    monkeypatch.setattr(ann_module, "_build", lambda *a: pytest.fail("rebuilt a saved write"))
    reopened = HNSW(x2, labels2, cache=tmp_path / "ix.hnsw-2.faiss", exact_max=EXACT_MAX)
    allowed = clearance(labels2, ["b", "d"])
    for q in queries[:20]:
        assert reopened.top(q, 10).tolist() == h2.top(q, 10).tolist()
        assert reopened.top(q, 10, allowed).tolist() == h2.top(q, 10, allowed).tolist()
    # the reopened graphs are memory-mapped files: a write takes an owned copy before adding
    x3, labels3, remap3, at3 = _write(x2, labels2, rng, add=40, delete=10, move=0)
    h3 = reopened.updated(x3, remap3, labels3)
    assert all(h3.top(x3[r], 1, clearance(labels3, [labels3[r]]))[0] == r for r in at3)
    assert recall(x3, queries, h3, None) >= 0.98


def test_readers_search_while_a_writer_adds_to_the_same_graphs(labelled):
    import threading

    x, labels, queries, _ = labelled
    h = HNSW(x, labels, exact_max=EXACT_MAX)
    current = [h, len(x)]
    errors: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        try:
            while not stop.is_set():
                engine, n = current
                for q in queries[:5]:
                    got = engine.top(q, 10)
                    assert got.size == 10 and (got < n).all()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for t in readers:
        t.start()
    rng = np.random.default_rng(15)
    try:
        for _ in range(100):
            x, labels, remap, _ = _write(x, labels, rng, add=20, delete=5, move=2)
            current[:] = [current[0].updated(x, remap, labels), len(x)]
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert not errors, errors[0]
    assert recall(x, queries, current[0], None) >= 0.98


def test_the_keyword_first_pass_from_rare_terms_ranks_as_scoring_every_chunk(monkeypatch):
    """Above the ANN threshold the keyword leg's first pass comes from ``BM25Scorer.top`` (the
    rare terms' postings first) and its candidates' scores from ``scores_at``: every answer,
    for every clearance and filter, scores as the one from scoring every chunk (chunks tied
    at the first pass's edge may stand in for each other)."""
    from microrag_engine.index import keyword
    from microrag_engine.index.keyword import BM25Scorer

    monkeypatch.setattr(HNSW, "exact_max", 300)
    monkeypatch.setattr(keyword, "RARE_BUDGET", 0.2)  # a small corpus: let the rare terms' postings be read
    rng = random.Random(3)
    vocab = [f"w{i}" for i in range(80)]
    zipf = [1 / (i + 1) for i in range(80)]  # rare words, as real text has: the rare-term path can stop
    chunks = [Chunk(f"d{i // 3}.md#{i % 3}", f"d{i // 3}.md", i % 3, 0, 0, " ".join(rng.choices(vocab, zipf, k=12)))
              for i in range(3000)]
    settings = override(preset("default"), keyword="bm25", embedder="hash", ann_threshold=1000, top_k=8, first_pass=20)
    index = build_index(chunks, "bm25", "hash")
    labels = ["internal" if i % 4 == 0 else "public" for i in range(len(chunks))]
    index.ann = _maybe_ann(index.vectors, settings, labels=labels)
    engine = Engine(settings, index, labels=labels)
    queries = [" ".join(rng.choices(vocab, k=rng.randint(1, 5))) for _ in range(40)]
    narrowed = np.array([rng.random() < 0.3 for _ in chunks])  # a query-time filter's chunks
    calls: list[bool] = []
    real = BM25Scorer.top
    monkeypatch.setattr(BM25Scorer, "top", lambda self, *a: (lambda r: (calls.append(r is not None), r)[1])(real(self, *a)))

    def run() -> list:
        out = []
        for q in queries:
            for lab in (None, ["public"]):
                r = engine.retrieve(q, labels=lab)
                out.append((r.refused, [round(h.hybrid, 12) for h in r.hits]))
            r = retrieve(index, q, settings, allowed=narrowed)
            out.append((r.refused, [round(h.hybrid, 12) for h in r.hits]))
        return out

    pruned = run()
    assert len(calls) == 3 * len(queries) and sum(calls) > len(calls) // 2  # the rare-term path answered most
    monkeypatch.setattr(BM25Scorer, "top", lambda self, *a: None)  # score every chunk
    assert run() == pruned


def test_a_first_pass_normalises_as_every_chunk_would(big, monkeypatch):
    """Above ``ann_threshold`` min-max fusion scales each leg by its least score over every
    visible chunk (``leg_floors``), not over the candidates: the whole top k and its fused
    scores are those of scoring every chunk (#35: 0.37 of the top 10 agreed at 1M before)."""
    import microrag_engine.retrieve as retrieve_mod

    monkeypatch.setattr(HNSW, "exact_max", 500)
    chunks, index = big
    settings = override(preset("default"), keyword="bm25", embedder="hash", ann_threshold=1000, first_pass=50,
                        gate="none")
    ann_index = build_index(chunks, "bm25", "hash")
    ann_index.ann = _maybe_ann(ann_index.vectors, settings)
    rng = random.Random(5)
    queries = [" ".join(rng.choices(WORDS, k=3)) for _ in range(30)]

    def agreeing() -> int:
        same = 0
        for q in queries:
            exact = [(h.chunk.id, h.hybrid) for h in retrieve(index, q, settings).hits]
            approx = [(h.chunk.id, h.hybrid) for h in retrieve(ann_index, q, settings).hits]
            same += [c for c, _ in exact] == [c for c, _ in approx] and np.allclose(
                [s for _, s in exact], [s for _, s in approx], rtol=0, atol=1e-6)
        return same

    assert agreeing() >= 28
    monkeypatch.setattr(retrieve_mod, "leg_floors", lambda *a: (None, None))  # the candidates' own least scores
    assert agreeing() < 28


def test_least_cosine_is_exact_below_the_sample_and_near_above(big, monkeypatch):
    """The dense floor (``Index.least_cosine``): every row of an index smaller than the sample;
    above it a strided sample's least (never below the true least, within its lowest 1%), and
    for a clearance too small to show in the sample, the ANN's farthest allowed vector."""
    import microrag_engine.index as index_mod

    chunks, _ = big
    index = build_index(chunks, "bm25", "hash")
    rng = np.random.default_rng(2)
    for _ in range(5):
        q = index.vectors[rng.integers(len(chunks))]
        exact = index.vectors @ q
        allowed = rng.random(len(chunks)) < 0.5
        assert index.least_cosine(q) == pytest.approx(float(exact.min()), abs=1e-6)
        assert index.least_cosine(q, allowed) == pytest.approx(float(exact[allowed].min()), abs=1e-6)
    monkeypatch.setattr(index_mod, "FLOOR_SAMPLE", 300)
    index._sample = None
    for _ in range(5):
        q = index.vectors[rng.integers(len(chunks))]
        exact = index.vectors @ q
        got = index.least_cosine(q)
        assert float(exact.min()) - 1e-6 <= got <= float(np.quantile(exact, 0.01)) + 1e-6
    index.ann = _maybe_ann(index.vectors, override(preset("default"), ann_threshold=1000))
    few = np.zeros(len(chunks), dtype=bool)
    few[[5, 901, 2003]] = True  # none of them among the sample's rows (every tenth)
    q = index.vectors[7]
    assert index.least_cosine(q, few) == pytest.approx(float((index.vectors[few] @ q).min()), abs=1e-6)
