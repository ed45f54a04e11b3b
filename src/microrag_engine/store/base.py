"""The store interface: the one source of truth behind every index.

A store keeps documents (content hash, sensitivity label, provenance), their
chunks (id, index, character span, text, text hash) and one unit vector per
chunk, plus the settings the index was built with. Writes arrive as one
``apply`` call per ingest and land atomically: a reader sees the state before
or after it, never a mix. Fast search structures (BM25, dense matrices) are
*derived* from a ``Snapshot`` and can always be rebuilt. Backends: ``sqlite``
(embedded default) and ``postgres`` (scale-out).
"""

from __future__ import annotations

import fnmatch
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..config import Settings
from ..errors import ConfigError, MicroRAGError
from ..types import Chunk

FORMAT_VERSION = 1


class StaleVersion(MicroRAGError):
    """The document changed since the version a relabel names (``Store.relabel``)."""
# Settings that change what is stored; a query with other values would be wrong.
BOUND_SETTINGS = ("chunker", "size", "overlap", "max_tokens", "embedder")


def bound_meta(settings: Settings, dim: int, digest: str = "") -> dict[str, str]:
    """The settings an index is bound to, as stored strings, and which build of the embedder
    (its graph's digest) made the vectors."""
    meta = {k: str(getattr(settings, k)) for k in BOUND_SETTINGS}
    meta["dim"] = str(dim)
    if digest:
        meta[DIGEST_KEY] = digest
    return meta


DIGEST_KEY = "embedder_digest"


def embedder_drift(meta: dict[str, str], digest: str) -> str:
    """A warning when an index's vectors came from another build of its embedder ("" if not)."""
    recorded = meta.get(DIGEST_KEY, "")
    if not meta.get("embedder") or recorded == digest or meta["embedder"] == "hash":  # the seed's hashing never changes
        return ""
    made = f"graph {recorded}" if recorded else "an older build"
    return (f"this index's vectors were made by {made} of the {meta['embedder']} embedder, and queries now use "
            f"graph {digest}: ranking still works, but run 'microrag ingest' again on all its folders, in one command, "
            "to re-embed them (each document once)")


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


# Fields every document has, read from its record (``DocRecord.values``), never from its front matter.
BUILT_IN_FIELDS = frozenset({"path", "doc", "collection", "label"})


@dataclass(frozen=True)
class DocRecord:
    """One document's metadata. ``principal``/``origin``/``ingested_at`` are provenance."""

    doc: str
    content_hash: str
    label: str = "public"
    principal: str = "operator"
    origin: str = ""
    ingested_at: str = ""
    n_chunks: int = 0
    collection: str = ""  # the source it came from (``microrag ingest --collection``); "" = unqualified
    meta: tuple[tuple[str, str], ...] = ()  # front matter and title, for query-time filters

    def values(self, name: str) -> list[str]:
        """A filterable field's values: ``path`` (the doc id, and the id within its collection),
        ``collection``, ``label``, or a meta key (front matter, ``title``)."""
        name = name.lower()  # field names match whatever case the front matter used
        if name in ("path", "doc"):
            inner = self.doc[len(self.collection) + 1:] if self.collection and self.doc.startswith(self.collection + "/") else ""
            return [self.doc, inner] if inner else [self.doc]
        if name in ("collection", "label"):
            return [str(getattr(self, name))]
        return [v for k, v in self.meta if k.lower() == name]


def filter_values(record: DocRecord) -> dict[str, list[str]]:
    """Every field a ``DocFilter`` can name, with its values, both lower-cased as ``admits``
    compares them: what a database keeps to filter in SQL (``DocFilter.sql_terms``). A
    front-matter key named like a built-in field (``path``, ``doc``, ``collection``,
    ``label``) is not one: ``DocRecord.values`` reads those from the record alone."""
    out = {name: [v.lower() for v in record.values(name)] for name in ("path", "collection", "label")}
    for key, value in record.meta:
        if key.lower() not in BUILT_IN_FIELDS:
            out.setdefault(key.lower(), []).append(value.lower())
    return out


def encode_meta(meta: tuple[tuple[str, str], ...]) -> str:
    return json.dumps(dict(meta), ensure_ascii=False, sort_keys=True)


def decode_meta(raw: str | None) -> tuple[tuple[str, str], ...]:
    try:
        data = json.loads(raw or "{}")
    except ValueError:
        return ()
    return tuple((str(k), str(v)) for k, v in data.items()) if isinstance(data, dict) else ()


# What a filter field may be called (the server's requests take only these), how many fields one
# document keeps as filters (its title always among them) and how much of each value: front matter
# is written by whoever wrote the file, so its size is bounded before it is stored (#33).
FIELD_NAME = r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$"
MAX_FIELDS = 32
MAX_FIELD_CHARS = 500


@dataclass(frozen=True)
class DocFilter:
    """Which documents a query may draw from: globs on fields, all ``where`` must match, no ``exclude`` may.

    Fields are ``path`` (the doc id), ``collection``, ``label`` and any front-matter key or
    ``title``; values are shell globs (``tutorial/*``, ``*OAuth*``), matched case-insensitively.
    A filter narrows what a caller sees; it never widens their clearance.
    """

    where: tuple[tuple[str, str], ...] = ()
    exclude: tuple[tuple[str, str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.where or self.exclude)

    def admits(self, record: DocRecord) -> bool:
        def hit(name: str, pattern: str) -> bool:
            return any(fnmatch.fnmatchcase(v.lower(), pattern.lower()) for v in record.values(name))

        return all(hit(k, v) for k, v in self.where) and not any(hit(k, v) for k, v in self.exclude)

    @classmethod
    def parse(cls, where: list[str] | None = None, exclude: list[str] | None = None) -> DocFilter:
        """From ``FIELD=GLOB`` strings (the CLI's ``--where``/``--exclude``); raises ``ValueError``
        with a one-line reason for anything else."""
        def pairs(items: list[str] | None) -> tuple[tuple[str, str], ...]:
            out = []
            for item in items or []:
                name, sep, value = item.partition("=")
                if not sep or not name.strip() or not value.strip():
                    raise ValueError(f"filter {item!r} is not FIELD=GLOB (e.g. 'path=tutorial/*', 'title=*OAuth*')")
                if not re.fullmatch(FIELD_NAME, name.strip()):
                    raise ValueError(f"filter field {name.strip()!r} is not a field name: letters, digits, '_', '.' "
                                     "or '-', starting with a letter or '_' (front-matter keys of other shapes are not kept)")
                out.append((name.strip(), value.strip()))
            return tuple(out)

        return cls(pairs(where), pairs(exclude))

    def fields(self) -> set[str]:
        return {name.lower() for name, _ in (*self.where, *self.exclude)}

    def sql_terms(self) -> list[tuple[bool, str, str, str]] | None:
        """The filter as ``(negated, field, "equals" | "like", value)`` terms over the lower-cased
        values ``filter_values`` keeps, matching exactly what ``admits`` matches: a glob without
        a wildcard is the value itself, any other an SQL ``LIKE`` pattern (escape ``\\``). None
        when a glob holds a character class (``[...]``), which ``LIKE`` cannot say. ``doc`` is
        ``path``."""
        if any("[" in v for _, v in (*self.where, *self.exclude)):
            return None
        out = []
        for negated, items in ((False, self.where), (True, self.exclude)):
            for name, glob in items:
                field, glob = ("path" if name.lower() == "doc" else name.lower()), glob.lower()
                if "*" not in glob and "?" not in glob:
                    out.append((negated, field, "equals", glob))
                    continue
                like = glob.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
                out.append((negated, field, "like", like.replace("*", "%").replace("?", "_")))
        return out


@dataclass
class DocUpdate:
    """A document to (re)write with all of its chunks and their vectors."""

    record: DocRecord
    chunks: list[Chunk]
    vectors: np.ndarray  # (len(chunks), dim) float32
    text_hashes: list[str] = field(default_factory=list)


@dataclass
class Snapshot:
    """Everything a reader needs, read in one consistent transaction."""

    generation: int
    meta: dict[str, str]
    documents: dict[str, DocRecord]
    chunks: list[Chunk]
    vectors: np.ndarray
    labels: list[str]  # per chunk, the label of its document


class Store(ABC):
    """Backend-neutral persistence. All methods are safe to call from one thread."""

    @abstractmethod
    def meta(self) -> dict[str, str]:
        """Settings recorded at first ingest ({} for an empty store)."""

    @abstractmethod
    def documents(self) -> dict[str, DocRecord]:
        """Every stored document's metadata, by doc path."""

    @abstractmethod
    def apply(self, updates: list[DocUpdate], deletes: list[str], meta: dict[str, str]) -> int:
        """Write updates and deletions in ONE transaction; return the new generation."""

    @abstractmethod
    def snapshot(self) -> Snapshot:
        """A consistent copy of the whole store."""

    def snapshot_of(self, docs: Collection[str]) -> Snapshot:
        """Every document's record, and the chunks, vectors and labels of ``docs`` only (those
        still stored), read as one consistent state: what a reader needs to bring its copy up
        to date (``Engine.updated``). This default filters a whole snapshot; backends override it."""
        snap = self.snapshot()
        wanted = set(docs)
        rows = [i for i, c in enumerate(snap.chunks) if c.doc in wanted]
        return Snapshot(snap.generation, snap.meta, snap.documents, [snap.chunks[i] for i in rows],
                        snap.vectors[rows], [snap.labels[i] for i in rows])

    @abstractmethod
    def generation(self) -> int:
        """Bumped by every successful ``apply``; tells readers their copy is stale."""

    @abstractmethod
    def relabel(self, doc: str, label: str, version: str | None = None) -> int:
        """Change one document's sensitivity label in one transaction; return the new generation.
        With ``version`` (a content hash), only if that is still the stored version: what was
        screened or approved goes live, never a newer upload that replaced it meanwhile
        (another replica's). Raises ``StaleVersion`` otherwise."""

    @abstractmethod
    def check(self) -> list[str]:
        """Integrity problems found (empty list = healthy)."""

    def close(self) -> None:  # noqa: B027 - optional for backends without resources
        """Release connections."""

    def cache_path(self, name: str) -> Path | None:
        """Where a derived, rebuildable file (an HNSW graph) may be cached; ``None``: nowhere."""
        return None

    def reading_after(self, position: str) -> AbstractContextManager[None]:
        """Reads inside the block see every write up to ``position`` (a caller's last write, as
        ``committed_position`` gave it): a no-op for one-file stores, where every read sees every write."""
        return nullcontext()

    def writing(self) -> AbstractContextManager[None]:
        """Reads inside the block serve a write (ownership, what changed): from the primary, where a
        store has standbys. A no-op for one-file stores."""
        return nullcontext()

    def committed_position(self) -> str:
        """Where the store's write log stands now (``""``: a store without replicas)."""
        return ""

    def replica_lag(self) -> float | None:
        """Seconds a standby this store reads from is behind its primary (None: no standby)."""
        return None

    def identity(self) -> str:
        """Names this store (not its location): derived files of another store, or of an
        earlier store at the same path, must never be taken for its own."""
        return self.meta().get("store_id", "")


class Candidates(NamedTuple):
    """What a database's first pass found for a query (``SearchableStore.search``)."""

    rows: list[tuple[Chunk, float, float]]  # (chunk, raw keyword score, raw cosine), in corpus order
    ceiling: float  # the query's keyword ceiling (sum of its terms' IDF): the gate's coverage
    # Each leg's least score over every chunk the candidates were drawn from (``retrieve.leg_floors``),
    # so min-max scales them as it would every chunk; None where the candidates are every such chunk.
    floors: tuple[float | None, float | None] = (None, None)


class SearchableStore(Store):
    """A store that ranks by itself (PostgreSQL): retrieval runs in the database, per request."""

    @abstractmethod
    def chunks_at(self, places: list[tuple[str, int]], labels: list[str] | None) -> list[Chunk]:
        """The chunks at ``(document, chunk index)`` places, those that exist and are labelled
        ``labels`` (every unreserved label when ``None``; a reserved one never), as stored now:
        an answer's context, the neighbours of its hits."""

    @abstractmethod
    def search(self, query: str, qvec: np.ndarray, labels: list[str] | None, n: int = 100,
               ef_search: int = 200, docs: list[str] | None = None,
               where: DocFilter | None = None) -> Candidates:
        """The union of both legs' top ``n`` among chunks labelled ``labels`` (all when ``None``)
        and, when given, of documents ``docs`` only and those ``where`` admits (query-time
        filters, ``where`` only one the store ``filters`` itself; statistics stay per label),
        with both raw leg scores, the query's keyword ceiling and each leg's floor."""

    @abstractmethod
    def scores_of(self, query: str, qvec: np.ndarray, labels: list[str] | None, docs: list[str],
                  ids: Sequence[str] = ()) -> tuple[list[tuple[Chunk, float, float]], float]:
        """The chunks ``ids`` and every chunk of ``docs`` (an upload under review, not labelled
        ``labels``), with both raw leg scores as ``search`` gives them and the query's keyword
        ceiling, the statistics those of ``labels`` with ``docs``' chunks counted in
        (``screen.collision``: the upload ranked against the live chunks as if it were live)."""

    @abstractmethod
    def texts_of(self, docs: list[str]) -> dict[str, str]:
        """The stored text of each of ``docs`` that has chunks, whatever its label: its chunks
        joined by blank lines, in order (the copy check reads an upload and its uploader's pages)."""

    @abstractmethod
    def filters(self, where: DocFilter) -> bool:
        """Whether the store evaluates ``where`` itself (``search``'s ``where``, ``admitted``);
        otherwise the caller sends the documents it admits (``docs``)."""

    @abstractmethod
    def admitted(self, where: DocFilter, labels: list[str] | None, limit: int | None = None) -> list[str]:
        """The documents ``where`` admits among those labelled ``labels`` (every unreserved label
        when ``None``, a reserved one never), in id order, at most ``limit``."""

    @abstractmethod
    def idf(self, terms: list[str], labels: list[str] | None) -> dict[str, float]:
        """Each (tokenised) term's BM25 IDF over the chunks labelled ``labels`` (every
        unreserved label when ``None``), as ``search`` weighs it: the answerer weighs the
        question's words with it, as it does with an in-memory index's."""

    @abstractmethod
    def holds(self, term: str, labels: list[str] | None) -> bool:
        """Whether a chunk labelled ``labels`` (every unreserved label when ``None``) holds the
        (tokenised) ``term``: the answerer's check of a code name no readable document has."""


def check_snapshot(snap: Snapshot) -> list[str]:
    """Backend-neutral invariants: counts, ids, spans, vector shapes and norms."""
    problems: list[str] = []
    by_doc: dict[str, list[Chunk]] = {}
    for c in snap.chunks:
        by_doc.setdefault(c.doc, []).append(c)
        if c.id != f"{c.doc}#{c.index}":
            problems.append(f"chunk {c.id}: id does not match {c.doc}#{c.index}")
    for doc, rec in snap.documents.items():
        got = by_doc.pop(doc, [])
        if len(got) != rec.n_chunks:
            problems.append(f"document {doc}: records {rec.n_chunks} chunks, store has {len(got)}")
        if sorted(c.index for c in got) != list(range(len(got))):
            problems.append(f"document {doc}: chunk indexes are not 0..{len(got) - 1}")
    for doc in by_doc:
        problems.append(f"orphan chunks of unknown document {doc}")
    if len(snap.vectors) != len(snap.chunks):
        problems.append(f"{len(snap.chunks)} chunks but {len(snap.vectors)} vectors")
    elif len(snap.vectors):
        dim = snap.meta.get("dim")
        if dim and snap.vectors.shape[1] != int(dim):
            problems.append(f"vectors have dim {snap.vectors.shape[1]}, index records {dim}")
        norms = np.linalg.norm(snap.vectors, axis=1)
        bad = int(np.sum((np.abs(norms - 1) > 1e-3) & (norms > 0)))
        if bad:
            problems.append(f"{bad} vectors are not unit length")
    return problems
