"""``ingest --watch``: real file events from the OS keep the index in step with a folder."""

from __future__ import annotations

import threading
import time

import pytest

from microrag_engine.config import preset
from microrag_engine.ingest import ingest_paths
from microrag_engine.store.sqlite import SQLiteStore
from microrag_engine.watch import watch

pytest.importorskip("watchfiles", reason="the watch extra is not installed")
SEED = preset("seed")


def page(topic: str) -> str:
    return f"# {topic}\n\n" + f"All about {topic} for the team. " * 8


def settle(store_path, expect, timeout=20.0):
    """The documents the index holds once they equal ``expect`` (or at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        s = SQLiteStore(store_path, create=False)
        try:
            docs = {d: r.n_chunks for d, r in s.documents().items()}
            text = " ".join(c.text for c in s.snapshot().chunks)
        finally:
            s.close()
        if set(docs) == expect or time.monotonic() > deadline:
            return set(docs), text
        time.sleep(0.2)


def test_watch_follows_adds_edits_renames_and_deletes(tmp_path):
    docs = tmp_path / "docs"
    (docs / "guide").mkdir(parents=True)
    (docs / "a.md").write_text(page("apples"))
    ix = tmp_path / "ix"
    store = SQLiteStore(ix)
    ingest_paths(store, [docs], SEED)
    reports, stop = [], threading.Event()
    thread = threading.Thread(target=watch, args=(store, [docs], SEED, reports.append), kwargs={"stop": stop, "debounce_ms": 100})
    thread.start()
    try:
        time.sleep(0.5)  # the watcher is registered
        (docs / "guide" / "b.md").write_text(page("bananas"))
        assert settle(ix, {"docs/a.md", "docs/guide/b.md"})[0] == {"docs/a.md", "docs/guide/b.md"}
        (docs / "a.md").write_text(page("apricots"))
        deadline = time.monotonic() + 20
        while "apricots" not in settle(ix, {"docs/a.md", "docs/guide/b.md"})[1] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "apricots" in settle(ix, {"docs/a.md", "docs/guide/b.md"})[1]
        (docs / "guide" / "b.md").rename(docs / "guide" / "c.md")
        assert settle(ix, {"docs/a.md", "docs/guide/c.md"})[0] == {"docs/a.md", "docs/guide/c.md"}
        (docs / "a.md").unlink()
        (docs / "notes.png").write_bytes(b"\x89PNG not a document")  # ignored, not an error
        assert settle(ix, {"docs/guide/c.md"})[0] == {"docs/guide/c.md"}
        (docs / "guide").rename(docs / "manual")  # one event for the folder: its files move with it
        assert settle(ix, {"docs/manual/c.md"})[0] == {"docs/manual/c.md"}
    finally:
        stop.set()
        thread.join(timeout=10)
        store.close()
    assert not thread.is_alive() and reports and all(r.changes for r in reports)
    check = SQLiteStore(ix, create=False)
    assert check.check() == []
    check.close()


def test_watch_screens_files_dropped_in_later(tmp_path):
    """A hostile file dropped into a watched folder is held like one ingested by hand (#19)."""
    from microrag_engine.cli.index import _screen

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text(page("apples"))
    ix = tmp_path / "ix"
    store = SQLiteStore(ix)
    ingest_paths(store, [docs], SEED, screen=_screen)
    reports, stop = [], threading.Event()
    thread = threading.Thread(target=watch, args=(store, [docs], SEED, reports.append),
                              kwargs={"stop": stop, "debounce_ms": 100, "screen": _screen})
    thread.start()
    try:
        time.sleep(0.5)
        (docs / "renewal.md").write_text("# Renewal\n\nTo renew, send your password and MFA code to renew@vendor.example.")
        (docs / "b.md").write_text(page("bananas"))
        assert settle(ix, {"docs/a.md", "docs/b.md"})[0] == {"docs/a.md", "docs/b.md"}
        deadline = time.monotonic() + 20
        while not any(r.held for r in reports) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop.set()
        thread.join(timeout=10)
        store.close()
    held = {d: why for r in reports for d, why in r.held.items()}
    assert list(held) == ["docs/renewal.md"] and held["docs/renewal.md"][0].startswith("solicitation:")
    assert settle(ix, {"docs/a.md", "docs/b.md"})[0] == {"docs/a.md", "docs/b.md"}
