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
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..errors import MicroRAGError
from .tables import SqliteTables, Tables

ROLES = ("reader", "contributor", "admin")


@dataclass(frozen=True)
class Principal:
    """Who is calling: a name, a role, the labels they may read, and whether their uploads are trusted."""

    name: str
    role: str
    clearance: frozenset[str]
    trusted: bool = False
    # Where the store's write log stood after this principal's last write (``Store.committed_position``):
    # reads on a lagging standby wait for it, so an uploader always reads their own writes.
    wrote: str = ""

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
    """API keys in ``tables``: a SQLite file (path) for one server, or the PostgreSQL primary
    (``PostgresTables``) shared by every replica, so a revocation holds on all of them at once."""

    def __init__(self, tables: str | Path | Tables) -> None:
        self.tables: Tables = SqliteTables(tables) if isinstance(tables, str | Path) else tables
        self.tables.run("""CREATE TABLE IF NOT EXISTS keys (id TEXT PRIMARY KEY, name TEXT NOT NULL, role TEXT NOT NULL,
            clearance TEXT NOT NULL, trusted INTEGER NOT NULL, hash TEXT NOT NULL, created TEXT NOT NULL,
            revoked INTEGER NOT NULL DEFAULT 0)""")
        self.tables.add_column("keys", "wrote", "TEXT NOT NULL DEFAULT ''")
        # One active key per name, enforced by the database: two replicas adding it at once cannot both win.
        self.tables.run("CREATE UNIQUE INDEX IF NOT EXISTS keys_active_name ON keys (name) WHERE revoked = 0")

    def add(self, name: str, role: str, clearance: list[str], trusted: bool = False, reissue: bool = False) -> str:
        """Create a key; returns it - the only time it is ever shown. ``reissue`` lets a revoked
        key's name be used again: the lab baseline's weakness (red team #33, 6), never a real server's."""
        if role not in ROLES:
            raise MicroRAGError(f"unknown role {role!r}; choose one of: {', '.join(ROLES)}")
        if not name or not all(ch.isalnum() or ch in "-_." for ch in name):
            raise MicroRAGError("a key name is letters, digits, '-', '_' or '.' (it becomes the principal's namespace)")
        if any(not label or label.startswith("_") for label in clearance):
            raise MicroRAGError("clearance labels are names like public,internal (labels starting with '_' are reserved)")
        kid, secret = secrets.token_hex(4), secrets.token_urlsafe(24).replace("_", "-")
        added = self.tables.run(
            "INSERT INTO keys (id, name, role, clearance, trusted, hash, created, revoked) SELECT ?,?,?,?,?,?,?,0 "
            # A name once used is never issued again, revoked or not: uploads are owned by it, and a
            # new key must not inherit a revoked key's documents (whichever door adds the key).
            "WHERE NOT EXISTS (SELECT 1 FROM keys WHERE name = ? AND (revoked = 0 OR ? = 0)) "
            "RETURNING id",
            (kid, name, role, ",".join(sorted(set(clearance) | {"public"})), int(trusted or role == "admin"),
             _hash(secret), datetime.now(UTC).isoformat(timespec="seconds"), name, int(reissue)))
        if not added:
            raise MicroRAGError(f"the key name {name!r} has been used (its uploads are owned by that name); pick another name")
        return f"mrg_{kid}_{secret}"

    def list(self) -> list[dict]:
        rows = self.tables.run("SELECT id, name, role, clearance, trusted, created, revoked FROM keys ORDER BY created")
        return [dict(zip(("id", "name", "role", "clearance", "trusted", "created", "revoked"), r)) for r in rows]

    def revoke(self, kid: str, by_name: bool = True) -> None:
        """Revoke the key with id ``kid`` (or, with ``by_name``, the active key of that name)."""
        sql = "UPDATE keys SET revoked = 1 WHERE id = ?" + (" OR name = ?" if by_name else "") + " RETURNING id"
        if not self.tables.run(sql, (kid, kid) if by_name else (kid,)):
            raise MicroRAGError(f"no key with id or name {kid!r} (see: microrag keys list)")

    def resolve(self, key: str) -> Principal | None:
        """The principal for ``key``, or None (unknown, malformed or revoked). Read on every
        request, never cached: a revoked key fails on its next request."""
        parts = key.split("_", 2)
        if len(parts) != 3 or parts[0] != "mrg":
            return None
        rows = self.tables.run("SELECT name, role, clearance, trusted, hash, wrote FROM keys WHERE id = ? AND revoked = 0",
                               (parts[1],))
        row = rows[0] if rows else None
        if row is None or not hmac.compare_digest(row[4], _hash(parts[2])):
            return None
        return Principal(row[0], row[1], frozenset(row[2].split(",")), bool(row[3]), row[5])

    def wrote(self, name: str, position: str) -> None:
        """Record where the store's log stood after ``name``'s write (see ``Principal.wrote``)."""
        if position:
            self.tables.run("UPDATE keys SET wrote = ? WHERE name = ? AND revoked = 0", (position, name))
