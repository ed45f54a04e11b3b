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
from datetime import UTC, datetime
from pathlib import Path

from .logs import REQUEST_ID
from .tables import SqliteTables, Tables

QUARANTINE = "_quarantine"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class ServerState:
    """Review queue + audit trail in ``tables``: a SQLite file (path) for one server, or the
    PostgreSQL primary (``PostgresTables``) shared by every replica."""

    def __init__(self, tables: str | Path | Tables) -> None:
        t: Tables = SqliteTables(tables) if isinstance(tables, str | Path) else tables
        self.tables = t
        t.run("CREATE TABLE IF NOT EXISTS review (doc TEXT PRIMARY KEY, label TEXT NOT NULL, principal TEXT NOT NULL, "
              "submitted TEXT NOT NULL, findings TEXT NOT NULL, flags TEXT NOT NULL)")
        t.run(f"CREATE TABLE IF NOT EXISTS audit (id {t.serial}, ts TEXT NOT NULL, principal TEXT NOT NULL, "
              "action TEXT NOT NULL, query TEXT NOT NULL, hits TEXT NOT NULL, decision TEXT NOT NULL, flags TEXT NOT NULL)")
        # (not "meta": on PostgreSQL these tables share the index's schema, whose meta is the store's)
        t.run("CREATE TABLE IF NOT EXISTS server_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        if isinstance(t, SqliteTables) and t.run("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"):
            # state files before replicas kept the audit key in "meta": keep it, or old fingerprints stop matching
            t.run("INSERT INTO server_meta SELECT key, value FROM meta WHERE true ON CONFLICT (key) DO NOTHING")  # (WHERE: SQLite's parse)
        # What an admin approved, by version: the provenance tier "admin-approved" holds for that content only.
        t.run("CREATE TABLE IF NOT EXISTS approvals (doc TEXT PRIMARY KEY, version TEXT NOT NULL, "
              "principal TEXT NOT NULL, ts TEXT NOT NULL)")
        t.run("INSERT INTO server_meta VALUES ('audit_key', ?) ON CONFLICT (key) DO NOTHING", (secrets.token_hex(32),))
        self._audit_key = bytes.fromhex(t.run("SELECT value FROM server_meta WHERE key = 'audit_key'")[0][0])
        # columns added after the first release (state files of older servers get them here)
        # What a reviewer rejected, by version: an operator's ingest does not queue that content again.
        t.run("CREATE TABLE IF NOT EXISTS rejections (doc TEXT PRIMARY KEY, version TEXT NOT NULL, "
              "principal TEXT NOT NULL, ts TEXT NOT NULL)")
        # columns added after the first release (state files of older servers get them here); a
        # review entry's origin is the file an operator's ingest held (uploads have none)
        for table, column in (("audit", "raw"), ("review", "version"), ("review", "preview"), ("review", "origin"),
                              ("audit", "request_id")):
            t.add_column(table, column, "TEXT NOT NULL DEFAULT ''")

    # ------------------------------------------------------------ review queue

    def queue(self, doc: str, label: str, principal: str, findings: dict, flags: list[str],
              version: str = "", preview: str = "", origin: str = "") -> None:
        """Queue ``doc`` for review; a newer upload of the same doc replaces the entry (and its version).
        ``origin``: the file an operator's ingest held (the document is not in the index then)."""
        self.tables.run(
            "INSERT INTO review (doc, label, principal, submitted, findings, flags, version, preview, origin) "
            "VALUES (?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT (doc) DO UPDATE SET label = EXCLUDED.label, principal = EXCLUDED.principal, "
            "submitted = EXCLUDED.submitted, findings = EXCLUDED.findings, flags = EXCLUDED.flags, "
            "version = EXCLUDED.version, preview = EXCLUDED.preview, origin = EXCLUDED.origin",
            (doc, label, principal, now(), json.dumps(findings), json.dumps(flags), version, preview, origin))

    def pending(self) -> list[dict]:
        rows = self.tables.run("SELECT doc, label, principal, submitted, findings, flags, version, preview, origin "
                               "FROM review ORDER BY submitted")
        return [{"doc": r[0], "label": r[1], "principal": r[2], "submitted": r[3],
                 "findings": json.loads(r[4]), "flags": json.loads(r[5]), "version": r[6], "preview": r[7],
                 "origin": r[8]} for r in rows]

    def reject(self, doc: str, version: str, principal: str) -> None:
        self.tables.run("INSERT INTO rejections VALUES (?,?,?,?) ON CONFLICT (doc) DO UPDATE SET version = EXCLUDED.version, "
                        "principal = EXCLUDED.principal, ts = EXCLUDED.ts", (doc, version, principal, now()))

    def rejected(self) -> dict[str, tuple[str, str]]:
        """Rejected documents -> (the version rejected, who rejected it)."""
        return {r[0]: (r[1], r[2]) for r in self.tables.run("SELECT doc, version, principal FROM rejections")}

    def take(self, doc: str, version: str | None = None) -> dict | None:
        """Remove ``doc`` from the queue and return its entry (None if not queued).

        With ``version``, only if the queued content is still that version; otherwise
        the entry stays and ``{"stale": True, ...}`` comes back. One statement removes it,
        so two replicas deciding at once cannot both take it.
        """
        if version is None:
            rows = self.tables.run("DELETE FROM review WHERE doc = ? RETURNING label, principal, version", (doc,))
        else:
            rows = self.tables.run("DELETE FROM review WHERE doc = ? AND version = ? RETURNING label, principal, version",
                                   (doc, version))
            if not rows:
                left = self.tables.run("SELECT label, principal, version FROM review WHERE doc = ?", (doc,))
                if left:
                    return {"stale": True, "label": left[0][0], "principal": left[0][1], "version": left[0][2]}
        return {"label": rows[0][0], "principal": rows[0][1], "version": rows[0][2]} if rows else None

    def approve(self, doc: str, version: str, admin: str) -> None:
        self.tables.run("INSERT INTO approvals VALUES (?,?,?,?) ON CONFLICT (doc) DO UPDATE SET version = EXCLUDED.version, "
                        "principal = EXCLUDED.principal, ts = EXCLUDED.ts", (doc, version, admin, now()))

    def approved(self) -> dict[str, str]:
        """Approved documents -> the version approved."""
        return {r[0]: r[1] for r in self.tables.run("SELECT doc, version FROM approvals")}

    def recent_queries(self, limit: int = 200) -> list[str]:
        """The last ``limit`` distinct questions asked (canonical, redacted: what the audit shows)."""
        rows = self.tables.run("SELECT query FROM audit WHERE action IN ('query', 'search', 'chat', 'answer') AND query != '' "
                               "GROUP BY query ORDER BY MAX(id) DESC LIMIT ?", (limit,))
        return [r[0] for r in rows]

    # ------------------------------------------------------------ audit trail

    def audit(self, principal: str, action: str, query: str, hits: list[dict], decision: str, flags: list[str],
              raw: str = "") -> int:
        """Append a row; returns its id (for ``settle``)."""
        rows = self.tables.run(
            "INSERT INTO audit (ts, principal, action, query, hits, decision, flags, raw, request_id) "
            "VALUES (?,?,?,?,?,?,?,?,?) RETURNING id",
            (now(), principal, action, query, json.dumps(hits), decision, json.dumps(flags), raw, REQUEST_ID.get()))
        return int(rows[0][0])

    def fingerprint(self, text: str) -> str:
        """HMAC-SHA256 of ``text`` under this server's own key: lets an investigator holding
        the state file match a known query, while a leaked audit trail is no guessing oracle."""
        return hmac.new(self._audit_key, text.encode(), hashlib.sha256).hexdigest()

    def settle(self, row: int, decision: str, flags: list[str]) -> None:
        """The outcome of a row written before the answer was produced."""
        self.tables.run("UPDATE audit SET decision = ?, flags = ? WHERE id = ?", (decision, json.dumps(flags), row))

    def trail(self, limit: int = 100, principal: str | None = None) -> list[dict]:
        sql = "SELECT ts, principal, action, query, hits, decision, flags, raw, request_id FROM audit"
        args: tuple = ()
        if principal:
            sql, args = sql + " WHERE principal = ?", (principal,)
        rows = self.tables.run(sql + " ORDER BY id DESC LIMIT ?", (*args, limit))
        return [{"ts": r[0], "principal": r[1], "action": r[2], "query": r[3], "hits": json.loads(r[4]),
                 "decision": r[5], "flags": json.loads(r[6]), "raw": r[7], "request_id": r[8]} for r in rows]
