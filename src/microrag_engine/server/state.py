"""Server-side records beside the index: the review queue and the audit trail.

Quarantined documents are stored in the index under the label ``_quarantine``,
which no clearance includes, so they cannot be retrieved; the label they will
get on approval waits here. Every query leaves an audit row, written before any
retrieved content leaves the server (so a caller who disconnects mid-stream, or an
answer step that fails, still leaves one): principal, time, the query as sent
(``raw``; a keyed hash instead when it holds a secret) and canonicalised and redacted,
retrieved ids and scores, and the decision, updated once the answer is out. The
collision report reads the audit trail.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

QUARANTINE = "_quarantine"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class ServerState:
    """Review queue + audit trail in one SQLite file, guarded by one lock."""

    def __init__(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.lock = threading.Lock()
        self.db.executescript("""
        CREATE TABLE IF NOT EXISTS review (doc TEXT PRIMARY KEY, label TEXT NOT NULL, principal TEXT NOT NULL,
            submitted TEXT NOT NULL, findings TEXT NOT NULL, flags TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS audit (id INTEGER PRIMARY KEY, ts TEXT NOT NULL, principal TEXT NOT NULL,
            action TEXT NOT NULL, query TEXT NOT NULL, hits TEXT NOT NULL, decision TEXT NOT NULL, flags TEXT NOT NULL);
        """)
        self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        # What an admin approved, by version: the provenance tier "admin-approved" holds for that content only.
        self.db.execute("CREATE TABLE IF NOT EXISTS approvals (doc TEXT PRIMARY KEY, version TEXT NOT NULL, "
                        "principal TEXT NOT NULL, ts TEXT NOT NULL)")
        self.db.execute("INSERT OR IGNORE INTO meta VALUES ('audit_key', ?)", (secrets.token_hex(32),))
        self._audit_key = bytes.fromhex(self.db.execute("SELECT value FROM meta WHERE key = 'audit_key'").fetchone()[0])
        # columns added after the first release (state files of older servers get them here)
        for table, column in (("audit", "raw"), ("review", "version"), ("review", "preview")):
            if column not in {r[1] for r in self.db.execute(f"PRAGMA table_info({table})")}:
                self.db.execute(f"ALTER TABLE {table} ADD COLUMN {column} TEXT NOT NULL DEFAULT ''")

    # ------------------------------------------------------------ review queue

    def queue(self, doc: str, label: str, principal: str, findings: dict, flags: list[str],
              version: str = "", preview: str = "") -> None:
        """Queue ``doc`` for review; a newer upload of the same doc replaces the entry (and its version)."""
        with self.lock:
            self.db.execute("INSERT OR REPLACE INTO review (doc, label, principal, submitted, findings, flags, version, preview) "
                            "VALUES (?,?,?,?,?,?,?,?)",
                            (doc, label, principal, now(), json.dumps(findings), json.dumps(flags), version, preview))

    def pending(self) -> list[dict]:
        with self.lock:
            rows = self.db.execute("SELECT doc, label, principal, submitted, findings, flags, version, preview "
                                   "FROM review ORDER BY submitted")
            return [{"doc": r[0], "label": r[1], "principal": r[2], "submitted": r[3],
                     "findings": json.loads(r[4]), "flags": json.loads(r[5]), "version": r[6], "preview": r[7]}
                    for r in rows]

    def take(self, doc: str, version: str | None = None) -> dict | None:
        """Remove ``doc`` from the queue and return its entry (None if not queued).

        With ``version``, only if the queued content is still that version; otherwise
        the entry stays and ``{"stale": True, ...}`` comes back.
        """
        with self.lock:
            row = self.db.execute("SELECT label, principal, version FROM review WHERE doc = ?", (doc,)).fetchone()
            if row and version is not None and version != row[2]:
                return {"stale": True, "label": row[0], "principal": row[1], "version": row[2]}
            if row:
                self.db.execute("DELETE FROM review WHERE doc = ?", (doc,))
        return {"label": row[0], "principal": row[1], "version": row[2]} if row else None

    def approve(self, doc: str, version: str, admin: str) -> None:
        with self.lock:
            self.db.execute("INSERT OR REPLACE INTO approvals VALUES (?,?,?,?)", (doc, version, admin, now()))

    def approved(self) -> dict[str, str]:
        """Approved documents -> the version approved."""
        with self.lock:
            return dict(self.db.execute("SELECT doc, version FROM approvals").fetchall())

    def recent_queries(self, limit: int = 200) -> list[str]:
        """The last ``limit`` distinct questions asked (canonical, redacted: what the audit shows)."""
        with self.lock:
            rows = self.db.execute("SELECT query FROM audit WHERE action IN ('query', 'search', 'chat', 'answer') AND query != '' "
                                   "GROUP BY query ORDER BY MAX(id) DESC LIMIT ?", (limit,)).fetchall()
        return [r[0] for r in rows]

    # ------------------------------------------------------------ audit trail

    def audit(self, principal: str, action: str, query: str, hits: list[dict], decision: str, flags: list[str],
              raw: str = "") -> int:
        """Append a row; returns its id (for ``settle``)."""
        with self.lock:
            cur = self.db.execute(
                "INSERT INTO audit (ts, principal, action, query, hits, decision, flags, raw) VALUES (?,?,?,?,?,?,?,?)",
                (now(), principal, action, query, json.dumps(hits), decision, json.dumps(flags), raw))
            return int(cur.lastrowid or 0)

    def fingerprint(self, text: str) -> str:
        """HMAC-SHA256 of ``text`` under this server's own key: lets an investigator holding
        the state file match a known query, while a leaked audit trail is no guessing oracle."""
        return hmac.new(self._audit_key, text.encode(), hashlib.sha256).hexdigest()

    def settle(self, row: int, decision: str, flags: list[str]) -> None:
        """The outcome of a row written before the answer was produced."""
        with self.lock:
            self.db.execute("UPDATE audit SET decision = ?, flags = ? WHERE id = ?", (decision, json.dumps(flags), row))

    def trail(self, limit: int = 100, principal: str | None = None) -> list[dict]:
        sql = "SELECT ts, principal, action, query, hits, decision, flags, raw FROM audit"
        args: tuple = ()
        if principal:
            sql, args = sql + " WHERE principal = ?", (principal,)
        with self.lock:
            rows = self.db.execute(sql + " ORDER BY id DESC LIMIT ?", (*args, limit)).fetchall()
        return [{"ts": r[0], "principal": r[1], "action": r[2], "query": r[3], "hits": json.loads(r[4]),
                 "decision": r[5], "flags": json.loads(r[6]), "raw": r[7]} for r in rows]
