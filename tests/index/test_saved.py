"""The saved index: opened from derived files it ranks exactly as one derived from the store."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from microrag_engine.config import preset
from microrag_engine.engine import Engine
from microrag_engine.index.saved import ChunkTable, interleave, open_saved, save
from microrag_engine.ingest import ingest_paths
from microrag_engine.store.sqlite import SQLiteStore
from microrag_engine.types import Chunk

QUERIES = ["how do refunds work", "rotate the signing key", "zebra", "what is the on-call rotation", "E-4012 error",
           "vacation days for new staff"]


def corpus(folder: Path, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "refunds.md").write_text("# Refunds\n\nRefunds are paid within 14 days. Ask billing for a refund form.\n")
    (folder / "keys.md").write_text("# Keys\n\nRotate the signing key every 90 days. Error E-4012 means the key expired.\n")
    (folder / "oncall.md").write_text("# On-call\n\nThe on-call rotation changes every Monday. Café hours: 9–17 ✓.\n" + extra)
    (folder / "leave.md").write_text("---\nlabel: internal\n---\n# Leave\n\nNew staff get 25 vacation days a year.\n")
    return folder


def ranked(engine: Engine, labels=None) -> list[tuple]:
    out = []
    for q in QUERIES:
        r = engine.retrieve(q, labels=labels)
        out.append((r.refused, r.reason, [(h.chunk, round(h.hybrid, 12), round(h.raw_kw, 9), round(h.raw_em, 6)) for h in r.hits]))
    return out


@pytest.fixture(params=["default", "seed"])
def settings(request):
    return preset(request.param)


def test_an_index_opened_from_its_saved_files_ranks_as_one_derived_from_the_store(tmp_path, settings):
    store = SQLiteStore(tmp_path / "ix")
    ingest_paths(store, [corpus(tmp_path / "docs")], settings)
    first = Engine.from_store(store, settings)  # derives from the store, saves
    folder = tmp_path / "ix" / f"index.derived-{store.generation()}"
    assert (folder / "manifest.json").exists()
    again = Engine.from_store(store, settings)  # opens the saved files
    assert type(again.index.chunks) is ChunkTable and again.index.chunks._chunks is None  # really the saved columns
    assert list(again.index.chunks) == list(first.index.chunks)
    assert list(again.labels) == list(first.labels)
    assert again.n_documents == first.n_documents == 4
    assert dict(again.records) == dict(first.records)  # labels, provenance and front matter, for filters
    assert ranked(again) == ranked(first)
    assert ranked(again, labels=["public"]) == ranked(first, labels=["public"])  # scoped statistics too
    store.close()


def test_a_new_generation_replaces_the_saved_files_and_is_what_queries_see(tmp_path):
    settings = preset("default")
    store = SQLiteStore(tmp_path / "ix")
    docs = corpus(tmp_path / "docs")
    ingest_paths(store, [docs], settings)
    Engine.from_store(store, settings)
    old = store.generation()
    corpus(docs, extra="Zebras are seen at the office on Fridays.\n")
    ingest_paths(store, [docs], settings)
    engine = Engine.from_store(store, settings)
    assert store.generation() != old and not (tmp_path / "ix" / f"index.derived-{old}").exists()
    assert engine.retrieve("zebras at the office").hits[0].chunk.doc.endswith("oncall.md")
    reopened = Engine.from_store(store, settings)
    assert ranked(reopened) == ranked(engine)
    store.close()


def test_saved_files_built_with_other_settings_or_damaged_are_rebuilt_not_trusted(tmp_path):
    settings = preset("default")
    store = SQLiteStore(tmp_path / "ix")
    ingest_paths(store, [corpus(tmp_path / "docs")], settings)
    Engine.from_store(store, settings)
    folder = tmp_path / "ix" / f"index.derived-{store.generation()}"
    other = replace(settings, k1=1.5)
    expected = ranked(Engine.from_store(store, other))  # k1 differs: the saved matrix must not be used
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["k1"] == 1.5  # it was rebuilt with the new k1
    reference = ranked(Engine.from_store(SQLiteStore(tmp_path / "ix"), other))
    assert reference == expected
    (folder / "bm25_tf.npy").write_bytes(b"garbage")  # damaged: rebuilt from the store
    assert ranked(Engine.from_store(store, other)) == expected
    store.close()


def test_a_missing_manifest_means_no_saved_index():
    assert open_saved(None, {}) is None


def test_chunk_tables_round_trip_unicode_pages_and_spans(tmp_path):
    chunks = [Chunk("a.md#0", "a.md", 0, 0, 5, "héllo", 0), Chunk("a.md#1", "a.md", 1, 5, 9, "wörld ✓", 2),
              Chunk("dir/b.pdf#0", "dir/b.pdf", 0, 0, 0, "", 1), Chunk("c#0", "c", 0, 3, 7, "line\nbreak", 0)]
    table = ChunkTable.from_chunks(chunks)
    vectors = np.eye(4, dtype=np.float32)
    save(tmp_path / "derived-1", {"generation": 1}, table, vectors, ["public", "internal", "public", "_quarantine"], None)
    saved = open_saved(tmp_path / "derived-1", {"generation": 1})
    assert saved is not None
    assert list(saved.chunks) == chunks and saved.chunks[-1] == chunks[-1] and saved.chunks[1:3] == chunks[1:3]
    assert list(saved.labels) == ["public", "internal", "public", "_quarantine"]
    assert list(saved.chunks.docs()) == ["a.md", "a.md", "dir/b.pdf", "c"]
    assert np.array_equal(saved.vectors, vectors)
    assert open_saved(tmp_path / "derived-1", {"generation": 2}) is None  # another generation's files


def test_an_index_on_a_read_only_folder_still_opens(tmp_path, monkeypatch):
    settings = preset("default")
    store = SQLiteStore(tmp_path / "ix")
    ingest_paths(store, [corpus(tmp_path / "docs")], settings)

    def refuse(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("microrag_engine.index.saved.Path.mkdir", refuse)
    engine = Engine.from_store(store, settings)
    assert engine.retrieve("rotate the signing key").hits
    assert not list((tmp_path / "ix").glob("*derived-*"))
    store.close()


def test_document_ids_with_newlines_keep_their_chunks(tmp_path):
    chunks = [Chunk("pub#0", "pub", 0, 0, 3, "one"), Chunk("x\ny#0", "x\ny", 0, 0, 3, "two"),
              Chunk("cr\rid#0", "cr\rid", 0, 0, 3, "three"), Chunk("pub2#0", "pub2", 0, 0, 3, "four"),
              Chunk("secret#0", "secret", 0, 0, 6, "SECRET")]
    labels = ["public", "public", "public", "public", "restricted"]
    save(tmp_path / "index.derived-1", {"generation": 1}, ChunkTable.from_chunks(chunks), np.eye(5, dtype=np.float32),
         labels, None)
    saved = open_saved(tmp_path / "index.derived-1", {"generation": 1})
    assert saved is not None and list(saved.chunks) == chunks
    assert [saved.chunks[int(i)].text for i in np.flatnonzero(saved.chunks.docs() == "pub2")] == ["four"]


def test_two_stores_in_one_folder_and_a_replaced_store_never_share_saved_files(tmp_path):
    settings = preset("default")
    a, b = SQLiteStore(tmp_path / "a.sqlite"), SQLiteStore(tmp_path / "b.sqlite")
    ingest_paths(a, [corpus(tmp_path / "docs")], settings)
    other = tmp_path / "other"
    other.mkdir()
    (other / "zebra.md").write_text("# Zebras\n\nZebras graze on the savannah in herds.\n")
    ingest_paths(b, [other], settings)
    assert a.generation() == b.generation()  # same generation number, different stores
    Engine.from_store(a, settings)
    eb = Engine.from_store(b, settings)
    assert {c.doc for c in eb.index.chunks} == {"other/zebra.md"}
    # a store file replaced by a new one (same path, generation counting from 1 again)
    a.close()
    (tmp_path / "a.sqlite").unlink()
    fresh = SQLiteStore(tmp_path / "a.sqlite")
    ingest_paths(fresh, [other], settings)
    assert {c.doc for c in Engine.from_store(fresh, settings).index.chunks} == {"other/zebra.md"}
    b.close()
    fresh.close()


def test_cleanup_touches_only_this_stores_own_derived_files(tmp_path):
    settings = preset("default")
    mine = tmp_path / "derived-data"  # a user's folder that merely looks like a cache name
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    store = SQLiteStore(tmp_path / "kb.sqlite")
    ingest_paths(store, [corpus(tmp_path / "docs")], settings)
    Engine.from_store(store, settings)
    ingest_paths(store, [corpus(tmp_path / "docs", extra="More text.\n")], settings)
    Engine.from_store(store, settings)
    assert (mine / "keep.txt").read_text() == "mine"
    assert [p.name for p in tmp_path.glob("kb.derived-*")] == [f"kb.derived-{store.generation()}"]
    store.close()


def test_a_truncated_file_in_the_saved_folder_means_a_rebuild_not_a_crash(tmp_path):
    settings = preset("default")
    store = SQLiteStore(tmp_path / "ix")
    ingest_paths(store, [corpus(tmp_path / "docs")], settings)
    expected = ranked(Engine.from_store(store, settings))
    folder = tmp_path / "ix" / f"index.derived-{store.generation()}"
    for name in ("label_of.npy", "vectors.npy", "docs.json", "bm25_indices.npy", "bm25_dl.npy", "bm25_indptr.npy"):
        (folder / name).write_bytes(b"")  # what a power cut can leave
        assert ranked(Engine.from_store(store, settings)) == expected
    store.close()


def test_a_changed_tokeniser_means_a_rebuild(tmp_path, monkeypatch):
    settings = preset("default")
    store = SQLiteStore(tmp_path / "ix")
    ingest_paths(store, [corpus(tmp_path / "docs")], settings)
    Engine.from_store(store, settings)
    folder = tmp_path / "ix" / f"index.derived-{store.generation()}"
    before = json.loads((folder / "manifest.json").read_text())["tokens"]
    monkeypatch.setattr("microrag_engine.engine.bm25_fingerprint", lambda: "another-tokeniser")
    Engine.from_store(store, settings)
    assert before != "another-tokeniser" == json.loads((folder / "manifest.json").read_text())["tokens"]
    store.close()


def test_threads_racing_to_the_first_query_all_see_the_full_index(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    settings = preset("default")
    store = SQLiteStore(tmp_path / "ix")
    ingest_paths(store, [corpus(tmp_path / "docs")], settings)
    expected = ranked(Engine.from_store(store, settings))
    for _ in range(5):
        engine = Engine.from_store(store, settings)  # lazy vocabulary and records, not yet read
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda _, e=engine: (ranked(e), len(dict(e.records))), range(8)))
        assert all(g == (expected, 4) for g in got)
    store.close()


def test_save_derived_false_leaves_nothing_beside_the_store(tmp_path):
    settings = preset("default")
    store = SQLiteStore(tmp_path / "ix")
    ingest_paths(store, [corpus(tmp_path / "docs")], settings)
    engine = Engine.from_store(store, settings, save_derived=False)  # the server after a write
    assert engine.retrieve("rotate the signing key").hits
    assert not list((tmp_path / "ix").glob("*derived-*"))
    store.close()


def test_check_finds_a_saved_file_damaged_in_place_and_removes_the_folder(tmp_path):
    settings = preset("default")
    store = SQLiteStore(tmp_path / "ix")
    ingest_paths(store, [corpus(tmp_path / "docs")], settings)
    expected = ranked(Engine.from_store(store, settings))
    assert store.check() == []  # a healthy saved folder passes
    folder = tmp_path / "ix" / f"index.derived-{store.generation()}"
    vectors = folder / "vectors.npy"
    vectors.write_bytes(vectors.read_bytes()[:128] + bytes(vectors.stat().st_size - 128))  # same size, zeroed
    problems = store.check()
    assert any("vectors.npy does not match its checksum" in p for p in problems), problems
    assert not folder.exists()  # removed: the next open rebuilds it
    assert ranked(Engine.from_store(store, settings)) == expected
    store.close()


# Any text the store can hold (no lone surrogates: SQLite refuses them): newlines, \r, NUL,
# bidi controls, astral characters - in document ids and chunk texts alike.
_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(_TEXT, _TEXT, st.integers(0, 3)), min_size=1, max_size=12))
def test_any_ids_and_texts_round_trip_through_the_saved_columns(tmp_path, rows):
    import shutil

    chunks, seen = [], {}
    for doc, text, page in rows:
        k = seen.setdefault(doc, 0)
        seen[doc] = k + 1
        chunks.append(Chunk(f"{doc}#{k}", doc, k, 0, len(text), text, page))
    folder = tmp_path / "index.derived-1"
    shutil.rmtree(folder, ignore_errors=True)
    vectors = np.zeros((len(chunks), 4), dtype=np.float32)
    labels = [("public", "_quarantine", "internal")[i % 3] for i in range(len(chunks))]
    save(folder, {"generation": 1}, ChunkTable.from_chunks(chunks), vectors, labels, None)
    saved = open_saved(folder, {"generation": 1})
    assert saved is not None
    assert list(saved.chunks) == chunks and list(saved.labels) == labels
    for doc in seen:
        # Compared in Python: numpy turns a str scalar into its own str type, which drops trailing NULs ("\x00" == "").
        assert [saved.chunks[i].text for i, d in enumerate(saved.chunks.docs()) if d == doc] == \
            [c.text for c in chunks if c.doc == doc]


def test_a_folder_of_an_older_format_is_rebuilt_never_misread(tmp_path):
    """Format 2 saved BM25 weights, format 3 raw postings: an old folder must not be opened
    as postings (its arrays would be read as the wrong thing), whatever its files hold."""
    settings = preset("default")
    store = SQLiteStore(tmp_path / "ix")
    ingest_paths(store, [corpus(tmp_path / "docs")], settings)
    expected = ranked(Engine.from_store(store, settings))
    folder = tmp_path / "ix" / f"index.derived-{store.generation()}"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["format"] == 3
    (folder / "manifest.json").write_text(json.dumps({**manifest, "format": 2}))
    expect = {k: manifest[k] for k in ("store", "generation", "keyword", "k1", "b", "tokens", "embedder", "dim")}
    assert open_saved(folder, expect) is None
    assert ranked(Engine.from_store(store, settings)) == expected
    assert json.loads((folder / "manifest.json").read_text())["format"] == 3  # rebuilt in the new format
    store.close()


def test_an_engine_opened_from_saved_files_updates_as_one_derived_afresh(tmp_path):
    """The server's path after a write: the engine it opened from the saved (memory-mapped)
    files takes in the changed documents; it ranks as an engine derived from the store, and
    its texts - some on disk, some new - read back right after several writes."""
    settings = preset("default")
    store = SQLiteStore(tmp_path / "ix")
    docs = corpus(tmp_path / "docs")
    ingest_paths(store, [docs], settings)
    Engine.from_store(store, settings)
    engine = Engine.from_store(store, settings)
    assert engine.index.chunks._chunks is None  # the saved columns
    (docs / "zebra.md").write_text("# Zebras\n\nZebras are seen at the office on Fridays.\n")
    ingest_paths(store, [docs], settings)
    engine = engine.updated(store)
    corpus(docs, extra="Zebras also visit on Mondays.\n")
    (docs / "refunds.md").unlink()
    ingest_paths(store, [docs], settings, prune=True)
    engine = engine.updated(store)
    fresh = Engine.from_store(store, settings, save_derived=False)
    assert list(engine.index.chunks) == list(fresh.index.chunks) and list(engine.labels) == list(fresh.labels)
    assert engine.generation == fresh.generation and dict(engine.records) == dict(fresh.records)
    assert ranked(engine) == ranked(fresh) and ranked(engine, labels=["public"]) == ranked(fresh, labels=["public"])
    assert not any(c.doc.endswith("refunds.md") for c in engine.index.chunks)
    store.close()


@hsettings(max_examples=40, deadline=None)
@given(st.data())
def test_updated_chunk_tables_hold_what_a_table_of_the_result_holds(data):
    """Any removals and insertions, repeated, on a list-backed or a saved-style table."""
    import tempfile

    def chunk(doc: str, k: int) -> Chunk:
        return Chunk(f"{doc}#{k}", doc, k, k, k + 1, f"text of {doc} {k}", k % 2)

    rows = [chunk(f"d{i // 2}", i % 2) for i in range(data.draw(st.integers(0, 8)))]
    table = ChunkTable.from_chunks(rows)
    with tempfile.TemporaryDirectory() as tmp:
        if data.draw(st.booleans()):  # saved columns: texts read from disk, then stitched
            save(Path(tmp) / "d", {"generation": 1}, table, np.zeros((len(rows), 2), np.float32), ["public"] * len(rows), None)
            opened = open_saved(Path(tmp) / "d", {"generation": 1})
            assert opened is not None
            table = opened.chunks
        for w in range(data.draw(st.integers(1, 3))):
            keep = np.array(data.draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows))), dtype=bool)
            kept = [c for c, k in zip(rows, keep) if k]
            new = [chunk(f"w{w}-{j}", 0) for j in range(data.draw(st.integers(0, 3)))]
            at = np.sort(np.array(data.draw(st.permutations(range(len(kept) + len(new))))[:len(new)], dtype=np.int64))
            slots, rest, fresh = set(at.tolist()), iter(kept), iter(new)
            rows = [next(fresh) if i in slots else next(rest) for i in range(len(kept) + len(new))]
            table = table.updated(keep, new, at)
            assert list(table) == rows and [table.doc(i) for i in range(len(rows))] == [c.doc for c in rows]
            assert table.texts() == [c.text for c in rows]
            assert table.texts_by_doc(["d0", "w0-0"]) == ChunkTable.from_chunks(rows).texts_by_doc(["d0", "w0-0"])


@hsettings(max_examples=100, deadline=None)
@given(st.lists(st.booleans(), max_size=40), st.data())
def test_interleave_keeps_rows_in_order_and_places_new_ones(keep, data):
    rows = np.arange(len(keep) * 2).reshape(-1, 2)
    kept = rows[np.array(keep, dtype=bool)] if keep else rows
    n_new = data.draw(st.integers(0, 5))
    new = -np.arange(1, n_new * 2 + 1).reshape(-1, 2)
    at = np.sort(np.array(data.draw(st.permutations(range(len(kept) + n_new)))[:n_new], dtype=np.int64))
    expected, rest, fresh = [], iter(kept.tolist()), iter(new.tolist())
    for i in range(len(kept) + n_new):
        expected.append(next(fresh) if i in set(at.tolist()) else next(rest))
    mask = np.array(keep, dtype=bool) if keep else None
    assert interleave(rows, mask, new, at).tolist() == expected
    assert interleave(rows, mask, new, None).tolist() == kept.tolist() + new.tolist()


def test_interleave_after_scattered_removals_gathers_alike():
    rows = np.arange(30_000)
    keep = rows % 3 != 0  # 10,000 gaps: the gather path
    at = np.array([0, 5, 19_999], dtype=np.int64)
    out = interleave(rows, keep, np.array([-1, -2, -3]), at)
    assert out[[0, 5, 19_999]].tolist() == [-1, -2, -3]
    assert np.array_equal(np.delete(out, at), rows[keep])
