"""What every route shares: the configuration, the current engine, the write lock,
and who the caller is (API key -> principal, with rate limits and key-guess throttling)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping

from fastapi import Depends, HTTPException, Request

from ..config import override
from ..engine import Engine
from ..store.base import DocRecord
from .auth import ANONYMOUS, Principal
from .config import EVERYONE_ADMIN, ServerConfig
from .screening import Screening


class RateLimiter:
    """Per-principal sliding window; returns False when over the limit."""

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
        self.engine: Engine | None = None
        self.limiter = RateLimiter(cfg.rate_per_minute)
        self.guesses = RateLimiter(cfg.key_failures_per_minute)  # wrong keys per client address
        self.screening = Screening(cfg.state)
        self.reload()

    def reload(self) -> None:
        with self.lock:
            # Postgres + BM25: retrieval runs in the database (stateless replicas); else loaded here.
            # The derived files are saved at start only: after a write (under this lock) saving a
            # generation the next write replaces would only delay the swap. After a write the
            # current engine is updated with the changed documents (Engine.updated), not derived
            # again; requests keep reading the current one until the new one is swapped in.
            current = self.engine
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
            self.engine = engine

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
