"""The saved index: opened from derived files it ranks exactly as one derived from the store."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from microrag_engine.config import preset
from microrag_engine.engine import Engine
from microrag_engine.index.saved import ChunkTable, open_saved, save
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
    folder = tmp_path / "ix" / f"derived-{store.generation()}"
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
    assert store.generation() != old and not (tmp_path / "ix" / f"derived-{old}").exists()
    assert engine.retrieve("zebras at the office").hits[0].chunk.doc.endswith("oncall.md")
    reopened = Engine.from_store(store, settings)
    assert ranked(reopened) == ranked(engine)
    store.close()


def test_saved_files_built_with_other_settings_or_damaged_are_rebuilt_not_trusted(tmp_path):
    settings = preset("default")
    store = SQLiteStore(tmp_path / "ix")
    ingest_paths(store, [corpus(tmp_path / "docs")], settings)
    Engine.from_store(store, settings)
    folder = tmp_path / "ix" / f"derived-{store.generation()}"
    other = replace(settings, k1=1.5)
    expected = ranked(Engine.from_store(store, other))  # k1 differs: the saved matrix must not be used
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["k1"] == 1.5  # it was rebuilt with the new k1
    reference = ranked(Engine.from_store(SQLiteStore(tmp_path / "ix"), other))
    assert reference == expected
    (folder / "bm25_data.npy").write_bytes(b"garbage")  # damaged: rebuilt from the store
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
    assert not list((tmp_path / "ix").glob("derived-*"))
    store.close()
