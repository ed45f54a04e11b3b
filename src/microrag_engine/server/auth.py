"""API keys -> principals. Keys are shown once and stored only as SHA-256 hashes.

A key looks like ``mrg_<id>_<secret>``; the id finds the row, the secret is
compared by hash in constant time. Roles: ``reader`` < ``contributor`` <
``admin``; clearance is the set of sensitivity labels a principal may read.
Anonymous callers (when allowed) are readers of ``public`` only. This module
never logs or returns a key after it was created.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sqlite3
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..errors import MicroRAGError

ROLES = ("reader", "contributor", "admin")


@dataclass(frozen=True)
class Principal:
    """Who is calling: a name, a role, the labels they may read, and whether their uploads are trusted."""

    name: str
    role: str
    clearance: frozenset[str]
    trusted: bool = False

    def at_least(self, role: str) -> bool:
        return ROLES.index(self.role) >= ROLES.index(role)

    def may_read(self, label: str) -> bool:
        """What retrieval filters by (``Engine.mask``): a label of this clearance, never a reserved
        one (``_quarantine``). Every door that names or counts documents asks this."""
        return not label.startswith("_") and label in self.clearance


ANONYMOUS = Principal("anonymous", "reader", frozenset({"public"}))


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class KeyStore:
    """Keys in a small SQLite file (thread-safe through one lock)."""

    def __init__(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self.lock = threading.Lock()
        self.db.execute("""CREATE TABLE IF NOT EXISTS keys (id TEXT PRIMARY KEY, name TEXT NOT NULL, role TEXT NOT NULL,
            clearance TEXT NOT NULL, trusted INTEGER NOT NULL, hash TEXT NOT NULL, created TEXT NOT NULL,
            revoked INTEGER NOT NULL DEFAULT 0)""")

    def add(self, name: str, role: str, clearance: list[str], trusted: bool = False) -> str:
        """Create a key; returns it - the only time it is ever shown."""
        if role not in ROLES:
            raise MicroRAGError(f"unknown role {role!r}; choose one of: {', '.join(ROLES)}")
        if not name or not all(ch.isalnum() or ch in "-_." for ch in name):
            raise MicroRAGError("a key name is letters, digits, '-', '_' or '.' (it becomes the principal's namespace)")
        if any(not label or label.startswith("_") for label in clearance):
            raise MicroRAGError("clearance labels are names like public,internal (labels starting with '_' are reserved)")
        kid, secret = secrets.token_hex(4), secrets.token_urlsafe(24).replace("_", "-")
        with self.lock:
            if self.db.execute("SELECT 1 FROM keys WHERE name = ? AND revoked = 0", (name,)).fetchone():
                raise MicroRAGError(f"an active key named {name!r} exists; revoke it first or pick another name")
            self.db.execute("INSERT INTO keys VALUES (?,?,?,?,?,?,?,0)", (
                kid, name, role, ",".join(sorted(set(clearance) | {"public"})), int(trusted or role == "admin"),
                _hash(secret), datetime.now(UTC).isoformat(timespec="seconds")))
        return f"mrg_{kid}_{secret}"

    def list(self) -> list[dict]:
        with self.lock:
            rows = self.db.execute("SELECT id, name, role, clearance, trusted, created, revoked FROM keys ORDER BY created")
            return [dict(zip(("id", "name", "role", "clearance", "trusted", "created", "revoked"), r)) for r in rows]

    def revoke(self, kid: str, by_name: bool = True) -> None:
        """Revoke the key with id ``kid`` (or, with ``by_name``, the active key of that name)."""
        with self.lock:
            sql = "UPDATE keys SET revoked = 1 WHERE id = ?" + (" OR name = ?" if by_name else "")
            if not self.db.execute(sql, (kid, kid) if by_name else (kid,)).rowcount:
                raise MicroRAGError(f"no key with id or name {kid!r} (see: microrag keys list)")

    def resolve(self, key: str) -> Principal | None:
        """The principal for ``key``, or None (unknown, malformed or revoked)."""
        parts = key.split("_", 2)
        if len(parts) != 3 or parts[0] != "mrg":
            return None
        with self.lock:
            row = self.db.execute("SELECT name, role, clearance, trusted, hash FROM keys WHERE id = ? AND revoked = 0",
                                  (parts[1],)).fetchone()
        if row is None or not hmac.compare_digest(row[4], _hash(parts[2])):
            return None
        return Principal(row[0], row[1], frozenset(row[2].split(",")), bool(row[3]))
