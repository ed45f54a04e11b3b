"""``microrag ingest | delete | check | documents`` - the persistent index.

``ingest`` adds and updates documents incrementally (unchanged files are skipped,
``--prune`` removes documents whose files are gone), ``delete`` removes documents by
path, ``check`` verifies the index's integrity (exit 1 on a problem), ``documents``
lists what is indexed with label and provenance. ``ingest``, ``delete`` and
``documents`` take ``--target URL`` to work on a server's index instead (uploads go
through its review queue unless the key is trusted).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..client import Client, Upload
from ..config import override
from ..errors import CorpusError, MicroRAGError
from ..ingest import IngestReport, Progress, delete_documents, ingest_paths
from ..load import iter_files
from ..store import default_location, open_store
from ..store.base import Store
from ..types import Document
from ..watch import watch
from .options import add_dlp, add_index, add_output, add_preset, add_target, client_for, diag, preset_for, settings_for


def register(sub: argparse._SubParsersAction) -> None:
    """``microrag index ingest|delete|check|documents``, and each at the top level too
    (``microrag ingest``: the everyday spelling, kept as the documented one)."""
    group = sub.add_parser("index", help="the persistent index: ingest | delete | check | documents")
    _commands(group.add_subparsers(dest="action", metavar="ACTION", required=True))
    _commands(sub)


def _commands(sub: argparse._SubParsersAction) -> None:
    ing = sub.add_parser("ingest", help="add or update documents in the persistent index")
    ing.add_argument("paths", nargs="+", metavar="PATH", help="folders or files to ingest")
    ing.add_argument("--label", help="sensitivity label for these documents (default: front-matter 'label:', else public)")
    ing.add_argument("--prune", action="store_true", help="remove indexed documents whose files are gone")
    ing.add_argument("--watch", action="store_true",
                     help="after ingesting, keep following PATHs: re-ingest files as they are added, edited, renamed or "
                          "deleted (Ctrl-C stops; needs the 'watch' extra)")
    ing.add_argument("--collection", metavar="NAME",
                     help="name these paths' collection, the first segment of their ids (default: each folder's name)")
    ing.add_argument("--cluster", metavar="ADDRESS",
                     help="load, chunk and embed on a Ray cluster: its head's HOST:PORT (e.g. head:6379), "
                          "ray://head:10001 (Ray Client) or auto; this process writes the index. Every node needs the "
                          "package and the PATHs at the same place (needs the 'cluster' extra)")
    ing.add_argument("--no-screen", dest="screen", action="store_false",
                     help="index every document as it is; by default one that hides text from its reader, is stuffed "
                          "with keywords, asks readers for credentials or reads as instructions to a model is held: "
                          "reported and not indexed (its previous version stays), and the exit status is 1")
    add_dlp(ing)
    add_preset(ing)
    d = sub.add_parser("delete", help="remove documents from the index by doc path")
    d.add_argument("docs", nargs="+", metavar="DOC", help="doc path as shown by 'microrag documents'")
    c = sub.add_parser("check", help="verify the index's integrity (exit 1 on a problem)")
    docs = sub.add_parser("documents", help="list indexed documents with label and provenance")
    for p, run in ((ing, cmd_ingest), (d, cmd_delete), (c, cmd_check), (docs, cmd_documents)):
        add_index(p)
        if p is not c:  # check reads the index's files: there is nothing to check over HTTP
            add_target(p)
        add_output(p)
        p.set_defaults(run=run)


def _location(args: argparse.Namespace) -> str:
    return args.index or default_location()


def _existing(args: argparse.Namespace) -> Store:
    return open_store(_location(args), create=False)


def _print(args: argparse.Namespace, as_json: object, text: str) -> None:
    if args.json:
        json.dump(as_json, sys.stdout, indent=1)
        print()
    elif text:
        print(text)


def cmd_ingest(args: argparse.Namespace) -> int:
    if args.collection is not None and not args.collection.strip():
        raise MicroRAGError("--collection needs a name (letters, digits, '.', '_' or '-'); leave it out to use the folder's name")
    if args.cluster is not None:
        if args.target or args.watch:
            raise MicroRAGError(f"--cluster writes a local index or database: it does not go with "
                                f"{'--target' if args.target else '--watch'}")
        return _ingest_cluster(args)
    client = client_for(args)
    if client is not None:
        with client:
            return _ingest_remote(args, client)
    for given in args.paths:  # before anything is created: a typo leaves no empty index behind
        if not Path(given).exists():
            raise MicroRAGError(f"corpus path {given!r} does not exist; pass a folder or a file")
    store = open_store(_location(args), create=True)
    try:
        settings = override(settings_for(args, args.preset or preset_for(store.meta())), dlp=args.dlp)
        report = ingest_paths(store, args.paths, settings, label=args.label, prune=args.prune, progress=_progress(args),
                              collection=args.collection, screen=_screen if args.screen else None)
        _queue_held(args, store, report)
        _print(args, {**report.__dict__, "changes": report.changes}, _report_text(args, report))
        held = bool(report.held or report.refused)  # exit 1 once the rest is in: a script must notice what was left out
        if args.watch:
            if not args.quiet:
                diag(f"watching {', '.join(args.paths)} (Ctrl-C stops)")

            def each(r: IngestReport) -> None:
                _queue_held(args, store, r)
                _print(args, {**r.__dict__, "changes": r.changes}, _report_text(args, r, each=True))
            watch(store, args.paths, settings, each, label=args.label, screen=_screen if args.screen else None)
    finally:
        store.close()
    return 1 if held else 0


def _ingest_cluster(args: argparse.Namespace) -> int:
    """``ingest --cluster``: Ray workers prepare and embed; this process writes (``cluster.py``).
    The cluster is joined before the index is opened: an unreachable one leaves nothing behind."""
    from .. import cluster

    cluster.connect(args.cluster.strip())
    try:
        store = open_store(_location(args), create=True)
        try:
            settings = override(settings_for(args, args.preset or preset_for(store.meta())), dlp=args.dlp)
            report = cluster.ingest_cluster(store, args.paths, settings, label=args.label, prune=args.prune,
                                            progress=_progress(args), collection=args.collection,
                                            screen=_screen if args.screen else None)
            _queue_held(args, store, report)
        finally:
            store.close()
    finally:
        cluster.disconnect()
    _print(args, {**report.__dict__, "changes": report.changes}, _report_text(args, report))
    return 1 if report.held or report.refused else 0  # as a local ingest: the rest is in, a script must notice what was not


def _progress(args: argparse.Namespace) -> bool | Progress:
    if args.quiet:
        return False
    return True if sys.stderr.isatty() else every(PROGRESS_SECONDS)


PROGRESS_SECONDS = 10.0  # without a terminal (logs, CI): one progress line at most this often


def every(seconds: float) -> Progress:
    """A progress callback that writes one line on stderr at most every ``seconds``."""
    last = [time.monotonic()]

    def tell(done: int, total: int, chunks: int) -> None:
        if time.monotonic() - last[0] >= seconds:
            last[0] = time.monotonic()
            diag(f"ingesting: {done}/{total} files ({100 * done // max(total, 1)}%), {chunks:,} chunks embedded")
    return tell


def _report_text(args: argparse.Namespace, report: IngestReport, each: bool = False) -> str:
    """The report's lines; ``each`` names every document added, changed or removed (--watch)."""
    named = [f"{what}: {d}" for what, docs in (("added", report.added), ("changed", report.changed),
                                                ("removed", report.removed)) for d in docs] if each else []
    held = [f"held: {d}: {'; '.join(why)}" for d, why in sorted(report.held.items())]
    held += [f"kept out: {d}: rejected in review by {who} (a changed file is screened again)"
             for d, who in sorted(report.rejected.items())]
    held += [f"refused: {what}: {why}" for what, why in sorted(report.refused.items())]
    if report.held:
        held.append("held documents were not indexed: list them with 'microrag review', then 'microrag review release "
                    "FILE' (or reject FILE)")
    return "\n".join([*named, *report.dlp_lines(), *(f"gone: {d} (its file is gone; --prune removes it)" for d in report.gone),
                      *held, f"{_location(args)}: {report.summary()}"])


def _queue_held(args: argparse.Namespace, store: Store, report: IngestReport) -> None:
    """Put what screening held in the review queue beside the index (``microrag review``), with an
    audit row each; a file a reviewer rejected at this version stays out without being queued."""
    if not report.held:
        return
    from .keys import server_state
    from .review import file_version, operator

    state = server_state(args.index, store)
    rejected = state.rejected()
    for doc, reasons in sorted(report.held.items()):
        origin = report.held_files.get(doc, "")
        try:
            version = file_version(origin) if origin else ""
        except OSError:
            version = ""
        if doc in rejected and rejected[doc][0] == version:
            # Decided already: kept out without a new hold (nor a failing exit) on every run.
            report.rejected[doc] = rejected[doc][1]
            del report.held[doc]
            continue
        state.queue(doc, args.label or "", operator(), {}, reasons, version, "", origin)
        state.audit(operator(), "ingest", doc, [], "held", reasons)


def _screen(doc: Document, file: Path) -> list[str]:
    from ..screen.content import screen_file  # the classifier loads only for ingests that screen

    return screen_file(doc, file)


def _uploads(paths: list[str], collection: str | None) -> list[tuple[Path, str]]:
    """(file, source name) for each file under ``paths``, named as a local ingest names it:
    ``<collection>/<path under the folder>``, the collection being the folder's name."""
    out = []
    for given in paths:
        root = Path(given)
        if not root.exists():
            raise CorpusError(f"corpus path {given!r} does not exist; pass a folder or a file")
        name = collection or (root.resolve().parent if root.is_file() else root.resolve()).name
        out += [(file, f"{name}/{rel}" if name else rel) for file, rel in iter_files(root)]
    return out


def _upload_line(up: Upload) -> str:
    found = up.get("findings") or {}
    dlp = f"; dlp: {', '.join(f'{k} x{v}' for k, v in found.items())}" if found else ""
    flags = "".join(f"; {f}" for f in up.get("flags") or [])
    return f"{up['status']}: {up['doc']} ({up['label']}, {up['chunks']} chunks{dlp}{flags})"


def _ingest_remote(args: argparse.Namespace, client: Client) -> int:
    """``ingest --target``: each text file uploaded to ``POST /ingest``, one line each as it lands."""
    files = _uploads(args.paths, args.collection)
    done: list[Upload] = []
    skipped: list[str] = []
    for file, source in files:
        try:
            text = file.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):  # PDF, Office: the server parses text uploads only
            skipped.append(str(file))
            if not args.quiet:
                diag(f"skipped {file}: not UTF-8 text (ingest PDF and Office files where the index lives)")
            continue
        if not text.strip():
            skipped.append(str(file))
            continue
        up = client.ingest(source, text, label=args.label)
        done.append(up)
        if not args.json:
            print(_upload_line(up), flush=True)
    if not done:
        raise CorpusError(f"nothing to upload under {', '.join(args.paths)}: no non-empty text files")
    queued = sum(u["status"] == "quarantined" for u in done)
    _print(args, {"uploaded": done, "skipped": skipped},
           f"{client.display_url}: uploaded {len(done)} document(s), {len(done) - queued} live, {queued} waiting for an admin's review")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    client = client_for(args)
    if client is not None:
        with client:
            removed = [client.delete(doc)["deleted"] for doc in args.docs]
        _print(args, {"removed": removed}, f"removed {len(removed)} document(s): {', '.join(removed)}")
        return 0
    store = _existing(args)
    try:
        report = delete_documents(store, args.docs)
    finally:
        store.close()
    _print(args, {"removed": report.removed, "generation": report.generation},
           f"removed {len(report.removed)} document(s): {', '.join(report.removed)}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    store = _existing(args)
    try:
        problems = store.check()
        docs, gen = store.documents(), store.generation()
    finally:
        store.close()
    chunks = sum(d.n_chunks for d in docs.values())
    _print(args, {"ok": not problems, "problems": problems, "documents": len(docs), "chunks": chunks, "generation": gen},
           "".join(f"PROBLEM: {p}\n" for p in problems)
           + f"{'FAILED' if problems else 'OK'}: {len(docs)} documents, {chunks} chunks, generation {gen}")
    return 1 if problems else 0


def cmd_documents(args: argparse.Namespace) -> int:
    client = client_for(args)
    if client is not None:
        with client:
            listed = client.documents()
        _print(args, listed, "\n".join(f"{d['doc']}\t{d.get('n_chunks')} chunks\t{d.get('label')}\t{d.get('principal')}\t"
                                       f"{d.get('ingested_at')}" for d in listed))
        return 0
    store = _existing(args)
    try:
        docs = store.documents()
    finally:
        store.close()
    _print(args, [d.__dict__ for d in docs.values()],
           "\n".join(f"{d.doc}\t{d.n_chunks} chunks\t{d.label}\t{d.principal}\t{d.ingested_at}" for d in docs.values()))
    return 0
