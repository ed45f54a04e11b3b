"""Where the server's own tables live (API keys, rate limits, the review queue, the audit
trail): one SQLite file beside the index for a lone server, or the index's PostgreSQL
schema on the primary, shared by every replica. SQL is written once, with ``?``
placeholders and syntax both dialects read (``ON CONFLICT``, ``RETURNING``).
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..store.postgres import PostgresStore


class Tables(Protocol):
    """Where server-side tables live: ``run(sql, params) -> rows``, ``?`` placeholders."""

    # The column definition of an auto-numbered primary key in this dialect.
    serial: str

    def run(self, sql: str, params: tuple = ()) -> list[tuple]: ...

    def add_column(self, table: str, column: str, decl: str) -> None:
        """Add ``column`` to ``table`` unless it is there (tables written by older releases)."""
        ...


class SqliteTables:
    """Tables in one SQLite file beside the index (one server process)."""

    serial = "INTEGER PRIMARY KEY"

    def add_column(self, table: str, column: str, decl: str) -> None:
        if column not in {r[1] for r in self.run(f"PRAGMA table_info({table})")}:
            try:
                self.run(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
            except sqlite3.OperationalError as exc:
                # Another process opening the same fresh file (serve and `microrag mcp`, or
                # two MCP clients) added it between the look and the ALTER: SQLite has no
                # ADD COLUMN IF NOT EXISTS.
                if "duplicate column name" not in str(exc):
                    raise

    def __init__(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")  # readers of the file (an investigator) never block the server
        self.lock = threading.Lock()

    def run(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self.lock:
            return self.db.execute(sql, params).fetchall()


class PostgresTables:
    """Tables in the index's own PostgreSQL schema, on the primary: every replica of the
    server reads and writes the same rows (keys, revocations, rate limits, the review queue, the audit trail)."""

    serial = "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    def run(self, sql: str, params: tuple = ()) -> list[tuple]:
        return self.store.x(sql.replace("?", "%s"), params)

    def add_column(self, table: str, column: str, decl: str) -> None:
        # Looked up first: ALTER TABLE locks the table against every replica's reads, even when
        # the column is there, and replicas run this at every start.
        if not self.run("SELECT 1 FROM information_schema.columns WHERE table_schema = ? AND table_name = ? "
                        "AND column_name = ?", (self.store.schema, table, column)):
            self.run(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {decl}")


# What a PostgreSQL server kept in files beside its working directory before replicas:
# (table, columns) adopted once into the database (``adopt``).
ADOPTED = (("keys", "id, name, role, clearance, trusted, hash, created, revoked"),
           ("review", "doc, label, principal, submitted, findings, flags, version, preview"),
           ("approvals", "doc, version, principal, ts"),
           ("audit", "ts, principal, action, query, hits, decision, flags, raw"))


def adopt(shared: PostgresTables, keys_file: Path, state_file: Path) -> list[str]:
    """Copy a PostgreSQL server's old local files (``keys.sqlite``, ``server.sqlite``) into the
    database, once: keys, the review queue, approvals, the audit trail and its key (so old
    fingerprints still match). Only into empty tables; returns what was copied."""
    done = []
    for path, tables in ((keys_file, ADOPTED[:1]), (state_file, ADOPTED[1:])):
        if not path.is_file():
            continue
        local = SqliteTables(path)
        present = {r[0] for r in local.run("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table, columns in tables:
            if table not in present or shared.run(f"SELECT 1 FROM {table} LIMIT 1"):
                continue
            have = {r[1] for r in local.run(f"PRAGMA table_info({table})")}
            cols = [c.strip() for c in columns.split(",") if c.strip() in have]
            rows = local.run(f"SELECT {', '.join(cols)} FROM {table}" + (" ORDER BY id" if table == "audit" else ""))
            for row in rows:
                shared.run(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", tuple(row))
            if rows:
                done.append(f"{len(rows)} {table}")
            if table == "audit" and rows:
                home = "server_meta" if "server_meta" in present else "meta" if "meta" in present else ""
                old = [r[0] for r in local.run(f"SELECT value FROM {home} WHERE key = 'audit_key'")] if home else []
                if old:
                    shared.run("UPDATE server_meta SET value = ? WHERE key = 'audit_key'", (old[0],))
        local.db.close()
    return done
