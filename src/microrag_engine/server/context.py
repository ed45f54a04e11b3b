"""What every route shares: the configuration, the current engine, the write lock,
and who the caller is (API key -> principal, with rate limits and key-guess throttling)."""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Protocol

from fastapi import Depends, HTTPException, Request

from ..config import override
from ..engine import Engine
from ..runtime.llm import reachable
from ..store.base import DocRecord, Store
from .auth import ANONYMOUS, Principal
from .config import EVERYONE_ADMIN, ServerConfig
from .metrics import Metrics
from .screening import Screening
from .tables import PostgresTables

# How often a server looks for other processes' writes to its store (seconds).
SHARED_CHECK_S = 1.0
# How long /health/ready trusts the model endpoint's last answer (seconds).
READY_CACHE_S = 5.0

log = logging.getLogger("microrag")


class DerivedSaver:
    """Saves the latest engine's derived files (``Engine.save_derived``) in one background
    thread, so a restart after writes opens from them instead of deriving everything again.
    Writes in a burst coalesce: only the newest engine waiting is saved, and never under the
    writer's lock (at a million chunks a save writes gigabytes)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._cond = threading.Condition()
        self._waiting: Engine | None = None
        self._thread: threading.Thread | None = None
        self.saved = 0  # the generation last saved (tests and logs)

    def submit(self, engine: Engine) -> None:
        with self._cond:
            self._waiting = engine
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="microrag-save-derived", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                engine, self._waiting = self._waiting, None
                if engine is None:
                    self._thread = None
                    self._cond.notify_all()
                    return
            try:
                if engine.save_derived(self.store):
                    self.saved = engine.generation
            except Exception:  # derived data: the index works without it; the next open derives it
                log.exception("saving the derived index of generation %d failed", engine.generation)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until nothing is waiting or being saved (shutdown, tests); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._thread is None, timeout)


class Limiter(Protocol):
    """A per-caller budget of requests per minute."""

    def allow(self, who: str) -> bool:
        """Spend one request of ``who``'s; False (nothing spent) when the minute's budget is gone."""
        ...

    def exhausted(self, who: str) -> bool:
        """Whether ``who`` has used up this minute's allowance (records nothing)."""
        ...


class RateLimiter:
    """Per-principal sliding window in this process; returns False when over the limit."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute, self.lock = per_minute, threading.Lock()
        self.hits: defaultdict[str, list[float]] = defaultdict(list)

    def allow(self, who: str) -> bool:
        t = time.monotonic()
        with self.lock:
            recent = [x for x in self.hits[who] if t - x < 60]
            ok = len(recent) < self.per_minute
            self.hits[who] = recent + [t] if ok else recent
        return ok

    def exhausted(self, who: str) -> bool:
        """Whether ``who`` has used up this minute's allowance (records nothing)."""
        t = time.monotonic()
        with self.lock:
            return sum(t - x < 60 for x in self.hits.get(who, ())) >= self.per_minute


class SharedRateLimiter:
    """Per-principal budget kept in the PostgreSQL primary, so N replicas allow the limit once,
    not N times. Counts per minute of the database's clock; the last minute's count weighs by
    the share of it still inside the window (a sliding-window estimate: one row per caller and
    minute, one statement per request), checked again on the locked row, so concurrent requests
    on any number of replicas cannot overrun it."""

    def __init__(self, tables: PostgresTables, per_minute: int, scope: str) -> None:
        self.tables, self.per_minute, self.scope = tables, per_minute, scope
        self.swept = 0  # the minute whose old rows this process last deleted
        tables.run("CREATE TABLE IF NOT EXISTS rate_hits (scope TEXT NOT NULL, who TEXT NOT NULL, minute BIGINT NOT NULL, "
                   "n INTEGER NOT NULL, PRIMARY KEY (scope, who, minute))")

    _SEEN = ("WITH t AS (SELECT extract(epoch FROM clock_timestamp())::float8 / 60 AS m), "
             "b AS (SELECT floor(m)::bigint AS cur, m - floor(m) AS frac FROM t), "
             "seen AS (SELECT coalesce(sum(CASE WHEN r.minute = b.cur THEN r.n::float8 ELSE r.n * (1 - b.frac) END), 0) AS est "
             "FROM b LEFT JOIN rate_hits r ON r.scope = ? AND r.who = ? AND r.minute IN (b.cur, b.cur - 1)) ")

    def allow(self, who: str) -> bool:
        # The test is made again in DO UPDATE, on the row as locked: concurrent requests that all
        # read "one left" cannot all pass (only this minute's count can have moved meanwhile).
        rows = self.tables.run(
            self._SEEN + ", prev AS (SELECT seen.est - coalesce((SELECT r.n FROM rate_hits r, b WHERE r.scope = ? AND r.who = ? "
            "AND r.minute = b.cur), 0) AS w FROM seen) "
            "INSERT INTO rate_hits (scope, who, minute, n) SELECT ?, ?, b.cur, 1 FROM b, seen WHERE seen.est < ? "
            "ON CONFLICT (scope, who, minute) DO UPDATE SET n = rate_hits.n + 1 "
            "WHERE rate_hits.n + (SELECT w FROM prev) < ? RETURNING minute",
            (self.scope, who, self.scope, who, self.scope, who, self.per_minute, self.per_minute))
        if rows and rows[0][0] != self.swept:  # a new minute: rows two minutes old count for nobody
            self.swept = rows[0][0]
            self.tables.run("DELETE FROM rate_hits WHERE minute < ?", (self.swept - 1,))
        return bool(rows)

    def exhausted(self, who: str) -> bool:
        rows = self.tables.run(self._SEEN + "SELECT est >= ? FROM seen", (self.scope, who, self.per_minute))
        return bool(rows and rows[0][0])


def request_key(headers: Mapping[str, str]) -> str:
    """The key a request presents: ``Authorization: Bearer <key>``, else ``X-API-Key`` (``""``: none)."""
    auth = headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else headers.get("x-api-key", "")


class ServerContext:
    """The state behind the routes. The engine reference swaps atomically after each
    write (under ``lock``); a request keeps the engine it started with."""

    def __init__(self, cfg: ServerConfig) -> None:
        self.cfg = cfg
        self.on = cfg.defences
        self.lock = threading.RLock()  # one writer at a time
        self._engine: Engine | None = None
        self.checked = 0.0  # when the store's generation was last compared with the engine's
        self.seen = 0  # the store's generation when the engine was last loaded
        shared = cfg.keys.tables if isinstance(cfg.keys.tables, PostgresTables) else None
        # Replicas on one PostgreSQL share one budget per caller; a lone server counts in memory.
        self.limiter: Limiter = SharedRateLimiter(shared, cfg.rate_per_minute, "requests") if shared \
            else RateLimiter(cfg.rate_per_minute)
        self.guesses: Limiter = SharedRateLimiter(shared, cfg.key_failures_per_minute, "wrong-keys") if shared \
            else RateLimiter(cfg.key_failures_per_minute)  # wrong keys per client address
        self.screening = Screening(cfg.state)
        self.saver = DerivedSaver(cfg.store)
        self.metrics = Metrics(self.gauges)
        self._llm_checked = (-READY_CACHE_S, "")  # (when, what) the model's endpoint last said
        self.reload()

    def readiness(self) -> list[str]:
        """Why this server cannot answer now (empty: it can). The model's answer is cached for
        ``READY_CACHE_S``: a probe every second must not become a request to the model every second."""
        problems = []
        try:
            self.cfg.store.generation()
        except Exception as exc:  # a database that went away: not ready, and no traceback for a probe
            problems.append(f"the index's store does not answer ({type(exc).__name__})")
        if self.cfg.llm is not None:
            at, said = self._llm_checked
            if time.monotonic() - at > READY_CACHE_S:
                said = reachable(self.cfg.llm)
                self._llm_checked = (time.monotonic(), said)
            if said:
                problems.append(said)
        return problems

    def gauges(self) -> dict[str, float]:
        """What ``/metrics`` reads at each scrape: the served index, the review queue, a standby's lag."""
        eng = self._engine
        out = {"index_chunks": float(eng.n_chunks if eng else 0), "index_documents": float(eng.n_documents if eng else 0),
               "index_generation": float(self.seen), "review_queue": float(len(self.cfg.state.pending()))}
        lag = self.cfg.store.replica_lag()
        if lag is not None:
            out["replica_lag_seconds"] = lag
        return out

    @property
    def engine(self) -> Engine | None:
        return self.current()

    def current(self, who: Principal | None = None) -> Engine | None:
        """The current engine. Other processes write to the store too (replicas on one
        database, a `microrag ingest` into this server's folder index), so the store's
        generation is compared at most once a second (on every request of a caller who has
        written: they must read their own writes), and a newer one is loaded - as an update
        of the current engine, the changed documents only - unless this server is writing
        right now (the request goes on with the engine it has)."""
        engine = self._engine
        wrote = who.wrote if who is not None else ""
        if wrote or time.monotonic() - self.checked > SHARED_CHECK_S:
            self.checked = time.monotonic()
            with self.cfg.store.reading_after(wrote):
                newer = self.cfg.store.generation() > self.seen
            if newer and self.lock.acquire(blocking=False):
                try:
                    with self.cfg.store.reading_after(wrote):
                        self.reload()
                finally:
                    self.lock.release()
            engine = self._engine
        return engine

    def reload(self, by: Principal | None = None) -> None:
        """Load the store's current state; ``by`` wrote it (their reads will wait for it)."""
        if by is not None and by is not ANONYMOUS:
            self.cfg.keys.wrote(by.name, self.cfg.store.committed_position())
        with self.lock:
            self.seen = self.cfg.store.generation()  # (before the records: see Engine.from_store)
            # Postgres + BM25: retrieval runs in the database (stateless replicas); else loaded here.
            # After a write the current engine is updated with the changed documents
            # (Engine.updated), not derived again; requests keep reading the current one until the
            # new one is swapped in. Its derived files are saved in the background, not under
            # this lock (at start, the first open saves them itself).
            current = self._engine
            records = self.cfg.store.documents()
            settings = self.cfg.settings if self.on.answer_checks else \
                override(self.cfg.settings, hold_mimics=False, conflicts=False)
            if not records:
                engine = None
            elif current is not None and current.settings == settings:
                engine = current.updated(self.cfg.store, records)
            else:
                engine = Engine.from_store(self.cfg.store, settings, save_derived=current is None)
            if engine is not None and self.on.provenance_prior:
                engine.set_tiers(self.tiers(records))
            if engine is not None and current is not None and engine.store is None:
                self.saver.submit(engine)
            self._engine = engine
            self.checked = time.monotonic()

    def tiers(self, records: Mapping[str, DocRecord]) -> dict[str, int]:
        """Provenance tier of each uploaded document: 1 if an admin uploaded or approved this
        version of it, 2 if a trusted contributor's upload went live unreviewed. The operator's
        own files (``microrag ingest``, ``/reset``) are tier 0 and not listed."""
        admins = {f"api:{k['name']}" for k in self.cfg.keys.list() if k["role"] == "admin" and not k["revoked"]}
        approved = self.cfg.state.approved()
        return {doc: 1 if r.principal in admins or approved.get(doc) == r.content_hash else 2
                for doc, r in records.items() if r.principal.startswith("api:")}

    def principal(self, request: Request) -> Principal:
        """The caller, from ``Authorization: Bearer <key>`` or ``X-API-Key``."""
        return self.principal_for_key(request_key(request.headers), request.client.host if request.client else "")

    def principal_for_key(self, key: str, client: str) -> Principal:
        """The caller presenting ``key`` (``""``: none) from address ``client``, for every door
        (HTTP routes, /mcp, ``microrag mcp`` over stdio): resolved, with wrong keys throttled
        per address and every caller rate-limited. Raises ``HTTPException`` (401, 429)."""
        cfg = self.cfg
        if not self.on.authentication:
            return EVERYONE_ADMIN
        if key:
            who = cfg.keys.resolve(key)
            if who is None:
                # Wrong keys are throttled per address; right keys never are (behind a shared
                # proxy address one guesser must not lock every key holder out).
                if not self.guesses.allow(f"ip:{client}"):
                    raise HTTPException(429, "too many wrong API keys from this address; wait a minute")
                raise HTTPException(401, "invalid or revoked API key", headers={"WWW-Authenticate": "Bearer"})
        elif cfg.allow_anonymous:
            who = ANONYMOUS
        else:
            raise HTTPException(401, "an API key is required (Authorization: Bearer <key>)",
                                headers={"WWW-Authenticate": "Bearer"})
        if not self.limiter.allow(who.name if who is not ANONYMOUS else f"anon:{client}"):
            raise HTTPException(429, "rate limit exceeded; slow down")
        return who

    def need(self, role: str) -> Callable[..., Principal]:
        """A dependency that admits callers with at least ``role``."""
        def check(who: Principal = Depends(self.principal)) -> Principal:
            if who is ANONYMOUS:
                raise HTTPException(401, f"this needs an API key with the {role} role",
                                    headers={"WWW-Authenticate": "Bearer"})
            if not who.at_least(role):
                raise HTTPException(403, f"this needs the {role} role")
            return who
        return check
