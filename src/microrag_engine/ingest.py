"""Ingestion: bring a store in line with files on disk, incrementally and atomically.

In:  paths, a ``Store``, settings; optional label, principal, ``prune``.
Out: an ``IngestReport`` (added / changed / unchanged / removed documents).

Unchanged documents (same text hash and label) are skipped; changed ones are
re-chunked and re-embedded; with ``prune`` documents whose files are gone are
removed. Documents stream: loading, embedding and writing overlap, and memory
stays bounded whatever the corpus size. Every document lands whole: an ingest of
up to ``COMMIT_CHUNKS`` chunks is one transaction (a crash leaves the previous
state intact); a larger one commits in transactions of that size, and running it
again after a crash skips what landed and finishes the rest. The settings that
shape stored data (chunker, sizes, embedder, dim) are recorded at the first
ingest and enforced afterwards.
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import json
import queue
import secrets
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from . import guard, rx
from .chunk import TokenCounter, chunk_documents, page_starts
from .config import Settings
from .errors import CorpusError
from .index.embed import Embedder, make_embedder
from .load import SUPPORTED, iter_files, iter_tagged
from .runtime.tracing import span
from .store.base import DIGEST_KEY, FIELD_NAME, MAX_FIELD_CHARS, MAX_FIELDS, DocRecord, DocUpdate, Store, bound_meta, check_compatible
from .text import title_of
from .types import Chunk, Document

if TYPE_CHECKING:  # dlp compiles its patterns on import: a query never loads it
    from .dlp import Finding


@dataclass
class IngestReport:
    """What one ingest did, document by document."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)  # files gone, documents kept (no --prune)
    chunks_written: int = 0
    generation: int = 0
    findings: dict[str, dict[str, int]] = field(default_factory=dict)  # doc -> {kind: count}, never values
    held: dict[str, list[str]] = field(default_factory=dict)  # doc -> why screening kept it out (``screen=``)
    held_files: dict[str, str] = field(default_factory=dict)  # held doc -> the file it came from
    # held docs whose version a reviewer rejected: kept out as decided, not held again (``microrag review``)
    rejected: dict[str, str] = field(default_factory=dict)  # doc -> who rejected it
    # .jsonl records left out because they name a document another file provides: the rest of
    # the folder goes in (a third-party file must not block it), these are named, never indexed
    refused: dict[str, str] = field(default_factory=dict)  # "file: doc" -> why

    @property
    def changes(self) -> int:
        return len(self.added) + len(self.changed) + len(self.removed)

    def summary(self) -> str:
        found = sum(sum(k.values()) for k in self.findings.values())
        dlp = f"; DLP: {found} finding(s) in {len(self.findings)} document(s)" if found else ""
        gone = f"; {len(self.gone)} document(s) whose files are gone kept (--prune removes them)" if self.gone else ""
        held = f"; {len(self.held)} held by screening, not indexed" if self.held else ""
        held += f"; {len(self.rejected)} kept out, rejected in review" if self.rejected else ""
        held += f"; {len(self.refused)} record(s) refused" if self.refused else ""
        return (f"{len(self.added)} added, {len(self.changed)} changed, {len(self.unchanged)} unchanged, "
                f"{len(self.removed)} removed ({self.chunks_written} chunks written{dlp}{gone}{held})")

    def dlp_lines(self) -> list[str]:
        """One line per document DLP changed: its path and the kinds found, never a value."""
        return [f"DLP {doc}: " + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
                for doc, kinds in sorted(self.findings.items())]


# Why a document must not go live (``screen.content``), given it and the file it came from.
Screen = Callable[[Document, Path], list[str]]
# An ingest's progress without a terminal: (files or documents done, their total, chunks embedded).
Progress = Callable[[int, int, int], None]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_OWN_META = frozenset({"pages"})  # meta the loaders write about the text itself (offsets), not the author's


def _dlp_meta(meta: tuple[tuple[str, str], ...], presidio: bool) -> tuple[tuple[tuple[str, str], ...], list]:
    """Front matter through the same DLP as the text: each field read as the "key: value" line
    it was written as (so "db_password: zq7..." is a secret in its context), a field whose name
    holds a finding dropped. Filters match stored values, so a redacted value can no longer be
    recovered by globbing ``where``."""
    out, found = [], []
    for key, value in meta:
        if key in _OWN_META:
            out.append((key, value))
            continue
        named = guard.redact(key, deep=presidio)[1] or guard.redact(key.translate(_SEPARATORS), deep=presidio)[1]
        if named:  # a field named like a secret ("ghp_...: yes"): no name to keep it under
            found += named
            continue
        if not value:
            out.append((key, value))
            continue
        redacted, hits = guard.redact(f"{key}: {value}", deep=presidio)
        found += hits
        prefix = f"{key}: "
        out.append((key, (redacted[len(prefix):] if redacted.startswith(prefix) else redacted) if hits else value))
    return tuple(out), found


def apply_dlp(doc: Document, mode: str, presidio: bool = False) -> tuple[Document, bool, dict[str, int]]:
    """(document to index, whether to label it restricted, finding counts by kind). Every field
    of the document goes through it: text, pre-made chunks and front matter alike."""
    if mode == "off":
        return doc, False, {}
    texts = [doc.text] + [c.text for c in doc.prechunked]
    results = [guard.redact(t, deep=presidio) for t in texts]
    meta, in_meta = _dlp_meta(doc.meta, presidio)
    counts = guard.summary([f for _, found in results for f in found] + in_meta)
    if not counts or mode == "label":
        return doc, bool(counts), counts
    pre = tuple(replace(c, text=r, end=c.start + len(r)) for c, (r, _) in zip(doc.prechunked, results[1:]))
    return replace(doc, text=results[0][0], prechunked=pre, meta=meta), False, counts


def guarded(doc: Document, settings: Settings, visible: bool = True) -> tuple[Document, bool, dict[str, int]]:
    """The one ingest policy every front end applies (CLI, server, library, ``--corpus`` runs):
    the stored form, then DLP. Returns (document, restrict, finding counts by kind).

    A paged document (PDF) is guarded page by page, so the page offsets stay true after
    redaction and normalisation change lengths (and a finding never spans two pages)."""
    starts = page_starts(doc)
    if not starts or starts[0] != 0 or doc.prechunked:
        return apply_dlp(store_form(doc) if visible else doc, settings.dlp, settings.dlp_presidio)
    texts: list[str] = []
    offsets: list[int] = []
    counts: Counter[str] = Counter()
    restrict = False
    for a, b in zip(starts, [*starts[1:], len(doc.text)]):
        page = Document(doc.path, doc.text[a:b])
        kept, hold, found = apply_dlp(store_form(page) if visible else page, settings.dlp, settings.dlp_presidio)
        offsets.append(sum(len(t) for t in texts))
        texts.append(kept.text)
        counts.update(found)
        restrict = restrict or hold
    meta, in_meta = _dlp_meta(doc.meta, settings.dlp_presidio) if settings.dlp != "off" else (doc.meta, [])
    counts.update(guard.summary(in_meta))
    restrict = restrict or (bool(in_meta) and settings.dlp == "label")
    if settings.dlp == "label":
        meta = doc.meta  # labelled restricted, kept as written
    meta = tuple((k, ",".join(map(str, offsets)) if k == "pages" else v) for k, v in meta)
    return replace(doc, text="".join(texts), meta=meta), restrict, dict(counts)


STORE_FORM = "visible-1"  # bump when store_form changes what is stored
NAME_FORM = "names-dlp-2"  # bump when redacted_id changes an id: every file is read once more


def store_form(doc: Document) -> Document:
    """The document as stored: ``guard.visible`` text (NFKC, no invisible characters).

    What the checks read and what the model is shown are then the same characters;
    text hidden in tag characters or variation selectors is gone, not merely unchecked.
    """
    if doc.text.isascii() and all(c.text.isascii() for c in doc.prechunked):
        return doc  # nothing to change (the common case)
    pre = tuple(replace(c, text=guard.visible(c.text), end=c.start + len(guard.visible(c.text))) for c in doc.prechunked)
    return replace(doc, text=guard.visible(doc.text), prechunked=pre)


NAME_KEY = "name_key"  # store meta: the secret that makes a redacted name unique to its original; never shown
_EXT = rx.compile(r"^(.+?)((?:\.[A-Za-z0-9]{1,8})?)$")
_SEPARATOR_CHARS = "_.-+~=,;"
_SEPARATORS = str.maketrans(_SEPARATOR_CHARS, " " * len(_SEPARATOR_CHARS))
MAX_NAME_PROBES = 32  # "_" of one name read one at a time as a space, at most
# A segment in the form a redacted one takes: a file saved back under a name the index shows.
_REDACTED_FORM = rx.compile(r"^REDACTED-[a-z0-9_]+(?:-[a-z0-9_]+)*-[0-9a-f]{10}$")
NAME_KIND = "name"  # the "kind" of a name that only looked redacted: re-tagged, no finding


def name_key(meta: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The store's key for redacted names, and the store meta to write when it is new."""
    if meta.get(NAME_KEY):
        return meta[NAME_KEY], {}
    key = secrets.token_hex(16)
    return key, {NAME_KEY: key}


# Segments DLP found nothing in (a folder's name heads each of its files' ids: read once per
# run, not per file). Only clean ones are kept: a name that held a secret is never cached.
_CLEAN_SEGMENTS: set[tuple[str, bool, str, bool]] = set()
MAX_CLEAN_SEGMENTS = 4096


def _segment(part: str, last: bool, key: str, presidio: bool) -> tuple[str, tuple[Finding, ...]]:
    if (part, last, key, presidio) in _CLEAN_SEGMENTS:
        return part, ()
    out = _segment_read(part, last, key, presidio)
    if not out[1] and out[0] == part:
        if len(_CLEAN_SEGMENTS) >= MAX_CLEAN_SEGMENTS:
            _CLEAN_SEGMENTS.clear()
        _CLEAN_SEGMENTS.add((part, last, key, presidio))
    return out


def _segment_read(part: str, last: bool, key: str, presidio: bool) -> tuple[str, tuple[Finding, ...]]:
    """One path segment as written, as DLP leaves it, and its findings. A name is read as
    written; with its separators as spaces ("backup_AKIA....txt": the key is a word of its own
    there); and with each "_" alone as a space (a key whose own form holds "_", "old_sk_live_...":
    the other separators already end a word). A segment with any finding is replaced whole,
    keeping only a file's extension, by ``REDACTED-<kinds>-<tag>``: the tag (a keyed hash of the
    segment as written) keeps two files named like different keys apart, the same file under
    the same id in every run and on every worker, and tells nothing of the value without the
    store's key. A name already in that form (a file saved back under the id it was shown as)
    is tagged again, so it never takes another file's id."""
    m = _EXT.match(part) if last else None
    # Only a format the loaders read is an extension to keep: a record may name "password.Zq7x".
    stem, ext = (m.group(1), m.group(2)) if m and m.group(2).lower() in SUPPORTED else (part, "")
    tag = hmac.new(key.encode(), part.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:10]
    if _REDACTED_FORM.match(stem):
        return f"REDACTED-{NAME_KIND}-{tag}{ext}", ()
    # Read whole (an extension may end the value: "alice@corp.com.md") and without the
    # extension (DLP reads "password=x.md" as a path, "password=x" as a credential).
    found = guard.redact(part, deep=presidio)[1]
    unders = [i for i, c in enumerate(part) if c == "_"][:MAX_NAME_PROBES]
    spaced = part.translate(_SEPARATORS)
    probes = ([stem] if stem != part else []) + ([spaced] if spaced != part else []) + [
        f"{part[:i]} {part[i + 1:]}" for i in unders]
    for probe in probes:
        seen = {f.kind for f in found}
        found += [f for f in guard.redact(probe, deep=presidio)[1] if f.kind not in seen]
    if not found:
        return part, ()
    kinds = "-".join(sorted({f.kind for f in found})[:2])
    return f"REDACTED-{kinds}-{tag}{ext}", tuple(found)


def redacted_id(name: str, key: str, presidio: bool = False) -> tuple[str, dict[str, int]]:
    """A name as written (a document's path, several segments) through the same DLP as the
    text (#33), and what was found in it (kinds and counts, never values); ``name`` itself
    when nothing is found. Only ever given names as written: an id it made is not read again."""
    parts = name.split("/")
    out: list[str] = []
    found: list[Finding] = []
    for i, part in enumerate(parts):
        red, hits = _segment(part, i == len(parts) - 1, key, presidio)
        out.append(red)
        found += hits
    return "/".join(out), guard.summary(found)


def stored_name(name: str, settings: Settings, key: str) -> tuple[str, dict[str, int]]:
    """``name`` as written -> the name its settings store it under, and what DLP found in it:
    under ``--dlp redact`` the redacted id (``redacted_id``); under ``label`` the name as written
    (its findings restrict the document); under ``off`` as written, nothing read."""
    if settings.dlp == "off":
        return name, {}
    safe, found = redacted_id(name, key, settings.dlp_presidio)
    return (safe if settings.dlp == "redact" else name), found


def dlp_named(doc: Document, settings: Settings, key: str) -> tuple[Document, dict[str, int]]:
    """``doc`` (named as written) under the id its settings store it by, and its name's findings."""
    name, found = stored_name(doc.path, settings, key)
    return (doc if name == doc.path else _renamed(doc, name)), found


_MARK = rx.compile(r"(?:^|/)REDACTED-([a-z0-9_]+(?:-[a-z0-9_]+)?)-[0-9a-f]{10}(?:\.|/|$)")


def name_findings(doc_id: str, settings: Settings) -> dict[str, int]:
    """What DLP found in the name ``doc_id`` is stored under (kinds and counts): read off the
    redacted segments under ``--dlp redact``, found again in the name as written under ``label``."""
    if settings.dlp == "label":
        return redacted_id(doc_id, "", settings.dlp_presidio)[1]
    if settings.dlp != "redact":
        return {}
    return dict(Counter(k for m in _MARK.finditer(doc_id) for k in m.group(1).split("-") if k != NAME_KIND))


def collection_of(doc_id: str, roots: dict[str, str]) -> str:
    """The collection of ``doc_id`` among those being written (its first segment, if one of them)."""
    head = doc_id.split("/", 1)[0]
    return head if f"{COLLECTION_KEY}{head}" in roots and "/" in doc_id else ""


# Meta that only says where a record came from, or that the label already holds, is not a filter field.
_NOT_FILTERS = frozenset({"from_file", "pages", "label", "sensitivity"})


_FIELD_NAME = rx.compile(FIELD_NAME)


def filterable(meta: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The filter fields a document keeps of its meta: names a filter can ask for, at most
    ``MAX_FIELDS`` of them (the title always kept), each value cut at ``MAX_FIELD_CHARS``."""
    kept, others = [], 0
    for k, v in meta:
        if k in _NOT_FILTERS or not _FIELD_NAME.fullmatch(k):
            continue
        if k != "title":
            others += 1
            if others >= MAX_FIELDS:  # one place is the title's
                continue
        kept.append((k, v[:MAX_FIELD_CHARS]))
    return tuple(kept)


def _doc_label(doc: Document, label: str | None) -> str:
    # An explicit flag wins; then the document's own front-matter; else public.
    return label or dict(doc.meta).get("label") or dict(doc.meta).get("sensitivity") or "public"


# A corpus streams through three stages that overlap: a thread loads, guards and chunks
# documents; the caller's thread embeds them in batches that cross document boundaries
# (short documents then batch as well as long ones); a second thread writes. Queues
# between them are bounded, so memory stays flat however large the corpus is.
EMBED_CHUNKS = 256  # chunks embedded together; the embedder still sorts them by length
COMMIT_CHUNKS = 4096  # chunks per write transaction; a smaller ingest lands in one transaction
QUEUE_DEPTH = 2 * EMBED_CHUNKS  # prepared documents waiting to be embedded, at most
FIRST_EMBED_CHUNKS = 32  # the first batch (see ``batch_chunks``)


def batch_chunks(formed: int) -> int:
    """Chunks gathered before batch number ``formed`` (0, 1, ...) is embedded: 32, 64, 128, then
    EMBED_CHUNKS. The embedder starts on the first few documents instead of idling until 256
    chunks are prepared (on 300 one-page files that wait was a tenth of the ingest's wall time);
    every ingest, local or on a cluster, forms its batches by this one rule."""
    return min(EMBED_CHUNKS, FIRST_EMBED_CHUNKS << min(formed, 30))  # the shift bounded: no huge int after many batches


@dataclass
class Prepared:
    """A changed document ready to embed: its record, chunks and what DLP found in it."""

    record: DocRecord
    chunks: list[Chunk]
    findings: dict[str, int]
    replaces: bool  # an older version is stored
    named_by: str = ""  # a .jsonl record's document: "file: doc as the record named it" (refused on a clash)
    stale: tuple[str, ...] = ()  # the same document stored under another form of its name, to remove


@dataclass(frozen=True)
class Plan:
    """What every document of one ingest shares: who writes, under which policy, against what."""

    settings: Settings
    existing: dict[str, DocRecord]
    label: str | None = None
    principal: str = "operator"
    now: str = ""
    roots: dict[str, str] = field(default_factory=dict)  # store meta being written (collection roots)
    visible: bool = True
    digest: str = ""  # the embedder build's digest: vectors from another build are stale
    name_key: str = ""  # the store's key for redacted names (``name_key``)

    def prepare(self, doc: Document, origin: str, counter: TokenCounter) -> Prepared | None:
        """``doc`` guarded and chunked, or ``None`` when the stored version is the same."""
        settings = self.settings
        text_hash = content_hash(doc, settings, self.digest)
        doc_label = _doc_label(doc, self.label)
        old = self.existing.get(doc.path)
        if old and old.content_hash == text_hash and old.label == doc_label and _same_fields(old, doc, settings):
            return None
        doc, restrict, found = guarded(doc, settings, self.visible)
        in_name = name_findings(doc.path, settings)
        found = dict(Counter(found) + Counter(in_name))
        restrict = restrict or (settings.dlp == "label" and bool(in_name))
        if restrict and self.label is None:
            doc_label = "restricted"
        chunks = chunk_documents([doc], settings.chunker, settings.size, settings.overlap, settings.max_tokens, counter)
        # Every record has a title (uploads too, not only files read by ``ingest_paths``):
        # filters and the page's suggested questions read it. Taken after DLP, from the stored text.
        meta = doc.meta if "title" in dict(doc.meta) else (*doc.meta, ("title", title_of(doc)))
        record = DocRecord(doc.path, text_hash, doc_label, self.principal, origin, self.now, len(chunks),
                           collection_of(doc.path, self.roots), filterable(meta))
        return Prepared(record, chunks, found, old is not None)


def _same_fields(old: DocRecord, doc: Document, settings: Settings) -> bool:
    """Whether ``old`` holds the filter fields ``doc``'s meta would be stored as now: a front-matter
    edit alone rewrites the document, and so does a record stored before its fields were bounded
    and went through DLP (#33). The text's title comes from the text, which the hash covers."""
    meta = _dlp_meta(doc.meta, settings.dlp_presidio)[0] if settings.dlp == "redact" else doc.meta
    titled = "title" in dict(doc.meta)
    return tuple(kv for kv in old.meta if titled or kv[0] != "title") == filterable(meta)


def content_hash(doc: Document, settings: Settings, digest: str) -> str:
    """What decides whether a stored document is unchanged: its text as sent, and the policy.
    The DLP mode is part of it: switching it re-processes every document. So is the stored
    form's version: documents stored before it re-process once. And the embedder build
    (``digest``): a new graph re-embeds each document on its next ingest."""
    return sha256(doc.text + "\x00" + "\x00".join(c.text for c in doc.prechunked) + "\x00" + settings.dlp
                  + "\x00" + STORE_FORM + "\x00" + digest)


def embed_prepared(items: list[Prepared], embedder: Embedder, landed: Callable[[int], None] | None = None) -> list[DocUpdate]:
    """Embed the chunks of ``items`` (``embed_texts``) and hand each document its vectors."""
    return attach_vectors(items, embed_texts([c.text for p in items for c in p.chunks], embedder, landed))


def embed_texts(texts: list[str], embedder: Embedder, landed: Callable[[int], None] | None = None) -> np.ndarray:
    """A group's vectors, in embedder calls of EMBED_CHUNKS texts (a big page's group is
    several), ``landed(n)`` after each. A vector can depend on its call's other texts
    (batching graphs), so every ingest, local or on a cluster, cuts a group the same way."""
    parts = []
    for at in range(0, len(texts), EMBED_CHUNKS):
        parts.append(embedder.embed(texts[at:at + EMBED_CHUNKS]).astype(np.float32))
        if landed is not None:
            landed(len(parts[-1]))
    return np.concatenate(parts) if parts else np.zeros((0, embedder.dim), np.float32)


def attach_vectors(items: list[Prepared], vectors: np.ndarray) -> list[DocUpdate]:
    """Each document of ``items`` with its rows of ``vectors`` (its chunks', in order)."""
    out, at = [], 0
    for p in items:
        n = len(p.chunks)
        out.append(DocUpdate(p.record, p.chunks, vectors[at:at + n], [sha256(c.text) for c in p.chunks]))
        at += n
    return out


class Writer:
    """Writes whole documents in transactions of about ``commit_chunks`` chunks, on its own
    thread so the next batch embeds meanwhile. Every document lands whole or not at all; an
    ingest killed midway keeps what it committed, and running it again skips those documents
    (their hashes match) and finishes the rest. Deletions land with the last transaction."""

    def __init__(self, store: Store, meta: dict[str, str], commit_chunks: int = COMMIT_CHUNKS) -> None:
        self.store, self.meta, self.commit_chunks = store, meta, commit_chunks
        self.pending: list[DocUpdate] = []
        self.generation = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="microrag-write")
        self._inflight: Future[int] | None = None

    def add(self, updates: Iterable[DocUpdate]) -> None:
        self.pending.extend(updates)
        if sum(len(u.chunks) for u in self.pending) >= self.commit_chunks:
            self._wait()  # one transaction in flight at most: memory stays bounded
            batch, self.pending = self.pending, []
            self._inflight = self._pool.submit(self.store.apply, batch, [], self.meta)

    def finish(self, deletes: list[str], force: bool = False) -> int:
        """Commit what is left with ``deletes``; the store's generation afterwards."""
        self._wait()
        self._pool.shutdown()
        if self.pending or deletes or force:
            self.generation = self.store.apply(self.pending, deletes, self.meta)
            self.pending = []
        return self.generation or self.store.generation()

    def abandon(self) -> None:
        """After a failure: let a transaction in flight end, drop what was not yet sent."""
        if self._inflight is not None:
            wait([self._inflight])
        self._pool.shutdown()
        self.pending = []

    def _wait(self) -> None:
        if self._inflight is not None:
            self.generation = self._inflight.result()
            self._inflight = None


def ingest_documents(
    store: Store,
    docs: Iterable[Document],
    settings: Settings,
    label: str | None = None,
    principal: str | None = None,
    origins: dict[str, str] | None = None,
    prune_others: bool = False,
    progress: bool | Progress = False,
    visible: bool = True,
    extra_meta: dict[str, str] | None = None,
) -> IngestReport:
    """Write ``docs`` into ``store`` (skipping unchanged ones), each under the id its name is
    stored by (``dlp_named``); ``prune_others`` removes every other stored document.

    ``visible=False`` stores text as sent, invisible characters and all (only the lab
    baseline server asks for it, to show what ``store_form`` prevents)."""
    docs = list(docs) if not isinstance(docs, list) else docs
    key, new_key = name_key(store.meta())
    named = [dlp_named(d, settings, key)[0] for d in docs]
    ids = {d.path for d in named}
    pairs = ((n, (origins or {}).get(d.path, "")) for n, d in zip(named, docs))

    def deletions() -> list[str]:
        return [d for d in store.documents() if d not in ids] if prune_others else []

    return stream_documents(store, pairs, settings, label, principal, deletions, progress, visible,
                            {**(extra_meta or {}), **new_key}, total=len(docs))


def stream_documents(
    store: Store,
    docs: Iterable[tuple[Document, str] | str],
    settings: Settings,
    label: str | None = None,
    principal: str | None = None,
    deletions: Callable[[], list[str]] = list,
    progress: bool | Progress = False,
    visible: bool = True,
    extra_meta: dict[str, str] | None = None,
    total: int = 0,
    done: Callable[[], int] | None = None,
    commit_chunks: int = COMMIT_CHUNKS,
    late_meta: Callable[[], dict[str, str]] | None = None,
) -> IngestReport:
    """The ingest pipeline over (document, origin) pairs, consumed once, in order; a bare id
    among them is a document known to be unchanged (its file was not even parsed).

    ``deletions`` is called after the last document (it may depend on what was seen) and
    names documents to remove; so is ``late_meta``, store meta to write with the last
    transaction; ``total``/``done`` drive ``progress`` (default: documents)."""
    settings.validate()
    embedder = make_embedder(settings.embedder)
    run = Ingestion(store, settings, embedder.dim, label, principal, extra_meta, visible, commit_chunks)
    ticker = Ticker(progress, total, "doc" if done is None else "file")
    consumed = 0
    with span("microrag.ingest") as step:
        try:
            batch: list[Prepared] = []
            formed = 0
            for item in _prepared(docs, run.plan, embedder):
                consumed += 1
                ticker.tick(done() if done else consumed)
                if isinstance(item, str):
                    run.unchanged(item)
                    continue
                run.count(item.record.doc, len(item.chunks), item.findings, item.replaces)
                batch.append(item)
                if sum(len(p.chunks) for p in batch) >= batch_chunks(formed):
                    run.write(_embedded(batch, embedder, ticker))
                    batch, formed = [], formed + 1
            run.write(_embedded(batch, embedder, ticker))
            report = run.finish(deletions(), late_meta() if late_meta else None)
        except BaseException:
            run.abandon()
            raise
        finally:
            ticker.close()
        step.set(documents=consumed, changes=report.changes, chunks=report.chunks_written)
        return report


def _embedded(batch: list[Prepared], embedder: Embedder, ticker: Ticker) -> list[DocUpdate]:
    """``embed_prepared``, one span (``microrag.embed``) per batch (chunking ran on the loader
    thread); the progress line counts the chunks as each group lands."""
    with span("microrag.embed", documents=len(batch), chunks=sum(len(p.chunks) for p in batch)):
        return embed_prepared(batch, embedder, ticker.embedded)


class Ticker:
    """Progress for ``stream_documents`` and its kin: a bar on stderr when ``progress`` is
    ``True`` (the CLI asks on a TTY), else calls to ``progress(done, total, chunks)`` if it is
    callable: as each document is taken, and as each call of the embedder lands."""

    def __init__(self, progress: bool | Progress, total: int, unit: str) -> None:
        from tqdm import tqdm

        self.progress, self.total = progress, total
        self.bar = tqdm(total=total or None, desc="ingesting", unit=unit, disable=progress is not True, leave=False)
        self.chunks = 0

    def tick(self, done: int) -> None:
        self.bar.update(done - self.bar.n)
        if callable(self.progress):
            self.progress(done, self.total, self.chunks)

    def embedded(self, chunks: int) -> None:
        """``chunks`` more are embedded: the line moves within a big page too (a 1,400-chunk
        page lands in six calls of the embedder, not after one silent run on one file)."""
        self.chunks += chunks
        if chunks:
            self.bar.set_postfix_str(f"{self.chunks:,} chunks embedded")
        if callable(self.progress):
            self.progress(self.bar.n, self.total, self.chunks)

    def close(self) -> None:
        self.bar.close()


class Ingestion:
    """The writing side of one ingest, whoever prepares and embeds the documents (this
    process, or workers elsewhere: ``cluster.py``): the plan they follow, the report, and
    the ``Writer``. Feed it each document once, in a fixed order: ``unchanged`` or ``count``
    then ``write``; ``finish`` commits the rest with deletions, ``abandon`` after a failure."""

    def __init__(self, store: Store, settings: Settings, dim: int, label: str | None = None,
                 principal: str | None = None, extra_meta: dict[str, str] | None = None, visible: bool = True,
                 commit_chunks: int = COMMIT_CHUNKS) -> None:
        settings.validate()
        self.meta = store.meta()
        check_compatible(self.meta, settings)
        self.extra_meta = dict(extra_meta or {})
        key, new_key = name_key({**self.meta, **self.extra_meta})
        self.extra_meta.update(new_key)
        digest = make_embedder(settings.embedder).digest  # which build embeds (cached: loaded once per process)
        self.plan = Plan(settings, store.documents(), label, principal or f"operator:{_user()}",
                         datetime.now(UTC).isoformat(timespec="seconds"), self.extra_meta, visible, digest, key)
        self.report = IngestReport()
        # An index whose vectors another build made keeps saying so (embedder_drift) until
        # every one of its documents has been re-embedded, not merely the first ingested again.
        self.digest = digest
        self.stale = bool(self.meta.get("embedder")) and self.meta.get(DIGEST_KEY) != digest
        self.writer = Writer(store, {**bound_meta(settings, dim, "" if self.stale else digest), **self.extra_meta},
                             commit_chunks)

    def unchanged(self, doc: str) -> None:
        self.report.unchanged.append(doc)

    def count(self, doc: str, chunks: int, findings: dict[str, int], replaces: bool) -> None:
        """Report a changed document (before its vectors are written)."""
        if findings:
            self.report.findings[doc] = findings
        (self.report.changed if replaces else self.report.added).append(doc)
        self.report.chunks_written += chunks

    def write(self, updates: Iterable[DocUpdate]) -> None:
        self.writer.add(updates)

    def finish(self, deletions: Iterable[str], late_meta: dict[str, str] | None = None) -> IngestReport:
        report = self.report
        report.removed = sorted(d for d in set(deletions) if d in self.plan.existing and d not in _seen(report))
        self.writer.meta.update(late_meta or {})
        force = not self.meta or any(self.meta.get(k) != v for k, v in {**self.extra_meta, **(late_meta or {})}.items())
        # Unchanged means its hash, which includes the embedder's digest, matched: this build's vectors.
        current = {*report.added, *report.changed, *report.unchanged, *report.removed}
        if self.stale and all(d in current for d in self.plan.existing):
            self.writer.meta[DIGEST_KEY] = self.digest  # every vector is now this build's
            force = True
        report.generation = self.writer.finish(report.removed, force=force)
        return report

    def abandon(self) -> None:
        self.writer.abandon()


def _seen(report: IngestReport) -> set[str]:
    return {*report.added, *report.changed, *report.unchanged}


def clash(doc: str) -> CorpusError:
    """The error for a second input that maps to the same document id as an earlier one."""
    return CorpusError(f"two inputs both map to document {doc!r}; ingest them separately or rename one")


_END = object()


def _prepared(docs: Iterable[tuple[Document, str] | str], plan: Plan,
              counter: TokenCounter) -> Iterator[Prepared | str]:
    """``plan.prepare`` over ``docs`` on a loader thread, ahead of the caller by at most
    ``QUEUE_DEPTH`` documents; an unchanged document comes out as its id. Errors (a clash
    between two inputs, a parser's) surface in the caller's thread, in order."""
    out: queue.Queue[object] = queue.Queue(maxsize=QUEUE_DEPTH)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        seen: set[str] = set()
        try:
            for item in docs:
                if isinstance(item, str):  # unchanged, not parsed (``ingest_paths``'s quick check)
                    seen.add(item)
                    if not put(item):
                        return
                    continue
                doc, origin = item
                if doc.path in seen:
                    raise clash(doc.path)
                seen.add(doc.path)
                ready = plan.prepare(doc, origin, counter)
                if not put(doc.path if ready is None else ready):
                    return
            put(_END)
        except BaseException as exc:  # handed to the caller, raised there
            put(exc)

    loader = threading.Thread(target=work, name="microrag-load", daemon=True)
    loader.start()
    try:
        while True:
            item = out.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        loader.join(timeout=2.0)  # a daemon: one stuck in a long parse must not hold Ctrl-C


@dataclass(frozen=True)
class Source:
    """One path given to ``ingest_paths``: where its documents' ids are rooted."""

    path: Path  # as given, resolved
    root: Path  # the folder ids are relative to
    collection: str  # the ids' first segment ("" = unqualified), as stored
    written: str = ""  # the collection's name as written, where DLP stores another (#33)
    redacted: str = ""  # the collection's redacted name, whatever --dlp stores (finds older forms)

    def rest(self, doc: Document) -> str:
        """``doc``'s id after its collection, as written: a file's path under the collection's
        root; a .jsonl record names its own document, rooted at the collection whatever folder
        the file sits in."""
        base = self.path if self.path.is_dir() else self.path.parent
        sub = "" if self.path == self.root or dict(doc.meta).get("from_file") else base.relative_to(self.root).as_posix()
        return "/".join(p for p in ("" if sub == "." else sub, doc.path) if p)

    def doc_id(self, doc: Document) -> str:
        """``doc``'s id with every name as written (the collection's too)."""
        return "/".join(p for p in (self.written or self.collection, self.rest(doc)) if p)


COLLECTION_KEY = "collection:"  # store meta: collection name -> the folder its ids are rooted at
_COLLECTION_NAME = rx.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def collections(meta: dict[str, str]) -> dict[str, str]:
    """Collection name -> root folder, as recorded in a store."""
    return {k[len(COLLECTION_KEY):]: v for k, v in meta.items() if k.startswith(COLLECTION_KEY)}


def resolve_source(path: Path, name: str | None, known: dict[str, str], existing: dict[str, DocRecord],
                   settings: Settings, key: str) -> Source:
    """Where ``path``'s documents belong. A folder is a collection named ``name`` or after
    the folder; a file under a known collection's folder joins it (same id as when the folder
    is ingested); any other file is a collection named after its own folder. A name taken by
    another folder is refused. Folders indexed before collections existed keep their
    unqualified ids, so re-ingesting them stays idempotent."""
    path = path.resolve()
    if name is not None and name != "" and not _COLLECTION_NAME.match(name):
        raise CorpusError(f"invalid collection name {name!r}: use letters, digits, '.', '_' or '-' (up to 64)")
    if name is None:  # a file or subfolder of a folder already ingested joins its collection, same ids
        for known_name, folder in sorted(known.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            if _under(str(path), folder):
                return _collection(Source(path, Path(folder), known_name), settings, key)
    root = path if path.is_dir() else path.parent
    if name is None and not known and any(not r.collection and r.origin and _under(r.origin, str(root)) for r in existing.values()):
        name = ""  # indexed before collections: keep its ids
    name = root.name if name is None else name
    source = _collection(Source(path, root, name), settings, key)
    name = source.collection
    if name and known.get(name) not in (None, str(root)):
        raise CorpusError(f"collection {name!r} is the folder {known[name]}, not {root}; "
                          f"ingest this one under another name with --collection NAME")
    return source


def _collection(source: Source, settings: Settings, key: str) -> Source:
    """``source`` with its collection's name as stored: through DLP as a document's name (#33).
    A name already stored in the redacted form (a known collection's) is kept as it is. Read
    once per source: each document's older name forms are made from ``redacted``."""
    if not source.collection or _REDACTED_FORM.match(source.collection):
        return replace(source, redacted=source.collection)
    safe = _segment(source.collection, False, key, settings.dlp_presidio)[0]
    if settings.dlp != "redact" or safe == source.collection:
        return replace(source, redacted=safe)
    return replace(source, collection=safe, written=source.collection, redacted=safe)


def ingest_paths(
    store: Store,
    paths: Iterable[str | Path],
    settings: Settings,
    label: str | None = None,
    prune: bool = False,
    principal: str | None = None,
    progress: bool | Progress = False,
    collection: str | None = None,
    screen: Screen | None = None,
) -> IngestReport:
    """Ingest every readable file under ``paths``. Ids carry their collection (``resolve_source``;
    ``collection=""`` keeps them unqualified, as ``--corpus`` runs do). Documents of these
    folders whose files are gone are reported, and removed with ``prune``. ``screen(doc, file)``
    returns why a document must not go live (``screen.content``): such a document is not
    written (a previous version stays) and is listed in ``report.held``."""
    corpus = Corpus.resolve(store, paths, settings, collection)
    files_done = [0]
    current: list[Path] = []  # the file the loader is reading: documents come out in file order
    held: dict[str, list[str]] = {}
    held_files: dict[str, str] = {}
    digest = make_embedder(settings.embedder).digest
    quick = QuickCheck(store.meta(), corpus, file_policy(settings, digest, label))

    def accepted(doc: Document) -> bool:
        return stored_as_is(doc, corpus.existing, settings, digest)

    refused: dict[str, str] = {}
    named: set[str] = set()  # document ids this run has given out

    def counted() -> Iterator[tuple[Source, Path, str]]:
        # .jsonl files last: a file's own path names its document before any record can
        # claim that name (a record may only name documents of its own file).
        for source, path, rel in sorted(quick.changed, key=lambda f: f[1].suffix.lower() == ".jsonl"):
            current[:] = [path]
            quick.read(path)
            yield source, path, rel
            files_done[0] += 1  # the loader asks for the next file: this one is done

    def documents() -> Iterator[tuple[Document, str] | str]:
        for doc_id in quick.unchanged_docs:
            corpus.loaded.add(doc_id)
            yield doc_id
        files_done[0] += len(quick.unchanged_files)
        for source, d in iter_tagged(((s, path, rel) for s, path, rel in counted()), settings.markup):
            record_of = dict(d.meta).get("from_file")
            try:
                got = source_document(source, d, corpus.existing, settings, corpus.key)
                doc, origin = got.doc, got.origin
                if record_of and doc.path in named:
                    raise clash(doc.path)
            except CorpusError as exc:
                if not record_of:
                    raise
                refused[f"{record_of}: {d.path}"] = str(exc)
                continue
            named.add(doc.path)
            corpus.loaded.add(doc.path)  # held or not, its file is here: never pruned for it
            reasons = screen(doc, current[0]) if screen is not None and current and not accepted(doc) else []
            if reasons:
                held[doc.path] = reasons
                held_files[doc.path] = str(current[0].resolve())
                quick.held(current[0])
                corpus.loaded.update(got.stale)  # held: whatever is stored of it stays, under whichever name
                continue
            corpus.replaced += got.stale
            yield doc, origin

    report = stream_documents(store, documents(), settings, label, principal,
                              lambda: corpus.deletions(prune) + corpus.replaced, progress,
                              extra_meta=corpus.roots, total=len(corpus.files), done=lambda: files_done[0],
                              late_meta=quick.meta)
    report.gone = [] if prune else corpus.missing
    report.held, report.held_files, report.refused = held, held_files, refused
    return report


FILES_KEY = "files"  # store meta: origin -> [size, mtime_ns, sha256, policy] of each file whose documents are stored


def file_policy(settings: Settings, digest: str, label: str | None) -> str:
    """What else decides a file's documents besides its bytes: parsing, DLP, stored form,
    embedder build and label. A change re-parses every file once."""
    return sha256("\x00".join((settings.markup, settings.dlp, str(settings.dlp_presidio), STORE_FORM, NAME_FORM,
                                digest, label or "")))[:16]


class QuickCheck:
    """Re-ingest without parsing what did not change (rsync's quick check, then its checksum):
    a file whose size and mtime match what the last ingest recorded is skipped unread; one
    whose size matches but mtime does not is read and hashed, and skipped if the bytes are
    the same. Either way its documents count as unchanged. Only files whose documents were
    all stored are recorded (a held file is screened again next time)."""

    def __init__(self, meta: dict[str, str], corpus: Corpus, policy: str) -> None:
        try:
            known = json.loads(meta.get(FILES_KEY) or "{}")
        except ValueError:
            known = {}
        self.known: dict[str, list] = known if isinstance(known, dict) else {}
        self.policy = policy
        self.seen: dict[str, list] = {}  # origin -> signature, for the files of this ingest that went in
        self._held: set[str] = set()
        by_origin: dict[str, list[str]] = {}
        for r in corpus.existing.values():
            if r.origin:
                by_origin.setdefault(r.origin, []).append(r.doc)
        self.changed: list[tuple[Source, Path, str]] = []
        self.unchanged_files: list[Path] = []
        self.unchanged_docs: list[str] = []
        for source, path, rel in corpus.files:
            origin = str(path.resolve())
            docs = by_origin.get(origin, [])
            if docs and self._same(origin, path):
                self.unchanged_files.append(path)
                self.unchanged_docs += docs
            else:
                self.changed.append((source, path, rel))

    def _same(self, origin: str, path: Path) -> bool:
        old = self.known.get(origin)
        try:
            st = path.stat()
        except OSError:
            return False
        if not (isinstance(old, list) and len(old) == 4 and old[3] == self.policy and old[0] == st.st_size):
            return False
        if old[1] != st.st_mtime_ns:
            try:
                if hashlib.sha256(path.read_bytes()).hexdigest() != old[2]:
                    return False
            except OSError:
                return False
        self.seen[origin] = [st.st_size, st.st_mtime_ns, old[2], self.policy]
        return True

    def read(self, path: Path) -> None:
        """Record the signature of a file about to be parsed (stat first: a write meanwhile
        leaves a newer mtime than recorded, so the next ingest looks again)."""
        try:
            st = path.stat()
            self.seen[str(path.resolve())] = [st.st_size, st.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest(),
                                              self.policy]
        except OSError:
            pass

    def held(self, path: Path) -> None:
        self._held.add(str(path.resolve()))

    def meta(self) -> dict[str, str]:
        """The store meta to write: signatures of this ingest's files that went in, the other
        files' as they were."""
        keep = {**self.known, **{o: s for o, s in self.seen.items() if o not in self._held}}
        for o in self._held:
            keep.pop(o, None)
        return {FILES_KEY: json.dumps(dict(sorted(keep.items())), separators=(",", ":"))}


@dataclass
class Corpus:
    """The paths of one ingest: their sources, their files (names only: texts stream), and
    the ids that loaded from them (``loaded``, filled as documents go by)."""

    paths: list[str]
    sources: list[Source]
    files: list[tuple[Source, Path, str]]
    existing: dict[str, DocRecord]
    key: str = ""  # the store's key for redacted names (``name_key``)
    new_meta: dict[str, str] = field(default_factory=dict)  # that key, when this ingest made it
    loaded: set[str] = field(default_factory=set)
    missing: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)  # the same files' documents under another form of their names

    @classmethod
    def resolve(cls, store: Store, paths: Iterable[str | Path], settings: Settings,
                collection: str | None = None) -> Corpus:
        check_compatible(store.meta(), settings)  # before any file is parsed: a wrong preset fails fast
        existing = store.documents()
        known = collections(store.meta())
        key, new_meta = name_key(store.meta())
        given = [str(p) for p in paths]
        sources: list[Source] = []
        for path in given:
            if not Path(path).exists():
                raise CorpusError(f"corpus path {path!r} does not exist; pass a folder or a file")
            sources.append(resolve_source(Path(path), collection, known, existing, settings, key))
        files = [(s, f, rel) for s in sources for f, rel in iter_files(s.path)]
        return cls(given, sources, files, existing, key, new_meta)

    @property
    def roots(self) -> dict[str, str]:
        """Store meta to write: each collection's root folder, and a new key for redacted names."""
        return {**self.new_meta, **{f"{COLLECTION_KEY}{s.collection}": str(s.root) for s in self.sources if s.collection}}

    def gone(self) -> list[str]:
        """Documents from one of these folders that did not load now (deleted, emptied, or no longer
        readable - the loader warned about those). Single files say nothing of their folder."""
        if not self.loaded:
            raise CorpusError(f"no readable documents under {', '.join(self.paths)}; supported: "
                              + " ".join(sorted(SUPPORTED)))
        folders = [s for s in self.sources if s.path.is_dir()]
        return sorted(r.doc for r in self.existing.values() if r.doc not in self.loaded and r.origin and any(
            r.collection == s.collection and _under(r.origin, str(s.path)) for s in folders))

    def deletions(self, prune: bool) -> list[str]:
        """After the last document: what is gone (kept in ``missing``), to delete if ``prune``.
        ``replaced`` is deleted whatever ``prune`` says (``ingest_paths``)."""
        self.missing.extend(d for d in self.gone() if d not in self.replaced)
        return self.missing if prune else []


def stored_as_is(doc: Document, existing: dict[str, DocRecord], settings: Settings, digest: str) -> bool:
    """Stored as it is now (a held file taken with --no-screen earlier): not screened again."""
    old = existing.get(doc.path)
    return old is not None and old.content_hash == content_hash(doc, settings, digest)


@dataclass(frozen=True)
class Held:
    """A document screening kept out (``prepare_files`` with a screen): why, and its file."""

    doc: str
    reasons: list[str]
    file: str
    stale: tuple[str, ...] = ()  # the same document stored under another form of its name: it stays


@dataclass(frozen=True)
class Unchanged:
    """A ``.jsonl`` record's document that is stored as it is (``prepare_files``): unchanged, and
    refused like a changed one if a file of this run already gave out its name."""

    doc: str
    named_by: str


@dataclass(frozen=True)
class Refused:
    """A ``.jsonl`` record ``prepare_files`` left out: it names a document another file provides.
    ``what`` is "file: doc as the record named it", as ``IngestReport.refused`` keys it."""

    what: str
    why: str


def prepare_files(files: Iterable[tuple[Source, Path, str]], plan: Plan, counter: TokenCounter,
                  screen: Screen | None = None) -> list[Prepared | str | Held | Refused | Unchanged]:
    """Load, map, guard and chunk ``files`` (the part of ``ingest_paths`` before embedding, for
    a worker elsewhere): per document in order, its id if unchanged, its ``Held`` verdict when
    ``screen`` keeps it out (as ``ingest_paths`` screens), its ``Refused`` verdict for a record
    that names an indexed document of another file, else its ``Prepared`` (a record's carries
    ``named_by``, an unchanged record comes as ``Unchanged``: the caller refuses either if a
    file of this run already gave out that name).
    Reads files, writes nothing; ``attach_vectors`` finishes what ``embed_prepared`` would."""
    out: list[Prepared | str | Held | Refused | Unchanged] = []
    current: list[Path] = []

    def tagged() -> Iterator[tuple[Source, Path, str]]:
        for s, path, rel in files:
            current[:] = [path]
            yield s, path, rel

    for source, d in iter_tagged(tagged(), plan.settings.markup):
        record_of = dict(d.meta).get("from_file")
        try:
            got = source_document(source, d, plan.existing, plan.settings, plan.name_key)
            doc, origin = got.doc, got.origin
        except CorpusError as exc:
            if not record_of:
                raise
            out.append(Refused(f"{record_of}: {d.path}", str(exc)))
            continue
        taken = stored_as_is(doc, plan.existing, plan.settings, plan.digest)
        reasons = screen(doc, current[0]) if screen is not None and current and not taken else []
        if reasons:
            out.append(Held(doc.path, reasons, str(current[0].resolve()), got.stale))
            continue
        ready = plan.prepare(doc, origin, counter)
        named_by = f"{record_of}: {d.path}" if record_of else ""
        if ready is None:
            out.append(Unchanged(doc.path, named_by) if named_by else doc.path)
        else:
            out.append(replace(ready, named_by=named_by, stale=got.stale))
    return out


@dataclass(frozen=True)
class Sourced:
    """A loaded document under its id, where its file is, and the same document stored under
    another form of its name (before names went through DLP, or under another ``--dlp``)."""

    doc: Document
    origin: str
    stale: tuple[str, ...] = ()


def source_document(source: Source, doc: Document, existing: dict[str, DocRecord], settings: Settings,
                    key: str) -> Sourced:
    """``doc`` as loaded from ``source``, under its id, with its origin; refuses a document
    that would overwrite one from another source. The id goes through DLP as the text does
    (``dlp_named``): a file named like a key is stored, listed and cited under a redacted id."""
    origin = _origin(source.path, dict(doc.meta).get("from_file", doc.path))
    rest = source.rest(doc)
    red = redacted_id(rest, key, settings.dlp_presidio)[0]  # read once: every name form below is made from it
    doc_id = "/".join(p for p in (source.collection, red if settings.dlp == "redact" else rest) if p)
    # The same file's document as an index may hold it from before: under its name as written
    # (before names went through DLP, or --dlp label/off), or redacted (under --dlp redact).
    forms = {source.doc_id(doc), "/".join(p for p in (source.redacted, red) if p)}
    doc = _renamed(doc, doc_id)
    owner = existing.get(doc_id)
    if owner is not None and owner.collection != source.collection:
        raise CorpusError(f"{doc_id!r} is already indexed from another source ({owner.collection or 'no collection'}); "
                          "ingest this path under another name with --collection NAME")
    if dict(doc.meta).get("from_file") and owner is not None and owner.origin and owner.origin != origin:
        raise CorpusError(f"{dict(doc.meta)['from_file']}: a record claims document {doc_id!r}, which another file "
                          "provides; records may only name documents of their own file (rename the record's \"doc\")")
    stale = tuple(sorted(o for o in forms - {doc_id} if (r := existing.get(o)) is not None and r.origin == origin != ""))
    return Sourced(doc, origin, stale)


def _renamed(doc: Document, doc_id: str) -> Document:
    """``doc`` under id ``doc_id`` (its ready-made chunks too), with a title for filters."""
    meta = dict(doc.meta)
    meta.setdefault("title", title_of(replace(doc, path=doc_id)))  # a file's name as stored, never as written
    if doc_id == doc.path:
        return replace(doc, meta=tuple(meta.items()))
    pre = tuple(replace(c, doc=doc_id, id=f"{doc_id}#{c.index}") for c in doc.prechunked)
    return replace(doc, path=doc_id, prechunked=pre, meta=tuple(meta.items()))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _origin(path: Path, rel: str) -> str:
    candidate = path / rel if path.is_dir() else path
    return str(candidate.resolve()) if candidate.exists() else ""


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
