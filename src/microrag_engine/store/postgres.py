"""PostgreSQL + pgvector store: the scale-out backend behind the same interface.

Everything the SQLite store keeps, in one schema, written in one transaction per
ingest (so replicas and readers see old or new, never a mix). On top of that the
server can search by itself, so stateless replicas need not hold the corpus:
  * dense: ``embedding vector(dim)`` with an HNSW index (cosine), filtered by
    label with pgvector's iterative index scan so a filter never starves top-K;
  * keyword: BM25 kept as BM25 - each chunk stores its Lucene BM25 term weights
    ``tf / (tf + k1 (1 - b + b dl/avgdl))`` as a ``sparsevec`` over hashed term
    ids, the query side carries IDF from a per-term document-frequency table, and
    the inner product of the two is the BM25 score. A GIN index over the chunk's
    terms finds the chunks that share a term before any scoring.
Weights use the average chunk length at write time; when it drifts by more than
``REWEIGHT_DRIFT`` every chunk is re-weighted inside the same transaction.
This module needs the ``postgres`` extra (psycopg).
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
import zlib
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

import numpy as np

from ..errors import MicroRAGError
from ..index.keyword import lucene_idf
from ..text import bm25_tokens
from ..types import Chunk
from .base import (
    Candidates,
    DocFilter,
    DocRecord,
    DocUpdate,
    SearchableStore,
    Snapshot,
    StaleVersion,
    check_snapshot,
    decode_meta,
    encode_meta,
    filter_values,
)

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

TERM_SPACE = 999_999_937  # hashed term ids (pgvector caps sparsevec at 1e9 dims); collisions at 1e6 terms ~0.1%
REWEIGHT_DRIFT = 0.10
# A query term in at most this share of the visible chunks is "rare": the BM25 leg scores the
# chunks holding rare terms first and stops there when that is provably exact (``_keyword_top``).
RARE_SHARE = 0.01
PG_FORMAT = 2  # 2: keyword statistics per label (format 1, global, is migrated on open)
FIELDS_VERSION = 2  # documents.fields as filter_values writes them (filled in on open when older)


# The WAL position a read must see, for the caller being served (``reading_after``).
READ_AFTER: ContextVar[str] = ContextVar("microrag_read_after", default="")
# Reads that serve a write (``PostgresStore.writing``) go to the primary.
WRITING: ContextVar[bool] = ContextVar("microrag_writing", default=False)
STANDBY_WAIT_S = 5.0  # for a standby connection, before reading from the primary instead
STANDBY_RETRY_S = 30.0  # after a standby failed to answer, reads go to the primary this long

log = logging.getLogger("microrag")


@contextmanager
def _flag(var: ContextVar[bool]) -> Iterator[None]:
    token = var.set(True)
    try:
        yield
    finally:
        var.reset(token)


@contextmanager
def reading_after(lsn: str) -> Iterator[None]:
    """Reads in this block see at least WAL position ``lsn`` (the caller's own last write):
    from the standby once it has replayed that far, from the primary until then."""
    token = READ_AFTER.set(lsn)
    try:
        yield
    finally:
        READ_AFTER.reset(token)


def lsn_number(lsn: str) -> int:
    """PostgreSQL's ``X/Y`` WAL position as one comparable number (0 for none)."""
    hi, sep, lo = lsn.partition("/")
    return (int(hi, 16) << 32) + int(lo, 16) if sep else 0


def _pool(uri: str, schema: str, size: int, role: str = "PostgreSQL") -> ConnectionPool:
    """An open pool of autocommit connections on ``schema``; a server that cannot be reached
    is one clear error here (naming ``role``: the index's server or its standby), not a pool
    retrying in the background. A standby's pool checks each connection before lending it,
    so one broken by a standby restart is replaced (or the read goes to the primary), never used."""
    import psycopg
    from psycopg_pool import ConnectionPool

    try:
        psycopg.connect(uri, connect_timeout=10).close()  # the reason, if it fails, in libpq's words
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MicroRAGError(f"cannot connect to {role}: {first}") from None
    except psycopg.ProgrammingError as exc:  # not a connection string at all
        raise MicroRAGError(f"{role}: not a PostgreSQL URI ({str(exc).strip()}); use postgresql://user@host:port/db") from None

    def configure(conn: psycopg.Connection) -> None:
        conn.execute(f"SET search_path TO {schema}, public")  # schema is checked to be a plain name

    return ConnectionPool(uri, min_size=1, max_size=size, kwargs={"autocommit": True, "application_name": "microrag"},
                          configure=configure, check=ConnectionPool.check_connection if role != "PostgreSQL" else None,
                          open=True, name=f"microrag-{schema}")


def _storable(text: str) -> bool:
    """Whether PostgreSQL can hold ``text`` (no NUL, no lone surrogate): a filter value that it
    cannot hold matches no stored one, and must not reach the server as a failing query."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def term_id(term: str) -> int:
    """Stable 1-based id of a term in the sparse space (sparsevec indices start at 1)."""
    return zlib.crc32(term.encode("utf-8")) % TERM_SPACE + 1


def sparse_literal(weights: dict[int, float]) -> str:
    """pgvector's text form: ``{id:w,...}/dims``."""
    body = ",".join(f"{i}:{w:.6g}" for i, w in sorted(weights.items()) if w)
    return f"{{{body}}}/{TERM_SPACE}"


def vector_literal(v: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in v) + "]"


def bm25_doc_weights(tf: dict[int, int], dl: int, avgdl: float, k1: float, b: float) -> dict[int, float]:
    """Lucene BM25 document-side term weights (the query side supplies IDF)."""
    norm = k1 * (1 - b + b * dl / max(avgdl, 1e-9))
    return {t: f / (f + norm) for t, f in tf.items()}


# A chunk with both raw leg scores for a query's sparse weights and vector (``search``, ``scores_of``).
_SCORED = 'SELECT id, doc, idx, start, "end", text, page, -(bm25 <#> %s::sparsevec), 1 - (embedding <=> %s::vector) FROM chunks'


def _scored(rows: list[tuple]) -> list[tuple[Chunk, float, float]]:
    return [(Chunk(*r[:7]), float(r[7] or 0.0), float(r[8])) for r in rows]


class PostgresStore(SearchableStore):
    """A store in schema ``schema`` of the database at ``uri``."""

    def __init__(self, uri: str, schema: str = "microrag", k1: float = 0.9, b: float = 0.4,
                 read_uri: str | None = None, pool_size: int = 8) -> None:
        try:
            import psycopg  # noqa: F401
            from psycopg_pool import ConnectionPool  # noqa: F401
        except ImportError:
            raise MicroRAGError("the postgres store needs its extra: pip install 'microrag-engine[postgres]'") from None
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", schema):
            raise MicroRAGError(f"invalid schema name {schema!r}: use lower-case letters, digits and _")
        self.schema, self.k1, self.b = schema, k1, b
        # Pools instead of one locked connection: each thread's statements and transactions run
        # on a connection of their own, so queries never wait behind an ingest. ``read_uri`` (a
        # hot standby, or libpq's multi-host form) takes the reads; writes go to ``uri``.
        self._local = threading.local()
        self.pool = _pool(uri, schema, pool_size)
        self.read_pool = _pool(read_uri, schema, pool_size, "the standby (--standby)") if read_uri else None
        self._standby_down = 0.0  # until when (monotonic) reads skip a standby that failed to answer
        self._wrote = 0  # the primary's WAL position after this process's last write
        self._wrote_lock = threading.Lock()
        # The replay position last seen on each standby connection (it only grows on one server;
        # a restarted one drops its connections).
        self._replayed: WeakKeyDictionary[Any, int] = WeakKeyDictionary()
        with self.writing():  # set-up reads what it just wrote: from the primary
            self._set_up(schema)
        if self.read_pool is not None:
            self._check_standby(schema)

    def _check_standby(self, schema: str) -> None:
        """The standby must be one of this index's database: its schema appears there (a new
        one within seconds, once replicated); otherwise every read would fail later, unclearly."""
        deadline = time.monotonic() + 10
        while True:
            with self._connection(read=True) as conn:
                found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{schema}.meta",)).fetchone()[0]
            if found or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if not found:
            raise MicroRAGError(f"the standby (--standby) has no index schema {schema!r}: give a hot standby of the "
                                "index's own server and database (postgresql://user@standby-host/<same database>)")

    def _set_up(self, schema: str) -> None:
        self.x("CREATE EXTENSION IF NOT EXISTS vector")
        self.x(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        self.x("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self.x("""CREATE TABLE IF NOT EXISTS documents (
            doc TEXT PRIMARY KEY, content_hash TEXT NOT NULL, label TEXT NOT NULL, principal TEXT NOT NULL,
            origin TEXT NOT NULL, ingested_at TEXT NOT NULL, n_chunks INTEGER NOT NULL)""")
        self._add_column("documents", "collection", "TEXT NOT NULL DEFAULT ''")
        self._add_column("documents", "meta", "TEXT NOT NULL DEFAULT '{}'")
        version = int(self.meta().get("format_version") or PG_FORMAT)
        if version not in (1, PG_FORMAT):
            raise MicroRAGError(f"schema {schema} has index format {version}; this microrag reads {PG_FORMAT}")
        self._set_up_fields()  # (after the check: a binary that refuses an index leaves it as it was)
        dim = self.meta().get("dim")
        if dim:
            self._create_chunks(int(dim))
        self._create_statistics(migrate=version < PG_FORMAT)

    def _set_up_fields(self) -> None:
        """Each document's filterable fields as JSONB (``filter_values``), so a query's filter is
        an SQL predicate (``_filter_sql``) and never a list of admitted ids sent with each query;
        a GIN index serves the globs without a wildcard (containment). Rows written before the
        column existed are filled in once, from their stored fields."""
        self._add_column("documents", "fields", "JSONB NOT NULL DEFAULT '{}'")

        def filled() -> int:
            return int(self.meta().get("fields_version") or 0)

        if filled() >= FIELDS_VERSION and self._has_index("documents_fields"):
            return  # (a newer binary's fields are left as it wrote them)
        with self.transaction():
            self.x("LOCK TABLE meta IN EXCLUSIVE MODE")  # one process builds them; the rest wait, then find it done
            if not self._has_index("documents_fields"):
                self.x("CREATE INDEX IF NOT EXISTS documents_fields ON documents USING gin (fields jsonb_path_ops)")
            if filled() < FIELDS_VERSION:
                rows = [(json.dumps(filter_values(r), ensure_ascii=False), r.doc) for r in self.documents().values()]
                self._many("UPDATE documents SET fields = %s::jsonb WHERE doc = %s", rows)
                self.x("INSERT INTO meta VALUES ('fields_version', %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                       (str(FIELDS_VERSION),))

    def _has_index(self, name: str) -> bool:
        return bool(self.x("SELECT 1 FROM pg_indexes WHERE schemaname = %s AND indexname = %s", (self.schema, name)))

    # ------------------------------------------------------------ connections

    @contextmanager
    def transaction(self, read: bool = False) -> Iterator[None]:
        """One transaction on one pooled connection: every ``x`` inside runs on it. A nested
        call joins the outer transaction. ``read=True`` runs on the standby when there is one
        and it has replayed whatever this context must see (``_connection``)."""
        if getattr(self._local, "conn", None) is not None:
            yield
            return
        with self._connection(read) as conn, conn.transaction():
            self._local.conn = conn
            try:
                yield
            finally:
                self._local.conn = None

    @contextmanager
    def _connection(self, read: bool) -> Iterator[Any]:
        """A pooled connection: the primary's, or for a read the standby's, unless that standby
        has not replayed what the read must see (this process's last write, the caller's:
        ``reading_after``), the read serves a write (``writing``), or the standby is down."""
        if not read or self.read_pool is None or WRITING.get():
            with self.pool.connection() as conn:
                yield conn
            return
        from psycopg import OperationalError
        from psycopg_pool import PoolTimeout

        need = max(lsn_number(READ_AFTER.get()), self._wrote)
        standby = None
        if time.monotonic() >= self._standby_down:
            try:
                standby = self.read_pool.getconn(timeout=STANDBY_WAIT_S)
            except (PoolTimeout, OperationalError) as exc:
                # Remembered for a while: every read waiting STANDBY_WAIT_S for a dead standby would
                # make each request seconds slow; one read in STANDBY_RETRY_S tries it again.
                self._standby_down = time.monotonic() + STANDBY_RETRY_S
                log.warning("the standby did not answer (%s); reading from the primary for %.0f s",
                            type(exc).__name__, STANDBY_RETRY_S)
        if standby is not None:
            try:
                # Checked on this very connection: behind a multi-host URI each may reach another standby.
                if need <= self._replayed.get(standby, 0) or self._caught_up(standby, need):
                    yield standby
                    return
            finally:
                self.read_pool.putconn(standby)
        with self.pool.connection() as conn:  # the standby lags behind (or is down): the primary this time
            yield conn

    def replica_lag(self) -> float | None:
        """How far the standby's replay is behind (0 when it has replayed all it received: an
        idle primary makes the last replayed transaction old without any lag); None without
        a standby, -1 when it does not answer (a dashboard tells that from 'no standby')."""
        if self.read_pool is None:
            return None
        try:
            with self.read_pool.connection(timeout=STANDBY_WAIT_S) as conn:
                row = conn.execute("SELECT CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0 "
                                   "ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp()) END").fetchone()
        except Exception as exc:  # a scrape must not fail because the standby is down
            log.warning("the standby did not answer the lag query (%s)", type(exc).__name__)
            return -1.0
        return float(row[0]) if row and row[0] is not None else 0.0

    def _caught_up(self, conn: Any, need: int) -> bool:
        row = conn.execute("SELECT pg_last_wal_replay_lsn()::text").fetchone()
        self._replayed[conn] = lsn_number(row[0] if row and row[0] else "")
        return self._replayed[conn] >= need

    def x(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None, read: bool = False) -> list[tuple]:
        """Run one statement (in the current transaction, else on its own connection; ``read``:
        where ``_connection`` says) and return its rows."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []
        with self._connection(read) as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def reading_after(self, position: str) -> AbstractContextManager[None]:
        return reading_after(position)

    def writing(self) -> AbstractContextManager[None]:
        return _flag(WRITING)

    def committed_position(self) -> str:
        return self.committed_lsn()

    def committed_lsn(self) -> str:
        """Where the primary's WAL stands now: a standby that replayed this far sees every
        write committed before the call (read-your-writes across replicas)."""
        lsn = str(self.x("SELECT pg_current_wal_lsn()::text")[0][0])
        with self._wrote_lock:
            self._wrote = max(self._wrote, lsn_number(lsn))
        return lsn

    def _add_column(self, table: str, name: str, decl: str) -> None:
        """A column added after format 2 shipped; its default reads old rows correctly. Looked up
        first: ALTER TABLE takes an exclusive lock even when the column exists."""
        if not self.x("SELECT 1 FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
                      "AND column_name = %s", (self.schema, table, name)):
            self.x(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {name} {decl}")

    def _create_chunks(self, dim: int) -> None:
        self.x(f"""CREATE TABLE IF NOT EXISTS chunks (
            id TEXT PRIMARY KEY, doc TEXT NOT NULL REFERENCES documents(doc) ON DELETE CASCADE,
            idx INTEGER NOT NULL, start INTEGER NOT NULL, "end" INTEGER NOT NULL, text TEXT NOT NULL,
            text_hash TEXT NOT NULL, label TEXT NOT NULL, embedding vector({dim}) NOT NULL,
            terms BIGINT[] NOT NULL, tfs INTEGER[] NOT NULL, dl INTEGER NOT NULL, bm25 sparsevec NOT NULL,
            UNIQUE (doc, idx))""")
        self._add_column("chunks", "page", "INTEGER NOT NULL DEFAULT 0")
        self.x("CREATE INDEX IF NOT EXISTS chunks_hnsw ON chunks USING hnsw (embedding vector_cosine_ops) "
                "WITH (m = 16, ef_construction = 100)")
        self.x("CREATE INDEX IF NOT EXISTS chunks_terms ON chunks USING gin (terms)")
        self.x("CREATE INDEX IF NOT EXISTS chunks_label ON chunks (label)")

    def _create_statistics(self, migrate: bool) -> None:
        """Keyword statistics per label, so a search sums only what its caller may read
        (red team #3: hidden chunks must not move a reader's IDF or the gate's ceiling).

        Format 1 kept one global df per term: ``migrate`` rebuilds the statistics from
        the chunks, re-weights them with the mean length of approved chunks only, and
        writes format 2, which older binaries refuse instead of reading it wrongly.
        """
        with self.transaction():
            if migrate:
                self.x("LOCK TABLE meta IN EXCLUSIVE MODE")  # one process migrates; the rest wait and see format 2
                migrate = int(self.meta().get("format_version") or PG_FORMAT) < PG_FORMAT
            if migrate:
                self.x("DROP TABLE IF EXISTS term_df")
                self.x("DROP TABLE IF EXISTS label_stats")
            self.x("""CREATE TABLE IF NOT EXISTS term_df (term BIGINT NOT NULL, label TEXT NOT NULL,
                       df INTEGER NOT NULL, PRIMARY KEY (term, label))""")
            self.x("""CREATE TABLE IF NOT EXISTS label_stats (label TEXT PRIMARY KEY, n INTEGER NOT NULL,
                       total_dl BIGINT NOT NULL)""")
            if migrate:
                if self.meta().get("dim"):
                    self.x("INSERT INTO term_df SELECT term, label, count(*) FROM chunks, unnest(terms) term "
                            "GROUP BY term, label")
                    self.x("INSERT INTO label_stats SELECT label, count(*), sum(dl) FROM chunks GROUP BY label")
                    avgdl = self._settle_avgdl(float(self.meta().get("avgdl") or 0))
                    self.x("UPDATE meta SET value = %s WHERE key = 'avgdl'", (repr(avgdl),))
                self.x("UPDATE meta SET value = %s WHERE key = 'format_version'", (str(PG_FORMAT),))

    def drop(self) -> None:
        """Delete the whole schema (tests, or starting over)."""
        self.x(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")

    # ------------------------------------------------------------ reads

    def meta(self) -> dict[str, str]:
        return dict(self.x("SELECT key, value FROM meta", read=True))

    def documents(self) -> dict[str, DocRecord]:
        rows = self.x("SELECT doc, content_hash, label, principal, origin, ingested_at, n_chunks, collection, meta "
                      "FROM documents ORDER BY doc", read=True)
        return {r[0]: DocRecord(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], decode_meta(r[8])) for r in rows}

    def generation(self) -> int:
        rows = self.x("SELECT value FROM meta WHERE key = 'generation'", read=True)
        return int(rows[0][0]) if rows else 0

    def snapshot(self) -> Snapshot:
        return self._snapshot(None)

    def snapshot_of(self, docs: Collection[str]) -> Snapshot:
        return self._snapshot(list(docs))

    def _snapshot(self, only: list[str] | None) -> Snapshot:
        # REPEATABLE READ: every statement below sees the same committed state.
        with self.transaction(read=True):
            self.x("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            meta = self.meta()
            docs = self.documents()
            rows = []
            if meta.get("dim"):
                rows = self.x('SELECT id, doc, idx, start, "end", text, embedding::text, label, page FROM chunks '
                              + ("WHERE doc = ANY(%s) " if only is not None else "") + "ORDER BY doc, idx",
                              (only,) if only is not None else None)
        chunks = [Chunk(r[0], r[1], r[2], r[3], r[4], r[5], r[8]) for r in rows]
        dim = int(meta.get("dim", 0) or 0)
        vectors = (np.array([np.fromstring(r[6][1:-1], sep=",", dtype=np.float32) for r in rows], dtype=np.float32)
                   if rows else np.zeros((0, dim), dtype=np.float32))
        return Snapshot(int(meta.get("generation", 0)), meta, docs, chunks, vectors, [r[7] for r in rows])

    def chunks_at(self, places: list[tuple[str, int]], labels: list[str] | None) -> list[Chunk]:
        if not places:
            return []
        # Labels as stored now, not as the search saw them: a re-upload waiting for review
        # (``_quarantine``) or a relabel may have landed between the two queries.
        rows = self.x('SELECT id, doc, idx, start, "end", text, page FROM chunks '
                      "WHERE (doc, idx) IN (SELECT * FROM unnest(%s::text[], %s::int[])) AND left(label, 1) <> '_' "
                      "AND (%s::text[] IS NULL OR label = ANY(%s::text[]))",
                      ([d for d, _ in places], [i for _, i in places], labels, labels))
        return [Chunk(r[0], r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows]

    # ------------------------------------------------------------ writes

    def apply(self, updates: list[DocUpdate], deletes: list[str], meta: dict[str, str]) -> int:
        dim = int(meta.get("dim") or self.meta().get("dim") or 0)
        if dim:
            self._create_chunks(dim)
        with self.transaction():
            # One writer at a time; readers keep going on their snapshots.
            self.x("LOCK TABLE meta IN EXCLUSIVE MODE")
            gen = self.generation() + 1
            for doc in [*deletes, *(u.record.doc for u in updates)]:
                self._count_terms(doc, -1)
                self.x("DELETE FROM documents WHERE doc = %s", (doc,))
            stats = self._stats()
            n, total_dl = stats["n"], stats["total_dl"]
            prepared = []
            for u in updates:
                for c in u.chunks:
                    tf = Counter(term_id(t) for t in bm25_tokens(c.text))
                    prepared.append((u, c, tf, sum(tf.values())))
                    if not u.record.label.startswith("_"):
                        n, total_dl = n + 1, total_dl + sum(tf.values())
            avgdl = total_dl / n if n and total_dl else 1.0  # no words at all: any positive mean will do
            # New rows use the avgdl the stored rows were weighted with, so all scores agree.
            weighted_with = float(self.meta().get("avgdl") or 0) or avgdl
            with self._local.conn.cursor() as cur:
                for u in updates:
                    # Fields as the record reads back (one value per key as written, as ``encode_meta`` keeps it).
                    r = replace(u.record, meta=decode_meta(encode_meta(u.record.meta)))
                    cur.execute("INSERT INTO documents (doc, content_hash, label, principal, origin, ingested_at, n_chunks, "
                                "collection, meta, fields) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s::jsonb)",
                                (r.doc, r.content_hash, r.label, r.principal, r.origin, r.ingested_at, len(u.chunks),
                                 r.collection, encode_meta(r.meta), json.dumps(filter_values(r), ensure_ascii=False)))
                hashes = [h for u in updates for h in u.text_hashes]
                vectors = [v for u in updates for v in u.vectors]
                rows = [(c.id, c.doc, c.index, c.start, c.end, c.text, h, u.record.label, c.page, vector_literal(v),
                         list(tf), list(tf.values()), dl,
                         sparse_literal(bm25_doc_weights(tf, dl, weighted_with, self.k1, self.b)))
                        for (u, c, tf, dl), h, v in zip(prepared, hashes, vectors)]
                cur.executemany('INSERT INTO chunks (id, doc, idx, start, "end", text, text_hash, label, page, embedding, '
                                "terms, tfs, dl, bm25) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s::vector,%s,%s,%s,%s::sparsevec)",
                                rows)
            for u in updates:
                self._count_terms(u.record.doc, +1)
            values = {**meta, "format_version": str(PG_FORMAT), "generation": str(gen),
                      "avgdl": repr(self._settle_avgdl(weighted_with))}
            for k, v in values.items():
                self.x("INSERT INTO meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                       (k, str(v)))
        self.committed_lsn()  # this process reads its own write from now on, standby or not
        return gen

    def _settle_avgdl(self, weighted_with: float) -> float:
        """The mean length the weights now use: re-weight every chunk once the live mean
        drifts more than ``REWEIGHT_DRIFT`` from the one they were built with."""
        stats = self._stats()
        avgdl = stats["total_dl"] / stats["n"] if stats["n"] and stats["total_dl"] else max(weighted_with, 1.0)
        if weighted_with <= 0 or abs(avgdl - weighted_with) / weighted_with > REWEIGHT_DRIFT:
            self._reweight(avgdl)
            return avgdl
        return weighted_with

    def _stats(self) -> dict[str, float]:
        # The mean chunk length every stored weight is normalised by. Reserved labels
        # (content waiting for review) are left out, so an upload nobody approved cannot
        # move a live document's score; restricted chunks count, as one corpus-wide mean.
        n, total = self.x("SELECT coalesce(sum(n), 0), coalesce(sum(total_dl), 0) FROM label_stats "
                          "WHERE left(label, 1) <> '_'")[0]
        return {"n": int(n), "total_dl": int(total)}

    def _count_terms(self, doc: str, sign: int) -> None:
        """Add (``sign=+1``) or take away (``-1``) ``doc``'s chunks in the per-label statistics."""
        if self.x("SELECT to_regclass(%s)", (f"{self.schema}.chunks",))[0][0] is None:
            return
        self.x("""INSERT INTO term_df SELECT term, label, %s * count(*) FROM chunks, unnest(terms) term
                   WHERE doc = %s GROUP BY term, label
                   ON CONFLICT (term, label) DO UPDATE SET df = term_df.df + EXCLUDED.df""", (sign, doc))
        self.x("""INSERT INTO label_stats SELECT label, %s * count(*), %s * sum(dl) FROM chunks WHERE doc = %s
                   GROUP BY label ON CONFLICT (label) DO UPDATE
                   SET n = label_stats.n + EXCLUDED.n, total_dl = label_stats.total_dl + EXCLUDED.total_dl""",
                (sign, sign, doc))
        if sign < 0:
            self.x("DELETE FROM term_df WHERE df <= 0")
            self.x("DELETE FROM label_stats WHERE n <= 0")

    def _reweight(self, avgdl: float) -> None:
        with self.transaction():
            rows = self.x("SELECT id, terms, tfs, dl FROM chunks")
            self._many("UPDATE chunks SET bm25 = %s::sparsevec WHERE id = %s", [
                (sparse_literal(bm25_doc_weights(dict(zip(t, f)), dl, avgdl, self.k1, self.b)), cid)
                for cid, t, f, dl in rows])

    def _many(self, sql: str, rows: list[tuple]) -> None:
        """``sql`` once per row, in the current transaction (or one of its own)."""
        with self.transaction(), self._local.conn.cursor() as cur:
            cur.executemany(sql, rows)

    # ------------------------------------------------------------ server-side search

    def filters(self, where: DocFilter) -> bool:
        return where.sql_terms() is not None

    def _filter_sql(self, where: DocFilter) -> tuple[str, list[Any]]:
        """``where`` as a predicate on ``documents``: a glob without a wildcard by containment
        (served by the GIN index), any other by ``LIKE`` over the field's values."""
        terms = where.sql_terms()
        if terms is None:
            raise ValueError("a character class ([...]) is no SQL filter: send the admitted documents instead")
        sql, args = [], []
        for negated, field, how, value in terms:
            if not _storable(value) or not _storable(field):  # no stored field or value holds it
                sql.append("true" if negated else "false")
            elif how == "equals":
                sql.append(("NOT " if negated else "") + "fields @> %s::jsonb")
                args.append(json.dumps({field: [value]}, ensure_ascii=False))
            else:
                # (the escape character as a parameter: a literal backslash reads differently when
                # standard_conforming_strings is off)
                sql.append(("NOT " if negated else "") + "EXISTS (SELECT 1 FROM jsonb_array_elements_text("
                           "coalesce(fields -> %s, '[]'::jsonb)) v WHERE v LIKE %s ESCAPE %s)")
                args += [field, value, "\\"]
        return " AND ".join(sql) or "true", args

    def admitted(self, where: DocFilter, labels: list[str] | None, limit: int | None = None) -> list[str]:
        """The documents ``where`` admits among those labelled ``labels`` (every unreserved
        label when ``None``), by the database, in id order (at most ``limit``)."""
        pred, args = self._filter_sql(where)
        rows = self.x(f"SELECT doc FROM documents WHERE left(label, 1) <> '_' AND (%s::text[] IS NULL OR label = ANY(%s::text[])) "
                      f"AND {pred} ORDER BY doc" + (" LIMIT %s" if limit is not None else ""),
                      (labels, labels, *args, *([limit] if limit is not None else [])), read=True)
        return [r[0] for r in rows]

    def search(self, query: str, qvec: np.ndarray, labels: list[str] | None, n: int = 100,
               ef_search: int = 200, docs: list[str] | None = None,
               where: DocFilter | None = None) -> Candidates:
        """Candidates for ``query``: the union of the BM25 and the HNSW top-``n``
        (only chunks whose label is in ``labels``), each with BOTH raw leg scores.
        IDF and the chunk count come from the same labels only; document lengths are
        normalised by the corpus-wide mean the stored weights were built with.

        The ceiling (sum of IDF) lets the grounding gate read coverage. The floors: the dense
        leg's is the cosine of the chunk the HNSW index finds nearest to -q, the one farthest from
        q (a floor above a candidate's cosine is harmless: ``fuse.minmax`` takes the lower). The
        keyword leg's is 0, as in memory (``retrieve.leg_floors``), where the HNSW pass found ``n``
        chunks; where it found fewer it usually saw every chunk the filters admit, which are then
        all candidates, scaled over themselves (exact even when every one holds a query term).
        """
        tokens = bm25_tokens(query)
        counts = Counter(term_id(t) for t in tokens)  # a repeated term counts each time, as in memory
        label_sql, label_args = ("AND label = ANY(%s)", [labels]) if labels is not None else ("", [])
        # the filter narrows candidates only: IDF and the ceiling stay those of the caller's labels
        narrowed = self._narrowed(labels, docs, where)
        with self.transaction(read=True):
            # One snapshot for every statement below: the statistics and the chunks come from the
            # same committed ingest, never half of one (READ COMMITTED would re-read per statement).
            self.x("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            self.x("SET LOCAL jit = off")  # compiling a plan cost ~25 ms per large scan at 1M (benchmarks/pg_scale.py)
            self.x(f"SET LOCAL hnsw.ef_search = {int(ef_search)}")  # 200: recall@10 >= 0.98 in benchmarks/scale.py
            self.x("SET LOCAL hnsw.iterative_scan = relaxed_order")
            dfs, weights, n_chunks = self._query_weights(counts, label_sql, label_args)
            q_sparse = sparse_literal(weights)
            qv = vector_literal(qvec)
            ids = [r[0] for r in self.x(
                f"SELECT id FROM chunks WHERE embedding IS NOT NULL {narrowed[0]} ORDER BY embedding <=> %s::vector LIMIT %s",
                (*narrowed[1], qv, n))]
            far = self.x(f"SELECT 1 - (embedding <=> %s::vector) FROM chunks WHERE embedding IS NOT NULL {narrowed[0]} "
                         "ORDER BY embedding <=> %s::vector LIMIT 1", (qv, *narrowed[1], vector_literal(-qvec)))
            least = float(far[0][0]) if far else math.nan  # (NaN: a zero query vector has no cosine)
            floors = (0.0 if len(ids) >= n else None, None if math.isnan(least) else least)
            if dfs:
                ids += self._keyword_top(dfs, weights, n_chunks, q_sparse, narrowed, n)
            rows = self.x(f"{_SCORED} WHERE id = ANY(%s) ORDER BY doc, idx", (q_sparse, qv, list(dict.fromkeys(ids))))
        # Terms no chunk has get the highest IDF, as in the in-memory scorer.
        ceiling = sum(lucene_idf(dfs.get(term_id(t), 0), n_chunks) for t in tokens)
        return Candidates(_scored(rows), ceiling, floors)

    def _narrowed(self, labels: list[str] | None, docs: list[str] | None,
                  where: DocFilter | None) -> tuple[str, list[Any]]:
        """The SQL (``AND ...``) and its arguments that keep the chunks labelled ``labels``, of
        ``docs`` and of the documents ``where`` admits (each only when given)."""
        label_sql, label_args = ("AND label = ANY(%s)", [labels]) if labels is not None else ("", [])
        doc_sql, doc_args = ("AND doc = ANY(%s)", [docs]) if docs is not None else ("", [])
        if where:
            pred, pred_args = self._filter_sql(where)
            doc_sql, doc_args = f"{doc_sql} AND doc IN (SELECT doc FROM documents WHERE {pred})", [*doc_args, *pred_args]
        return f"{label_sql} {doc_sql}", [*label_args, *doc_args]

    def scores_of(self, query: str, qvec: np.ndarray, labels: list[str] | None, docs: list[str],
                  ids: Sequence[str] = ()) -> tuple[list[tuple[Chunk, float, float]], float]:
        """The chunks ``ids`` and every chunk of ``docs`` (not labelled ``labels``: an upload under
        review), with both raw leg scores and the query's keyword ceiling, the keyword weights
        from the statistics of ``labels`` with ``docs``' chunks counted in, as if they were live:
        a word only the upload holds weighs what it will once the upload is live."""
        counts = Counter(term_id(t) for t in bm25_tokens(query))
        label_sql, label_args = ("AND label = ANY(%s)", [labels]) if labels is not None else ("", [])
        outside = ("AND NOT (label = ANY(%s))", [labels]) if labels is not None else ("AND false", [])
        with self.transaction(read=True):
            self.x("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            dfs, _, n_chunks = self._query_weights(counts, label_sql, label_args)
            n_chunks += int(self.x(f"SELECT count(*) FROM chunks WHERE doc = ANY(%s) {outside[0]}",
                                   (list(docs), *outside[1]))[0][0])
            for term, df in self.x(f"SELECT t, count(*) FROM chunks, unnest(terms) t WHERE doc = ANY(%s) {outside[0]} "
                                   "AND t = ANY(%s::bigint[]) GROUP BY t", (list(docs), *outside[1], sorted(counts))):
                dfs[term] = dfs.get(term, 0) + int(df)
            weights = {t: counts[t] * lucene_idf(dfs[t], n_chunks) for t in counts if t in dfs}
            rows = self.x(f"{_SCORED} WHERE (id = ANY(%s) OR doc = ANY(%s)) AND embedding IS NOT NULL ORDER BY doc, idx",
                          (sparse_literal(weights), vector_literal(qvec), list(ids), list(docs)))
        ceiling = sum(lucene_idf(dfs.get(term_id(t), 0), n_chunks) for t in bm25_tokens(query))
        return _scored(rows), ceiling

    def texts_of(self, docs: list[str]) -> dict[str, str]:
        by_doc: dict[str, list[str]] = {}
        with self.transaction(read=True):
            for doc, text in self.x("SELECT doc, text FROM chunks WHERE doc = ANY(%s) ORDER BY doc, idx", (list(docs),)):
                by_doc.setdefault(doc, []).append(text)
        return {d: "\n\n".join(t) for d, t in by_doc.items()}

    def _query_weights(self, counts: Counter[int], label_sql: str,
                       label_args: list[Any]) -> tuple[dict[int, int], dict[int, float], int]:
        """(df per query term that a counted chunk holds, the query's weight per such term: its
        count times its IDF, the chunks counted), from the statistics of the labels."""
        terms = sorted(counts)
        n_chunks = int(self.x(f"SELECT coalesce(sum(n), 0) FROM label_stats WHERE true {label_sql}", label_args)[0][0])
        dfs = dict(self.x(f"SELECT term, sum(df)::int FROM term_df WHERE term = ANY(%s::bigint[]) {label_sql} "
                          "GROUP BY term HAVING sum(df) > 0", (terms, *label_args))) if terms else {}
        return dfs, {t: counts[t] * lucene_idf(dfs[t], n_chunks) for t in terms if t in dfs}, n_chunks

    def idf(self, terms: list[str], labels: list[str] | None) -> dict[str, float]:
        ids = {t: term_id(t) for t in dict.fromkeys(terms)}
        label_sql, label_args = ("AND label = ANY(%s)", [labels]) if labels is not None else ("", [])
        with self.transaction(read=True):
            self.x("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # the count and the dfs of one commit
            n_chunks = int(self.x(f"SELECT coalesce(sum(n), 0) FROM label_stats WHERE true {label_sql}",
                                  label_args)[0][0])
            dfs = dict(self.x(f"SELECT term, sum(df)::int FROM term_df WHERE term = ANY(%s::bigint[]) {label_sql} "
                              "GROUP BY term", (sorted(set(ids.values())), *label_args))) if ids else {}
        return {t: lucene_idf(dfs.get(i, 0), n_chunks) for t, i in ids.items()}

    def holds(self, term: str, labels: list[str] | None) -> bool:
        # (no labels: every unreserved one - what waits for review never answers a question)
        label_sql, label_args = ("AND label = ANY(%s)", [labels]) if labels is not None else ("AND label NOT LIKE '\\_%%'", [])
        with self.transaction(read=True):
            return bool(self.x(f"SELECT 1 FROM term_df WHERE term = %s {label_sql} AND df > 0 LIMIT 1",
                               (term_id(term), *label_args)))

    def _keyword_top(self, dfs: dict[int, int], weights: dict[int, float], n_chunks: int, q_sparse: str,
                     where: tuple[str, list], n: int) -> list[str]:
        """Ids of the BM25 top ``n``, exactly. Scoring every chunk that holds any query term reads
        most of the table once a query has a common word (1 s at 1M chunks). So first only
        chunks holding a *rare* term (df <= ``RARE_SHARE`` of the visible chunks) are scored, with
        every term: a chunk holding only common terms scores below the sum of their weights
        (Lucene's per-term weight is < 1), so when the n-th score found reaches that sum, no
        other chunk can enter the top ``n`` and the result is exact. Otherwise, all of them."""
        common = [t for t in dfs if dfs[t] > RARE_SHARE * n_chunks]
        rare = [t for t in dfs if t not in common]
        if rare and common:
            rows = self.x(f"SELECT id, -(bm25 <#> %s::sparsevec) FROM chunks WHERE terms && %s::bigint[] {where[0]} "
                          "ORDER BY bm25 <#> %s::sparsevec, id LIMIT %s", (q_sparse, rare, *where[1], q_sparse, n))
            bound = sum(weights[t] for t in common)
            # (a margin for the 6-digit query weights and float32 document weights)
            if len(rows) == n and float(rows[-1][1]) >= bound * (1 + 1e-5) + 1e-6:
                return [r[0] for r in rows]
        return [r[0] for r in self.x(f"SELECT id FROM chunks WHERE terms && %s::bigint[] {where[0]} "
                                     "ORDER BY bm25 <#> %s::sparsevec, id LIMIT %s", (list(dfs), *where[1], q_sparse, n))]

    def relabel(self, doc: str, label: str, version: str | None = None) -> int:
        with self.transaction():
            self.x("LOCK TABLE meta IN EXCLUSIVE MODE")  # (after it: the version read below is the latest)
            rows = self.x("UPDATE documents SET label = %s, fields = jsonb_set(fields, '{label}', %s::jsonb) WHERE doc = %s "
                          "RETURNING content_hash", (label, json.dumps([label.lower()], ensure_ascii=False), doc))
            if not rows:
                raise MicroRAGError(f"no such document {doc!r}")
            if version is not None and rows[0][0] != version:
                raise StaleVersion(f"{doc!r} changed since version {version[:12]} (now {rows[0][0][:12]})")
            self._count_terms(doc, -1)
            self.x("UPDATE chunks SET label = %s WHERE doc = %s", (label, doc))
            self._count_terms(doc, +1)
            gen = self.generation() + 1
            self.x("UPDATE meta SET value = %s WHERE key = 'generation'", (str(gen),))
            # Approval moves a document out of quarantine into the mean length.
            weighted_with = float(self.meta().get("avgdl") or 0)
            if weighted_with:
                self.x("UPDATE meta SET value = %s WHERE key = 'avgdl'", (repr(self._settle_avgdl(weighted_with)),))
        self.committed_lsn()
        return gen

    def check(self) -> list[str]:
        problems = check_snapshot(self.snapshot())
        if self.meta().get("dim"):
            bad = self.x("""SELECT count(*) FROM (SELECT term, label, count(*) AS n FROM chunks, unnest(terms) term
                             GROUP BY term, label) x FULL JOIN term_df t USING (term, label)
                             WHERE x.n IS DISTINCT FROM t.df""")[0][0]
            if bad:
                problems.append(f"{bad} keyword document frequencies disagree with the chunks")
            bad = self.x("""SELECT count(*) FROM (SELECT label, count(*) AS n, sum(dl) AS total_dl FROM chunks GROUP BY label) x
                             FULL JOIN label_stats s USING (label)
                             WHERE x.n IS DISTINCT FROM s.n OR x.total_dl IS DISTINCT FROM s.total_dl""")[0][0]
            if bad:
                problems.append(f"{bad} labels' chunk counts disagree with the chunks")
            stored = dict(self.x("SELECT doc, fields FROM documents"))
            off = sum(stored.get(d) != filter_values(r) for d, r in self.documents().items())
            if off:
                problems.append(f"{off} documents' filter fields disagree with their records (written by an older "
                                "microrag? open the index with this one to fill them in again)")
            drift = self.x("SELECT count(*) FROM chunks c JOIN documents d USING (doc) WHERE c.label <> d.label")[0][0]
            if drift:
                problems.append(f"{drift} chunks carry a label that differs from their document's")
        return problems

    def close(self) -> None:
        self.pool.close()
        if self.read_pool is not None:
            self.read_pool.close()
