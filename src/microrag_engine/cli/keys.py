"""``microrag keys add | list | revoke`` - the server's API keys.

Keys live beside the index (``<index>/keys.sqlite``; ``.microrag-server/`` for a
PostgreSQL index), stored as SHA-256 hashes: ``add`` prints a key once.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import MicroRAGError
from ..server.auth import ROLES, KeyStore
from ..server.state import ServerState
from ..server.tables import PostgresTables
from ..store import default_location, open_store
from ..store.base import Store
from ..store.postgres import PostgresStore
from .options import add_index, add_output, diag


def register(sub: argparse._SubParsersAction) -> None:
    ky = sub.add_parser("keys", help="manage server API keys: add | list | revoke")
    ksub = ky.add_subparsers(dest="action", metavar="ACTION", required=True)
    ka = ksub.add_parser("add", help="create a key (printed once)")
    ka.add_argument("name", help="principal name; also the namespace of its uploads")
    ka.add_argument("--role", choices=ROLES, default="reader")
    ka.add_argument("--clearance", metavar="L1,L2", help="labels this key may read (public is always included)")
    ka.add_argument("--trusted", action="store_true", help="contributor uploads go live without review")
    kl = ksub.add_parser("list", help="list keys (never the keys themselves)")
    kr = ksub.add_parser("revoke", help="revoke a key by id or name")
    kr.add_argument("name", help="key id or principal name")
    for p, run in ((ka, cmd_add), (kl, cmd_list), (kr, cmd_revoke)):
        add_index(p)
        add_output(p, json=p is kl)
        p.set_defaults(run=run)


def server_dir(index: str | None) -> Path:
    """Where a server keeps its keys and state for ``index``."""
    return Path(".microrag-server") if is_postgres(index) else Path(index or default_location())


def is_postgres(index: str | None) -> bool:
    return (index or default_location()).startswith(("postgresql://", "postgres://"))


def server_state(index: str | None, store: Store) -> ServerState:
    """The review queue and audit trail a server on ``index`` keeps (in ``store``'s database
    for PostgreSQL): an operator's ingest and ``microrag review`` use the same ones."""
    return ServerState(PostgresTables(store) if isinstance(store, PostgresStore) else server_dir(index) / "server.sqlite")


def _keys(args: argparse.Namespace, create: bool = False) -> KeyStore:
    store = open_store(args.index) if is_postgres(args.index) else None
    if isinstance(store, PostgresStore):  # keys live in the database every replica reads
        return KeyStore(PostgresTables(store))
    path = server_dir(args.index) / "keys.sqlite"
    if not create and not path.exists():  # reading must not create anything
        raise MicroRAGError(f"no keys at {path.parent}; add one with: microrag keys add NAME --index {path.parent}")
    return KeyStore(path)


def cmd_add(args: argparse.Namespace) -> int:
    print(_keys(args, create=True).add(args.name, args.role, [x for x in (args.clearance or "public").split(",") if x], args.trusted))
    if not args.quiet:
        diag("store this key now: it is shown once and kept only as a hash")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    rows = _keys(args).list()
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    for k in rows:
        print(f"{k['id']}\t{k['name']}\t{k['role']}\t{k['clearance']}\t{'trusted' if k['trusted'] else 'untrusted'}"
              f"\t{'REVOKED' if k['revoked'] else 'active'}\t{k['created']}")
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    _keys(args).revoke(args.name)
    print(f"revoked {args.name}")
    return 0
