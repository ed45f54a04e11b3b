"""``microrag review [list] | release FILE... | reject FILE...`` - what the operator's ingest held.

``microrag ingest`` screens every file (hidden text that is itself an attack, stuffing,
requests for credentials, instructions to a model); a file it holds is not indexed and waits
in the review queue the server keeps beside the index (the same queue and audit trail as
``GET /review``), with its reasons and the passages that caused them. ``release`` ingests
that one file unscreened (its content must still be the version that was held), ``reject``
keeps it out: the next ingest holds it again without queueing it. Each decision leaves an
audit row. FILE is a path or a document id as ``review`` lists it; ``--all`` takes every entry.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import json
import sys
from pathlib import Path

from ..config import override
from ..errors import MicroRAGError
from ..ingest import ingest_paths
from ..server.state import ServerState
from ..store import default_location, open_store
from ..store.base import Store
from .keys import server_state
from .options import add_dlp, add_index, add_output, add_preset, diag, preset_for, settings_for


def register(sub: argparse._SubParsersAction) -> None:
    rv = sub.add_parser("review", help="files the ingest held for review: list | release FILE... | reject FILE...")
    rsub = rv.add_subparsers(dest="action", metavar="ACTION")
    # The action's options default to "not given", so `review --index DIR ACTION` keeps what the
    # review command itself was given (argparse lets a subparser's defaults overwrite it otherwise).
    quiet = argparse.SUPPRESS
    rl = rsub.add_parser("list", help="list held files with their reasons (the default)", argument_default=quiet)
    decisions = []
    for name, run, what in (("release", cmd_release, "ingest these held files as they are, unscreened"),
                            ("reject", cmd_reject, "keep these held files out of the index")):
        p = rsub.add_parser(name, help=what, argument_default=quiet)
        p.add_argument("files", nargs="*", metavar="FILE", help="a held file's path or document id (see: microrag review)")
        p.add_argument("--all", action="store_true", help="every file waiting for review")
        p.set_defaults(run=run)
        decisions.append(p)
    for p in (rv, rl, *decisions):
        add_index(p)
        add_output(p)
    for p in decisions[:1]:
        add_dlp(p)
        add_preset(p)
    rv.set_defaults(run=cmd_list, files=[], all=False, preset=None, chunker=None, dlp=None)
    rl.set_defaults(run=cmd_list)


def operator() -> str:
    try:
        return f"operator:{getpass.getuser()}"
    except Exception:  # no passwd entry in some containers
        return "operator:unknown"


def file_version(path: str) -> str:
    """What a held file's review entry names as its version: the SHA-256 of its bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _open(args: argparse.Namespace) -> tuple[Store, ServerState]:
    location = args.index or default_location()
    if not location.startswith(("postgresql://", "postgres://")) and not Path(location).exists():
        raise MicroRAGError(f"no index at {location}; ingest first: microrag ingest PATH --index {location}")
    store = open_store(location)
    return store, server_state(args.index, store)


def held_entries(state: ServerState) -> list[dict]:
    """The queue's entries an operator's ingest made (a file path each; uploads have none)."""
    return [e for e in state.pending() if e["origin"]]


def cmd_list(args: argparse.Namespace) -> int:
    store, state = _open(args)
    try:
        entries = held_entries(state)
    finally:
        store.close()
    if args.json:
        json.dump(entries, sys.stdout, indent=1)
        print()
        return 0
    for e in entries:
        print(f"{e['doc']}\t{e['origin']}\theld {e['submitted']} by {e['principal']}")
        for why in e["flags"]:
            print(f"  - {why}")
    if not args.quiet:
        diag(f"{len(entries)} file(s) held for review" + ("; release: microrag review release FILE, reject: microrag "
                                                          "review reject FILE" if entries else ""))
    return 0


def _chosen(args: argparse.Namespace, entries: list[dict]) -> list[dict]:
    if args.all == bool(args.files):
        raise MicroRAGError("name the held files (paths or document ids, see: microrag review) or pass --all")
    if args.all:
        return entries
    out = []
    for given in args.files:
        path = str(Path(given).resolve()) if Path(given).exists() else None
        match = [e for e in entries if e["doc"] == given or (path is not None and e["origin"] == path)]
        if not match:
            raise MicroRAGError(f"{given!r} is not waiting for review (see: microrag review)")
        out += [e for e in match if e not in out]
    return out


def cmd_release(args: argparse.Namespace) -> int:
    store, state = _open(args)
    try:
        chosen = _chosen(args, held_entries(state))
        settings = override(settings_for(args, args.preset or preset_for(store.meta())), dlp=args.dlp)
        for e in chosen:  # every one checked before any goes in: a changed file stops the release
            if not Path(e["origin"]).is_file():
                raise MicroRAGError(f"{e['origin']} (held as {e['doc']}) is gone; nothing to release")
            if file_version(e["origin"]) != e["version"]:
                raise MicroRAGError(f"{e['origin']} changed since it was held; ingest it again to screen this version")
        for e in chosen:
            report = ingest_paths(store, [e["origin"]], settings, label=e["label"] or None, principal=operator())
            went_in = {*report.added, *report.changed, *report.unchanged}
            if e["doc"] not in went_in:
                raise MicroRAGError(f"{e['origin']} was ingested as {', '.join(sorted(went_in)) or 'nothing'}, not as "
                                    f"{e['doc']}: ingest its folder again to screen it under its id")
            state.take(e["doc"])
            state.approve(e["doc"], e["version"], operator())
            state.audit(operator(), "review", e["doc"], [], "release", e["flags"])
            print(f"released {e['doc']} ({report.summary()})")
    finally:
        store.close()
    return 0


def cmd_reject(args: argparse.Namespace) -> int:
    store, state = _open(args)
    try:
        for e in _chosen(args, held_entries(state)):
            state.take(e["doc"])
            state.reject(e["doc"], e["version"], operator())
            state.audit(operator(), "review", e["doc"], [], "reject", e["flags"])
            print(f"rejected {e['doc']} (the next ingest keeps it out without asking again)")
    finally:
        store.close()
    return 0
