"""The server's tables on either dialect: SQLite files for one server, the PostgreSQL
primary for replicas (keys, rate limits, review queue, audit trail)."""

from __future__ import annotations

import hashlib
import hmac
import os
import random
import sqlite3

import pytest

from microrag_engine.errors import MicroRAGError
from microrag_engine.server.auth import KeyStore
from microrag_engine.server.state import ServerState

PG = os.environ.get("MICRORAG_TEST_PG", "")
needs_pg = pytest.mark.skipif(not PG, reason="set MICRORAG_TEST_PG (make test starts a server)")


def test_a_state_file_from_before_replicas_keeps_its_audit_key(tmp_path):
    """The audit key moved from "meta" to "server_meta": old fingerprints must still match."""
    path = tmp_path / "server.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("INSERT INTO meta VALUES ('audit_key', ?)", ("ab" * 32,))
    db.commit()
    db.close()
    state = ServerState(path)
    assert state.fingerprint("q") == hmac.new(bytes.fromhex("ab" * 32), b"q", hashlib.sha256).hexdigest()
    assert ServerState(path).fingerprint("q") == state.fingerprint("q")


@pytest.fixture
def pg_tables():
    from microrag_engine.server.tables import PostgresTables
    from microrag_engine.store.postgres import PostgresStore

    store = PostgresStore(PG, schema=f"tb_{os.getpid()}_{random.randrange(10**9)}")
    try:
        yield PostgresTables(store)
    finally:
        store.drop()
        store.close()


@needs_pg
def test_state_on_postgres_round_trips(pg_tables):
    state = ServerState(pg_tables)
    state.queue("a.md", "public", "bob", {"x": 1}, ["held: y"], "v1", "preview")
    state.queue("a.md", "internal", "bob", {}, [], "v2", "")  # a newer upload replaces the entry
    assert [(e["label"], e["version"]) for e in state.pending()] == [("internal", "v2")]
    assert state.take("a.md", "v1") == {"stale": True, "label": "internal", "principal": "bob", "version": "v2"}
    assert state.take("a.md", "v2") == {"label": "internal", "principal": "bob", "version": "v2"}
    assert state.take("a.md") is None
    first = state.audit("rita", "search", "vpn port", [], "answered", [])
    second = state.audit("rita", "search", "vpn port", [], "answered", [])
    assert second > first
    state.settle(second, "refused", ["f"])
    assert state.trail(1)[0]["decision"] == "refused" and state.recent_queries() == ["vpn port"]
    assert ServerState(pg_tables).fingerprint("q") == state.fingerprint("q")  # one key for every replica


@needs_pg
def test_keys_on_postgres_never_issue_a_name_twice(pg_tables):
    keys = KeyStore(pg_tables)
    key = keys.add("rita", "reader", ["public"])
    assert keys.resolve(key).name == "rita"
    with pytest.raises(MicroRAGError, match="has been used"):
        keys.add("rita", "reader", ["public"])
    keys.wrote("rita", "0/3000060")
    assert keys.resolve(key).wrote == "0/3000060"
    keys.revoke("rita")
    assert keys.resolve(key) is None
    with pytest.raises(MicroRAGError, match="has been used"):  # revoked too: it owned uploads
        keys.add("rita", "reader", ["public"])
    assert keys.resolve(keys.add("rita2", "reader", ["public"])).wrote == ""  # a new key starts clean


@needs_pg
def test_shared_rate_limit_spends_one_budget(pg_tables):
    from microrag_engine.server.context import SharedRateLimiter

    one, other = SharedRateLimiter(pg_tables, 5, "requests"), SharedRateLimiter(pg_tables, 5, "requests")
    spent = [(one if i % 2 else other).allow("rita") for i in range(8)]
    assert spent.count(True) == 5 and spent[:5] == [True] * 5
    assert one.exhausted("rita") and other.exhausted("rita")
    assert not one.exhausted("sam") and one.allow("sam")  # budgets are per caller
    assert SharedRateLimiter(pg_tables, 5, "wrong-keys").allow("rita")  # and per scope


@needs_pg
def test_shared_rate_limit_holds_under_concurrent_requests(pg_tables):
    """Requests racing on two limiters (two replicas) never pass more than the limit."""
    from concurrent.futures import ThreadPoolExecutor

    from microrag_engine.server.context import SharedRateLimiter

    limiters = [SharedRateLimiter(pg_tables, 7, "requests") for _ in range(2)]
    with ThreadPoolExecutor(8) as pool:
        passed = list(pool.map(lambda i: limiters[i % 2].allow("crowd"), range(40)))
    assert passed.count(True) == 7


@needs_pg
def test_a_postgres_servers_old_local_files_are_adopted_once(pg_tables, tmp_path):
    """Before replicas a PostgreSQL server kept keys and state in files: they move into the
    database at its next start (keys still work, the queue can be approved, fingerprints match)."""
    from microrag_engine.server.tables import adopt

    old_keys, old_state = KeyStore(tmp_path / "keys.sqlite"), ServerState(tmp_path / "server.sqlite")
    key = old_keys.add("rita", "reader", ["public"])
    old_state.queue("held.md", "public", "bob", {}, ["held: x"], "v1", "preview")
    old_state.audit("rita", "search", "vpn port", [], "answered", [])
    keys, state = KeyStore(pg_tables), ServerState(pg_tables)
    assert adopt(pg_tables, tmp_path / "keys.sqlite", tmp_path / "server.sqlite") == ["1 keys", "1 review", "1 audit"]
    assert keys.resolve(key).name == "rita"
    assert [e["doc"] for e in state.pending()] == ["held.md"] and state.trail(5)[0]["query"] == "vpn port"
    assert ServerState(pg_tables).fingerprint("q") == old_state.fingerprint("q")
    assert adopt(pg_tables, tmp_path / "keys.sqlite", tmp_path / "server.sqlite") == []  # once



def test_a_column_another_process_adds_between_the_look_and_the_alter_is_no_error(tmp_path):
    """`serve` and `microrag mcp` (or three MCP clients) open the same new server.sqlite together: one
    adds a column between another's look and its ALTER (SQLite has no ADD COLUMN IF NOT EXISTS)."""
    from microrag_engine.server.tables import SqliteTables

    path = tmp_path / "server.sqlite"
    mine = SqliteTables(path)
    mine.run("CREATE TABLE review (doc TEXT PRIMARY KEY)")
    other = sqlite3.connect(path, isolation_level=None)
    run = mine.run

    def look_then_lose_the_race(sql: str, params: tuple = ()) -> list[tuple]:
        rows = run(sql, params)
        if sql == "PRAGMA table_info(review)":
            other.execute("ALTER TABLE review ADD COLUMN preview TEXT NOT NULL DEFAULT ''")
        return rows

    mine.run = look_then_lose_the_race  # type: ignore[method-assign]
    mine.add_column("review", "preview", "TEXT NOT NULL DEFAULT ''")
    assert [r[1] for r in run("PRAGMA table_info(review)")] == ["doc", "preview"]
    with pytest.raises(sqlite3.OperationalError, match="no such table"):  # other errors still surface
        mine.add_column("missing", "preview", "TEXT")
