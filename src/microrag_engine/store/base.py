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

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..types import Chunk

FORMAT_VERSION = 1
# Settings that change what is stored; a query with other values would be wrong.
BOUND_SETTINGS = ("chunker", "size", "overlap", "max_tokens", "embedder")


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

    @abstractmethod
    def generation(self) -> int:
        """Bumped by every successful ``apply``; tells readers their copy is stale."""

    @abstractmethod
    def relabel(self, doc: str, label: str) -> int:
        """Change one document's sensitivity label in one transaction; return the new generation."""

    @abstractmethod
    def check(self) -> list[str]:
        """Integrity problems found (empty list = healthy)."""

    def close(self) -> None:  # noqa: B027 - optional for backends without resources
        """Release connections."""

    def cache_path(self, name: str) -> Path | None:
        """Where a derived, rebuildable file (an HNSW graph) may be cached; ``None``: nowhere."""
        return None


class SearchableStore(Store):
    """A store that ranks by itself (PostgreSQL): retrieval runs in the database, per request."""

    @abstractmethod
    def search(self, query: str, qvec: np.ndarray, labels: list[str] | None, n: int = 100,
               ef_search: int = 200) -> tuple[list[tuple[Chunk, float, float]], float]:
        """``([(chunk, raw keyword score, raw cosine)], the query's keyword ceiling)`` over the
        union of both legs' top ``n`` among chunks labelled ``labels`` (all when ``None``)."""


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
