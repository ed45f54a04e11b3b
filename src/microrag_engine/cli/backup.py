"""``microrag backup DEST | restore SRC`` - a consistent copy of a live folder index, and its return.

``backup`` copies every SQLite database of the index (the store, the server's keys, review
queue and audit trail) with SQLite's online backup API while a server may be writing, and writes
a manifest with each file's checksum; derived caches are left out and rebuilt on first open.
``restore`` checks a backup (checksums, ``PRAGMA integrity_check``, the store's counts) and
installs it by rename; it replaces an existing index only with ``--force``, keeping the old one
beside it. The logic is ``store/backup.py``; a PostgreSQL index is pg_dump's (docs/operating/backup.md).
"""

from __future__ import annotations

import argparse
import json
import sys

from .. import __version__
from ..store import default_location
from ..store.backup import backup, restore
from .options import add_index, add_output, diag


def register(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser("backup", help="copy a live folder index (store, keys, review queue, audit trail) into DEST")
    b.add_argument("dest", metavar="DEST", help="a new folder (or an empty one) for the backup")
    r = sub.add_parser("restore", help="check a backup and install it as the index")
    r.add_argument("src", metavar="SRC", help="a folder written by: microrag backup")
    r.add_argument("--force", action="store_true",
                   help="replace an existing index (the old one is kept as DIR.replaced-<time>)")
    for p, run in ((b, cmd_backup), (r, cmd_restore)):
        add_index(p)
        add_output(p)
        p.set_defaults(run=run)


def cmd_backup(args: argparse.Namespace) -> int:
    index = args.index or default_location()
    report = backup(index, args.dest, __version__)
    if args.json:
        json.dump({"dest": str(report.dest), "generation": report.generation, "documents": report.documents,
                   "chunks": report.chunks, "files": report.files, "skipped": report.skipped}, sys.stdout, indent=1)
        print()
    else:
        print(f"backed up {index} to {report.dest}: {report.documents} documents, {report.chunks} chunks, generation "
              f"{report.generation} ({', '.join(report.files)})")
    if not args.quiet:
        for name, why in report.skipped.items():
            diag(f"left out {name}: {why}")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    index = args.index or default_location()
    report = restore(args.src, index, force=args.force)
    replaced = str(report.replaced) if report.replaced else None
    if args.json:
        json.dump({"index": str(report.index), "generation": report.generation, "documents": report.documents,
                   "chunks": report.chunks, "files": report.files, "replaced": replaced}, sys.stdout, indent=1)
        print()
    else:
        print(f"restored {args.src} into {report.index}: {report.documents} documents, {report.chunks} chunks, generation "
              f"{report.generation} ({', '.join(report.files)})"
              + (f"; the index that was there is kept as {replaced}" if replaced else ""))
    if not args.quiet:
        diag("derived files (BM25, vectors, graphs) are rebuilt on the first open" + (
            f"; remove {replaced} once the restore is checked" if replaced else ""))
    return 0
