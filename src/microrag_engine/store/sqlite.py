"""SQLite store: one file, written in transactions, read as WAL snapshots.

WAL mode lets readers keep their snapshot while an ingest writes; each ``apply``
is a single ``BEGIN IMMEDIATE`` transaction, so a crash (even SIGKILL) leaves the
file at the last committed ingest. Vectors are float32 BLOBs. This module does
not score or search: it stores.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import uuid
from collections.abc import Collection
from pathlib import Path

import numpy as np

from ..errors import MicroRAGError
from ..index.saved import verify
from ..types import Chunk
from .base import FORMAT_VERSION, DocRecord, DocUpdate, Snapshot, StaleVersion, Store, check_snapshot, decode_meta, encode_meta

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
  doc TEXT PRIMARY KEY, content_hash TEXT NOT NULL, label TEXT NOT NULL,
  principal TEXT NOT NULL, origin TEXT NOT NULL, ingested_at TEXT NOT NULL, n_chunks INTEGER NOT NULL,
  collection TEXT NOT NULL DEFAULT '', meta TEXT NOT NULL DEFAULT '{}');
CREATE TABLE IF NOT EXISTS chunks (
  id TEXT PRIMARY KEY, doc TEXT NOT NULL REFERENCES documents(doc) ON DELETE CASCADE,
  idx INTEGER NOT NULL, start INTEGER NOT NULL, "end" INTEGER NOT NULL, text TEXT NOT NULL,
  text_hash TEXT NOT NULL, vector BLOB NOT NULL, page INTEGER NOT NULL DEFAULT 0, UNIQUE (doc, idx));
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(doc);
"""


# Columns added after format 1 shipped, with defaults that read old rows correctly: an
# index written by an older microrag opens and gains them (a new one never lacks them).
ADDED_COLUMNS = {"documents": [("collection", "TEXT NOT NULL DEFAULT ''"), ("meta", "TEXT NOT NULL DEFAULT '{}'")],
                 "chunks": [("page", "INTEGER NOT NULL DEFAULT 0")]}


def _add_columns(db: sqlite3.Connection) -> None:
    for table, columns in ADDED_COLUMNS.items():
        have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        for name, decl in columns:
            if name not in have:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")


class SQLiteStore(Store):
    """The embedded default: ``<dir>/index.sqlite``."""

    def __init__(self, path: str | Path, create: bool = True) -> None:
        path = Path(path)
        self.file = path / "index.sqlite" if path.suffix != ".sqlite" else path
        if not self.file.exists() and not create:
            raise MicroRAGError(f"no index at {self.file.parent}; build one with: microrag ingest PATH --index {self.file.parent}")
        if path.suffix != ".sqlite" and path.exists() and not path.is_dir():
            raise MicroRAGError(f"{path} is a file, not an index folder; pass a folder (or a .sqlite file) to --index")
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MicroRAGError(f"cannot create the index folder {self.file.parent}: {exc.strerror}") from None
        try:
            self.db = sqlite3.connect(self.file, timeout=30, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")  # a commit survives power loss, not just a crash
            self.db.execute("PRAGMA foreign_keys=ON")
            self.db.executescript(SCHEMA)
            _add_columns(self.db)
            version = self.meta().get("format_version")
        except sqlite3.DatabaseError as exc:
            raise MicroRAGError(f"{self.file} is not a microRAG index ({exc})") from None
        if version and int(version) != FORMAT_VERSION:
            raise MicroRAGError(f"{self.file} has index format {version}; this microrag reads {FORMAT_VERSION}: re-ingest")

    def cache_path(self, name: str) -> Path:
        """Where derived structures of this store file are cached: ``<stem>.<kind>-<generation>
        [.suffix]`` beside it (two stores in one folder never share them). Other generations
        of the same kind are removed, and temporary folders whose writer is gone; nothing
        else in the folder is touched. A process with an old one open keeps reading it."""
        kind, suffix, stem = name.split("-")[0], Path(name).suffix, self.file.stem
        ours = re.compile(rf"^{re.escape(stem)}\.{re.escape(kind)}-\d+{re.escape(suffix)}"
                                 r"(?:\.(tmp|old)-(\d+)-[0-9a-f]+)?$")
        # Caches of older releases, in an index folder: hnsw-<generation>.faiss.
        legacy = re.compile(rf"^{re.escape(kind)}-\d+{re.escape(suffix)}$") if stem == "index" else None
        target = f"{stem}.{name}"
        for old in self.file.parent.iterdir():
            m = ours.match(old.name)
            if old.name == target or not (m or (legacy and legacy.match(old.name))):
                continue
            if m and m.group(1) == "tmp" and _alive(m.group(2)):
                continue  # another process is writing it right now
            if old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)
        return self.file.parent / target

    def identity(self) -> str:
        # Stores written before ids were recorded: the file itself (a new file is a new store).
        return self.meta().get("store_id") or f"inode-{self.file.stat().st_ino}"

    # ------------------------------------------------------------ reads

    def meta(self) -> dict[str, str]:
        return dict(self.db.execute("SELECT key, value FROM meta").fetchall())

    def documents(self) -> dict[str, DocRecord]:
        rows = self.db.execute("SELECT doc, content_hash, label, principal, origin, ingested_at, n_chunks, collection, meta "
                               "FROM documents ORDER BY doc")
        return {r[0]: DocRecord(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], decode_meta(r[8])) for r in rows}

    def generation(self) -> int:
        row = self.db.execute("SELECT value FROM meta WHERE key='generation'").fetchone()
        return int(row[0]) if row else 0

    def snapshot(self) -> Snapshot:
        return self._snapshot(None)

    def snapshot_of(self, docs: Collection[str]) -> Snapshot:
        return self._snapshot(docs)

    def _snapshot(self, only: Collection[str] | None) -> Snapshot:
        """Records, and the chunks of ``only`` (all when None), from one read transaction:
        one consistent WAL snapshot."""
        sql = ('SELECT c.id, c.doc, c.idx, c.start, c."end", c.text, c.vector, d.label, c.page '
               "FROM chunks c JOIN documents d ON d.doc = c.doc ")
        self.db.execute("BEGIN")
        try:
            meta = self.meta()
            records = self.documents()
            if only is None:
                rows = self.db.execute(sql + "ORDER BY c.doc, c.idx").fetchall()
            else:
                wanted, rows = sorted(set(only) & records.keys()), []
                for lo in range(0, len(wanted), 500):  # under SQLite's bound-parameter limit
                    part = wanted[lo:lo + 500]
                    rows += self.db.execute(sql + f"WHERE c.doc IN ({','.join('?' * len(part))}) ORDER BY c.doc, c.idx",
                                            part).fetchall()
        finally:
            self.db.execute("COMMIT")
        chunks = [Chunk(r[0], r[1], r[2], r[3], r[4], r[5], r[8]) for r in rows]
        dim = int(meta.get("dim", 0) or 0)
        vectors = (np.vstack([np.frombuffer(r[6], dtype=np.float32) for r in rows]) if rows
                   else np.zeros((0, dim), dtype=np.float32))
        return Snapshot(int(meta.get("generation", 0)), meta, records, chunks, vectors, [r[7] for r in rows])

    # ------------------------------------------------------------ writes

    def apply(self, updates: list[DocUpdate], deletes: list[str], meta: dict[str, str]) -> int:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            gen = self.generation() + 1
            for doc in deletes:
                db.execute("DELETE FROM documents WHERE doc = ?", (doc,))
            for u in updates:
                r = u.record
                db.execute("DELETE FROM documents WHERE doc = ?", (r.doc,))  # cascades to its chunks
                db.execute("INSERT INTO documents VALUES (?,?,?,?,?,?,?,?,?)",
                           (r.doc, r.content_hash, r.label, r.principal, r.origin, r.ingested_at, len(u.chunks),
                            r.collection, encode_meta(r.meta)))
                db.executemany(
                    'INSERT INTO chunks (id, doc, idx, start, "end", text, text_hash, vector, page) VALUES (?,?,?,?,?,?,?,?,?)',
                    [(c.id, c.doc, c.index, c.start, c.end, c.text, h, np.asarray(v, dtype=np.float32).tobytes(), c.page)
                     for c, h, v in zip(u.chunks, u.text_hashes, u.vectors)])
            if not self.meta().get("store_id"):  # named once, at its first write
                db.execute("INSERT OR REPLACE INTO meta VALUES ('store_id', ?)", (uuid.uuid4().hex,))
            for k, v in {**meta, "format_version": str(FORMAT_VERSION), "generation": str(gen)}.items():
                db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (k, str(v)))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return gen

    def relabel(self, doc: str, label: str, version: str | None = None) -> int:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            if not self.db.execute("UPDATE documents SET label = ? WHERE doc = ?", (label, doc)).rowcount:
                raise MicroRAGError(f"no such document {doc!r}")
            stored = self.db.execute("SELECT content_hash FROM documents WHERE doc = ?", (doc,)).fetchone()[0]
            if version is not None and stored != version:
                raise StaleVersion(f"{doc!r} changed since version {version[:12]} (now {stored[:12]})")
            gen = self.generation() + 1
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('generation', ?)", (str(gen),))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return gen

    def check(self) -> list[str]:
        problems = [f"sqlite: {row[0]}" for row in self.db.execute("PRAGMA integrity_check") if row[0] != "ok"]
        problems += [f"sqlite: foreign key violation in {row[0]}" for row in self.db.execute("PRAGMA foreign_key_check")]
        folder = self.file.parent / f"{self.file.stem}.derived-{self.generation()}"
        if folder.is_dir():  # the saved index is a cache: a damaged one is reported and removed
            damaged = verify(folder)
            if damaged:
                shutil.rmtree(folder, ignore_errors=True)
                problems += [f"saved index: {d} (removed; the next open rebuilds it)" for d in damaged]
        return problems + check_snapshot(self.snapshot())

    def close(self) -> None:
        self.db.close()


def _alive(pid: str) -> bool:
    """Whether process ``pid`` (a temp folder's writer) still runs."""
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True
