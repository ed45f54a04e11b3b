"""Persistence behind one interface: ``sqlite`` (embedded default), ``postgres`` (scale-out).

``open_store(location)`` picks the backend from the location: a
``postgresql://`` URI opens Postgres + pgvector, anything else is a folder (or
``.sqlite`` file) for the embedded store.
"""

from __future__ import annotations

from pathlib import Path

from ..config import DEFAULT_INDEX, index_location, pg_schema
from ..errors import MicroRAGError
from .base import DocRecord, DocUpdate, SearchableStore, Snapshot, Store


def default_location() -> str:
    """``$MICRORAG_INDEX`` or ``.microrag`` in the current directory (see ``config``)."""
    return index_location()


def open_store(location: str | Path | None = None, create: bool = True, standby: str | None = None) -> Store:
    """The store at ``location`` (default: :func:`default_location`). ``standby``: a PostgreSQL
    hot standby of it (a ``postgresql://`` URI, libpq's multi-host form allowed) that takes the reads."""
    loc = str(location or default_location())
    if loc.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresStore

        uri, schema = split_schema(loc)
        return PostgresStore(uri, schema=schema, read_uri=split_schema(standby)[0] if standby else None)
    if standby:
        raise MicroRAGError("--standby reads from a PostgreSQL standby: it needs a postgresql:// index")
    from .sqlite import SQLiteStore

    return SQLiteStore(Path(loc), create=create)


def split_schema(uri: str) -> tuple[str, str]:
    """``postgresql://...?schema=name`` -> (uri without it, name); default schema ``microrag``."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(uri)
    query = parse_qsl(parts.query)
    schema = next((v for k, v in query if k == "schema"), None) or pg_schema()
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema


def store_exists(location: str | Path | None = None) -> bool:
    """Whether an index already exists at ``location`` (Postgres URIs: assumed yes)."""
    loc = str(location or default_location())
    if loc.startswith(("postgresql://", "postgres://")):
        return True
    p = Path(loc)
    return (p / "index.sqlite").exists() or (p.suffix == ".sqlite" and p.exists())


__all__ = ["DEFAULT_INDEX", "DocRecord", "DocUpdate", "SearchableStore", "Snapshot", "Store", "default_location", "open_store",
           "store_exists"]
