"""Keep an index in sync with folders: ``microrag ingest PATH --watch``.

In:  a store, the folders to follow, settings; file events from the OS (watchfiles).
Out: one ``IngestReport`` per batch of events, through a callback.

Each batch is applied as ingest applies anything - chunked and embedded first, then one
transaction - so a crash between batches (or inside one) leaves the last committed
state, and the next start's ingest catches up on whatever changed meanwhile. A file
added or edited is re-ingested on its own (it joins its folder's collection, with the
id the folder gives it); a file deleted takes its document out; a rename is both.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from .config import Settings
from .errors import CorpusError, MicroRAGError
from .ingest import IngestReport, Screen, delete_documents, ingest_paths
from .load import SUPPORTED, iter_files
from .store.base import Store


def _hidden(path: Path, roots: list[Path]) -> bool:
    """A dot-file or dot-folder below the watched folder (editors' swap files, .git) - the
    folder itself may well sit under one (~/.local/docs)."""
    for root in roots:
        if path.is_relative_to(root):
            return any(part.startswith(".") for part in path.relative_to(root).parts)
    return True  # outside every watched folder: not ours


def _batch(store: Store, changes: Iterable[tuple[str, Path]], settings: Settings, label: str | None,
           roots: list[Path], screen: Screen | None = None) -> IngestReport | None:
    """Apply one batch of (kind, path) events; ``None`` when nothing indexed changed."""
    paths = [p for kind, p in changes if kind != "deleted"]
    # a folder renamed or moved in arrives as one event for the folder: take the files in it
    files = [f for p in paths for f in ([p] if p.is_file() else (x for x, _ in iter_files(p)) if p.is_dir() else [])]
    touched = {f.resolve() for f in files if f.suffix.lower() in SUPPORTED and not _hidden(f.resolve(), roots)}
    removed = {p.resolve() for kind, p in changes if kind == "deleted" or not p.exists()}
    report = IngestReport()
    gone = sorted(r.doc for r in store.documents().values() if r.origin
                  and any(r.origin == str(p) or r.origin.startswith(str(p) + "/") for p in removed))
    if gone:
        report.removed = delete_documents(store, gone).removed
    if touched:
        try:
            written = ingest_paths(store, sorted(touched), settings, label=label, screen=screen)
        except CorpusError:  # every touched file unreadable or empty: the loader has said why
            written = IngestReport()
        report.added, report.changed, report.findings = written.added, written.changed, written.findings
        report.chunks_written, report.generation = written.chunks_written, written.generation
        report.held = written.held
    return report if report.changes or report.held else None


def watch(store: Store, paths: list[str | Path], settings: Settings, on_report: Callable[[IngestReport], None],
          label: str | None = None, stop: threading.Event | None = None, debounce_ms: int = 400,
          screen: Screen | None = None) -> None:
    """Follow ``paths`` until ``stop`` is set (or Ctrl-C), calling ``on_report`` after each change.

    The folders must have been ingested first (their collections known), so a new file gets
    the same id a full ingest of its folder would give it."""
    try:
        from watchfiles import Change
        from watchfiles import watch as file_events
    except ImportError:
        raise MicroRAGError("--watch needs its extra: pip install 'microrag-engine[watch]'") from None
    kinds = {Change.added: "added", Change.modified: "modified", Change.deleted: "deleted"}
    roots = [Path(p).resolve() for p in paths]
    for events in file_events(*paths, stop_event=stop, debounce=debounce_ms, raise_interrupt=False):
        report = _batch(store, [(kinds[c], Path(p)) for c, p in events], settings, label, roots, screen)
        if report is not None:
            on_report(report)
