"""Ingestion: bring a store in line with files on disk, incrementally and atomically.

In:  paths, a ``Store``, settings; optional label, principal, ``prune``.
Out: an ``IngestReport`` (added / changed / unchanged / removed documents).

Unchanged documents (same text hash and label) are skipped; changed ones are
re-chunked and re-embedded; with ``prune`` documents whose files are gone are
removed. All chunking and embedding happen *before* the single write
transaction, so a crash at any point leaves the previous ingest intact. The
settings that shape stored data (chunker, sizes, embedder, dim) are recorded at
the first ingest and enforced afterwards.
"""

from __future__ import annotations

import getpass
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from . import guard
from .chunk import chunk_documents
from .config import Settings
from .errors import ConfigError, CorpusError
from .index.embed import make_embedder
from .load import load_documents
from .store.base import BOUND_SETTINGS, DocRecord, DocUpdate, Store
from .types import Document


@dataclass
class IngestReport:
    """What one ingest did, document by document."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    chunks_written: int = 0
    generation: int = 0
    findings: dict[str, dict[str, int]] = field(default_factory=dict)  # doc -> {kind: count}, never values

    @property
    def changes(self) -> int:
        return len(self.added) + len(self.changed) + len(self.removed)

    def summary(self) -> str:
        found = sum(sum(k.values()) for k in self.findings.values())
        dlp = f"; DLP: {found} finding(s) in {len(self.findings)} document(s)" if found else ""
        return (f"{len(self.added)} added, {len(self.changed)} changed, {len(self.unchanged)} unchanged, "
                f"{len(self.removed)} removed ({self.chunks_written} chunks written{dlp})")

    def dlp_lines(self) -> list[str]:
        """One line per document DLP changed: its path and the kinds found, never a value."""
        return [f"DLP {doc}: " + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
                for doc, kinds in sorted(self.findings.items())]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def bound_meta(settings: Settings, dim: int) -> dict[str, str]:
    """The settings an index is bound to, as stored strings."""
    meta = {k: str(getattr(settings, k)) for k in BOUND_SETTINGS}
    meta["dim"] = str(dim)
    return meta


def check_compatible(meta: dict[str, str], settings: Settings) -> None:
    """Refuse settings that would read (or write) the stored vectors and chunks wrongly."""
    if not meta.get("embedder"):
        return  # empty store: anything goes
    wanted = {k: str(getattr(settings, k)) for k in BOUND_SETTINGS}
    if settings.chunker != "chars":  # size/overlap only matter to the char window
        wanted.pop("size"), wanted.pop("overlap")
    else:
        wanted.pop("max_tokens")
    diff = [f"{k}={meta.get(k)} (asked {v})" for k, v in wanted.items() if meta.get(k) != v]
    if diff:
        raise ConfigError(
            f"this index was built with {', '.join(diff)}; query it with the settings it was built with "
            "(e.g. the same --preset) or ingest into a new --index")


def apply_dlp(doc: Document, mode: str, presidio: bool = False) -> tuple[Document, bool, dict[str, int]]:
    """(document to index, whether to label it restricted, finding counts by kind)."""
    if mode == "off":
        return doc, False, {}
    texts = [doc.text] + [c.text for c in doc.prechunked]
    results = [guard.redact(t, deep=presidio) for t in texts]
    counts = guard.summary([f for _, found in results for f in found])
    if not counts or mode == "label":
        return doc, bool(counts), counts
    pre = tuple(replace(c, text=r, end=c.start + len(r)) for c, (r, _) in zip(doc.prechunked, results[1:]))
    return replace(doc, text=results[0][0], prechunked=pre), False, counts


def guarded(doc: Document, settings: Settings, visible: bool = True) -> tuple[Document, bool, dict[str, int]]:
    """The one ingest policy every front end applies (CLI, server, library, ``--corpus`` runs):
    the stored form, then DLP. Returns (document, restrict, finding counts by kind)."""
    return apply_dlp(store_form(doc) if visible else doc, settings.dlp, settings.dlp_presidio)


STORE_FORM = "visible-1"  # bump when store_form changes what is stored


def store_form(doc: Document) -> Document:
    """The document as stored: ``guard.visible`` text (NFKC, no invisible characters).

    What the checks read and what the model is shown are then the same characters;
    text hidden in tag characters or variation selectors is gone, not merely unchecked.
    """
    if doc.text.isascii() and all(c.text.isascii() for c in doc.prechunked):
        return doc  # nothing to change (the common case)
    pre = tuple(replace(c, text=guard.visible(c.text), end=c.start + len(guard.visible(c.text))) for c in doc.prechunked)
    return replace(doc, text=guard.visible(doc.text), prechunked=pre)


def _doc_label(doc: Document, label: str | None) -> str:
    # An explicit flag wins; then the document's own front-matter; else public.
    return label or dict(doc.meta).get("label") or dict(doc.meta).get("sensitivity") or "public"


def ingest_documents(
    store: Store,
    docs: Iterable[Document],
    settings: Settings,
    label: str | None = None,
    principal: str | None = None,
    origins: dict[str, str] | None = None,
    prune_missing: Iterable[str] = (),
    progress: bool = False,
    visible: bool = True,
) -> IngestReport:
    """Write ``docs`` into ``store`` (skipping unchanged ones) plus deletions, atomically.

    ``visible=False`` stores text as sent, invisible characters and all (only the lab
    baseline server asks for it, to show what ``store_form`` prevents)."""
    settings.validate()
    meta = store.meta()
    check_compatible(meta, settings)
    existing = store.documents()
    embedder = make_embedder(settings.embedder)
    principal = principal or f"operator:{_user()}"
    now = datetime.now(UTC).isoformat(timespec="seconds")
    report = IngestReport()
    updates: list[DocUpdate] = []
    seen: set[str] = set()
    docs = list(docs)
    from tqdm import tqdm  # a bar on stderr, only when asked (the CLI asks on a TTY)

    for doc in tqdm(docs, desc="ingesting", unit="doc", disable=not progress, leave=False):
        if doc.path in seen:
            raise CorpusError(f"two inputs both map to document {doc.path!r}; ingest them separately or rename one")
        seen.add(doc.path)
        # The DLP mode is part of the hash: switching it re-processes every document.
        # So is the stored form's version: documents stored before it re-process once.
        text_hash = sha256(doc.text + "\x00" + "\x00".join(c.text for c in doc.prechunked) + "\x00" + settings.dlp
                           + "\x00" + STORE_FORM)
        doc_label = _doc_label(doc, label)
        old = existing.get(doc.path)
        if old and old.content_hash == text_hash and old.label == doc_label:
            report.unchanged.append(doc.path)
            continue
        doc, restrict, found = guarded(doc, settings, visible)
        if found:
            report.findings[doc.path] = found
        if restrict and label is None:
            doc_label = "restricted"
        chunks = chunk_documents([doc], settings.chunker, settings.size, settings.overlap, settings.max_tokens,
                                 embedder.count_tokens)
        vectors = embedder.embed([c.text for c in chunks]) if chunks else np.zeros((0, embedder.dim), np.float32)
        record = DocRecord(doc.path, text_hash, doc_label, principal, (origins or {}).get(doc.path, ""), now, len(chunks))
        updates.append(DocUpdate(record, chunks, vectors.astype(np.float32), [sha256(c.text) for c in chunks]))
        (report.changed if old else report.added).append(doc.path)
        report.chunks_written += len(chunks)
    deletes = sorted(d for d in set(prune_missing) if d in existing and d not in seen)
    report.removed = deletes
    if updates or deletes or not meta:
        report.generation = store.apply(updates, deletes, bound_meta(settings, embedder.dim))
    else:
        report.generation = store.generation()
    return report


def ingest_paths(
    store: Store,
    paths: Iterable[str | Path],
    settings: Settings,
    label: str | None = None,
    prune: bool = False,
    principal: str | None = None,
    progress: bool = False,
) -> IngestReport:
    """Ingest every readable file under ``paths``; with ``prune``, drop vanished files' documents."""
    folders = [Path(p) for p in paths]
    docs = load_documents(folders, settings.markup)
    if not docs:
        raise CorpusError(f"no readable documents under {', '.join(map(str, folders))}; supported: .md .txt .html .pdf .jsonl")
    roots = [str(p.resolve()) for p in folders]
    origins = {d.path: _origin(folders, dict(d.meta).get("from_file", d.path)) for d in docs}
    existing = store.documents()
    for d in docs:  # a .jsonl record may not take over a document another file provides
        old, source = existing.get(d.path), dict(d.meta).get("from_file")
        if source and old is not None and old.origin and old.origin != origins[d.path]:
            raise CorpusError(f"{source}: a record claims document {d.path!r}, which comes from {Path(old.origin).name}; "
                              "records may only name documents of their own file (rename the record's \"doc\")")
    missing: list[str] = []
    if prune:
        # Gone = came from one of these roots but is not among what loads now
        # (deleted, emptied, or no longer readable - the loader warned about those).
        loaded = {d.path for d in docs}
        for rec in store.documents().values():
            if rec.origin and any(_under(rec.origin, r) for r in roots) and rec.doc not in loaded:
                missing.append(rec.doc)
    return ingest_documents(store, docs, settings, label, principal, origins, missing, progress=progress)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _origin(paths: list[Path], doc: str) -> str:
    for p in paths:
        candidate = p / doc if p.is_dir() else p
        if candidate.exists():
            return str(candidate.resolve())
    return ""


def delete_documents(store: Store, docs: Iterable[str]) -> IngestReport:
    """Remove documents by doc path; unknown names are an error that names them."""
    docs = list(docs)
    existing = store.documents()
    unknown = [d for d in docs if d not in existing]
    if unknown:
        raise CorpusError(f"no such document(s) in the index: {', '.join(unknown)} (see: microrag documents)")
    report = IngestReport(removed=docs)
    report.generation = store.apply([], docs, store.meta())
    return report


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return "unknown"
