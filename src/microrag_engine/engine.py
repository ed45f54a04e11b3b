"""The five steps wired together: documents -> chunks -> index -> retrieval -> answer.

``Engine`` holds one built index and the settings it was built with. It adds no
behaviour of its own: every decision is made by the step modules. It is the one
place the steps are wired: the library, the CLI and the server all retrieve with
``Engine.retrieve`` and answer with ``Engine.answer`` (``ask`` is both), passing
``top_k``, spotlighting, tools, verification and a deadline as parameters. Each step
is an OpenTelemetry span when a provider listens (``runtime.tracing``): ``microrag.ask``
over ``microrag.retrieve`` and ``microrag.answer`` (with ``microrag.verify`` inside),
``microrag.ingest`` over ``microrag.chunk`` and ``microrag.embed``; counts and scores only.
"""

from __future__ import annotations

import bisect
import logging
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from importlib.resources import files
from pathlib import Path

import numpy as np

from .augment import build_messages, citation, citation_of
from .chunk import chunk_documents
from .config import LLMConfig, Settings, override
from .errors import ConfigError, CorpusError, MicroRAGError
from .generate import Relevance, extract, load_answer_model, relevance
from .index import Index, build_index
from .index.ann import HNSW, faiss_available
from .index.embed import Embedder, make_embedder
from .index.keyword import BM25Scorer, KeywordScorer, make_keyword
from .index.saved import ChunkTable, SavedRecords, interleave, open_saved, save
from .retrieve import rank_candidates, retrieve
from .retrieve.cap import long_doc_penalty
from .retrieve.conversation import Condensed, retrieval_query
from .retrieve.mimic import restated_question
from .retrieve.names import DocNames, name_boost
from .runtime.llm import ChatStream
from .runtime.tracing import span
from .store.base import BUILT_IN_FIELDS, DocFilter, DocRecord, SearchableStore, Store, check_compatible, embedder_drift
from .text import bm25_fingerprint, bm25_tokens, title_of
from .tools import FileTool, ToolResult
from .types import CONTRADICTED, ENTAILED, NEUTRAL, NOT_IN_DOCUMENTS, NOT_SUPPORTED, Chunk, Document, Hit, Retrieval, Turn
from .verify import Verification, verify_with
from .verify.conflict import Conflict, conflict_answer, find_conflicts
from .verify.nli import NLIModel, load_nli

log = logging.getLogger("microrag")


def demo_corpus() -> Path:
    """The bundled Brightwave Robotics handbook used by ``make demo`` and the docs."""
    return Path(str(files("microrag_engine") / "data" / "demo-corpus"))


@dataclass
class Answer:
    """What ``answer``/``ask`` return: the text, who wrote it, and the retrieval behind it."""

    text: str
    mode: str  # "llm", "extractive", or "conflict" (the sources disagree: both quoted, no answer)
    retrieval: Retrieval
    truncated: bool = False
    verification: Verification | None = None  # set when asked to verify (step 6)
    tools: list[ToolResult] = field(default_factory=list)  # the model's tool calls, run or refused
    flags: list[str] = field(default_factory=list)  # "budget: ...", "verify: ..." notes for the caller
    condensed: Condensed | None = None  # in a conversation: the retrieval query and how it was made
    conflicts: list[Conflict] = field(default_factory=list)  # sources that contradict each other (mode "conflict")
    # Whether this answer is a refusal, and why - whoever refused: the grounding gate, the
    # answerer (no passage answers it), the model (it said so) or verification (nothing left).
    refused: bool = False
    reason: str = ""
    verify_seconds: float = 0.0  # the verification step's share of the answer's time (the server's metrics)


def refused_by(ans: Answer) -> str:
    """Who refused ``ans``: gate, filter, verification, model or answerer (a metrics label and a
    span attribute: a bounded set, never the reason's text)."""
    if ans.retrieval.refused:
        return "filter" if "filter" in ans.retrieval.reason else "gate"
    if ans.reason.startswith("verification"):
        return "verification"
    return "model" if ans.mode == "llm" else "answerer"


NO_DOCUMENT_MATCHES = "no indexed document matches the filter"  # the refusal's reason, whichever way it was found


class Engine:
    """A queryable index plus its settings."""

    def __init__(
        self,
        settings: Settings,
        index: Index,
        documents: list[Document] | None = None,
        labels: list[str] | None = None,
        generation: int = 0,
        store: SearchableStore | None = None,
        records: Mapping[str, DocRecord] | None = None,
    ) -> None:
        self.settings = settings
        self.index = index
        self.documents = documents or []
        # With a store that searches by itself (Postgres), retrieval runs there: this
        # process holds no chunks, so any number of stateless replicas can serve.
        self.store = store
        # Document metadata (label, provenance) as of load time; {} for in-memory corpora.
        self.records = records or {}
        # Per-chunk sensitivity label; in-memory corpora are all public.
        self.labels = np.array(labels if labels is not None else ["public"] * len(index.chunks), dtype=object)
        # Read-only: masks, keyword views and ANN partitions are derived from it and cached, so a
        # label changed in place would keep a chunk visible to a clearance (use ``relabel``).
        self.labels.setflags(write=False)
        self.generation = generation
        # Keyword scorers fitted on what one clearance may read, by label set (see retrieve()).
        self._scoped: dict[tuple[str, ...], KeywordScorer] = {}
        # Visible-chunk masks by label set (None: the default), read-only: see mask().
        self._masks: dict[tuple[str, ...] | None, np.ndarray | None] = {}
        # The filterable field names each clearance's documents have, by label set: see _warn_unknown_fields.
        self._fields: dict[tuple[str, ...] | None, frozenset[str]] = {}
        # (knobs, length prior per document, the same per chunk of the index): see _doc_prior
        self._prior: tuple[tuple[float, int, float], dict[str, float], np.ndarray | None] | None = None
        # The rare words of the names each clearance can see, by (label set, name_rare): see _name_prior
        self._names: dict[tuple[tuple[str, ...] | None, float], DocNames] = {}
        self._names_lock = threading.Lock()
        # Provenance tier per document (0 operator, 1 admin-approved, 2 trusted contributor): set
        # by whoever knows who uploaded what (the server); empty = every document the operator's.
        self.tiers: Mapping[str, int] = {}

    @classmethod
    def from_store(cls, store: Store, settings: Settings, remote: bool | None = None, save_derived: bool = True) -> Engine:
        """Open a persistent index.

        ``remote`` (default: whenever the store can search, i.e. Postgres) queries the
        database's BM25 and HNSW first passes per request; otherwise the stored chunks
        and vectors are loaded and the keyword leg is rebuilt from them in memory.
        Those derived structures are saved beside the store per generation (``index.saved``),
        so the next open maps them instead; ``save_derived=False`` skips saving them.
        """
        if remote is None:  # the database ranks with BM25 only; the seed's TF-IDF runs here
            remote = isinstance(store, SearchableStore) and settings.keyword == "bm25"
        if remote:
            if settings.keyword != "bm25" or not isinstance(store, SearchableStore):
                raise ConfigError("database-side retrieval needs a Postgres store and keyword='bm25'")
            # The generation first: records read after it are at least that new, so a write in
            # between makes the engine look older than it is (reloaded again), never newer.
            generation = store.generation()
            meta = store.meta()
            check_compatible(meta, settings)
            records = store.documents()
            if not records:
                raise CorpusError("the index is empty; add documents with: microrag ingest PATH")
            embedder = make_embedder(settings.embedder)
            _warn_drift(meta, embedder.digest)
            index = Index([], None, embedder, np.zeros((0, embedder.dim), dtype=np.float32))
            return cls(settings, index, [Document(d, "") for d in records], labels=[], generation=generation,
                       store=store, records=records)
        meta = store.meta()
        check_compatible(meta, settings)
        embedder = make_embedder(settings.embedder)
        _warn_drift(meta, embedder.digest)
        generation = store.generation()
        saved = open_saved(store.cache_path(f"derived-{generation}"), _derived_manifest(store, settings, embedder, generation))
        if saved is None:  # first open of this generation: derive from a snapshot, save for next time
            snap = store.snapshot()
            check_compatible(snap.meta, settings)
            if not snap.chunks:
                raise CorpusError("the index is empty; add documents with: microrag ingest PATH")
            keyword = make_keyword(settings.keyword, settings.k1, settings.b).fit([c.text for c in snap.chunks])
            cache = store.cache_path(f"hnsw-{snap.generation}.faiss")
            index = Index(snap.chunks, keyword, embedder, snap.vectors, ann=_maybe_ann(snap.vectors, settings, cache, snap.labels))
            engine = cls(settings, index, [Document(d, "") for d in snap.documents], labels=snap.labels,
                         generation=snap.generation, records=snap.documents)
            if save_derived:
                engine.save_derived(store, graphs=False)  # (the graphs were cached as they were built)
            return engine
        if saved.keyword is not None:
            keyword = BM25Scorer(settings.k1, settings.b).restore(*saved.keyword)
        else:  # the seed's TF-IDF is not saved: it refits (seed indexes are small)
            keyword = make_keyword(settings.keyword, settings.k1, settings.b).fit(saved.chunks.texts())
        cache = store.cache_path(f"hnsw-{generation}.faiss")
        index = Index(saved.chunks, keyword, embedder, saved.vectors, ann=_maybe_ann(saved.vectors, settings, cache, saved.labels))
        saved_records = SavedRecords(saved.documents, saved.n_documents, _row_record)
        return cls(settings, index, None, labels=saved.labels, generation=generation, records=saved_records)

    def updated(self, store: Store, records: Mapping[str, DocRecord] | None = None) -> Engine:
        """This engine brought up to ``store``'s current state without deriving it again.

        The documents whose record differs from the one this engine read (added, rewritten,
        relabelled, deleted: ingest rewrites a document only when its content hash or label
        changed) are read from the store and swapped in at their place in the store's order;
        the rest of the keyword postings, vectors and chunk columns is reused. The result
        ranks exactly as ``from_store`` would (same chunks, order, statistics). ``self`` is
        left as it was: queries running on it finish on it. Falls back to ``from_store`` where
        nothing can be reused: database-side retrieval, the seed's TF-IDF, an engine built
        from documents, a write that changed no record. ``records``: the store's, if the caller
        has just read them (they are read again with the changed chunks, to check).
        """
        keyword = self.index.keyword
        if self.store is not None or not isinstance(keyword, BM25Scorer) or not self.records:
            return Engine.from_store(store, self.settings, save_derived=False)
        before = dict(self.records)
        changed = _changed(before, store.documents() if records is None else records)
        for _ in range(3):  # a write between the two reads changes more documents: read those too
            part = store.snapshot_of(changed)
            more = _changed(before, part.documents) - changed
            if not more:
                break
            changed |= more
        else:
            return Engine.from_store(store, self.settings, save_derived=False)
        if not part.documents:
            raise CorpusError("the index is empty; add documents with: microrag ingest PATH")
        if not changed and part.generation != self.generation:
            # A write that changed no record (settings in the meta; or chunks rewritten under an
            # unchanged record, which ingest never does): nothing says what changed, derive it all.
            return Engine.from_store(store, self.settings, save_derived=False)
        check_compatible(part.meta, self.settings)
        _warn_drift(part.meta, self.index.embedder.digest)
        index = self.index
        if changed:
            old = index.chunks
            gone = [k for k, name in enumerate(old.doc_names) if name in changed]
            keep = ~np.isin(old.doc_of, gone)
            at = _places(old, keep, part.chunks)
            vectors = interleave(index.vectors, keep, part.vectors.astype(np.float32), at)
            labels = interleave(self.labels, keep, np.array(part.labels, dtype=object), at)
            # (the graphs are not saved here, under the writer's lock: ``save_derived`` does it)
            index = Index(old.updated(keep, part.chunks, at), keyword.updated(keep, [c.text for c in part.chunks], at=at),
                          index.embedder, vectors, ann=_next_ann(index.ann, vectors, self.settings, labels,
                                                                 _remap(keep, at, len(vectors))))
        else:
            labels = self.labels
        engine = Engine(self.settings, index, None, labels=labels.tolist(), generation=part.generation, records=part.documents)
        engine.tiers = self.tiers
        return engine

    def save_derived(self, store: Store, graphs: bool = True) -> bool:
        """Save what this engine derived from ``store`` (chunk columns, vectors, labels, the
        BM25 postings, the records; with ``graphs`` its HNSW graphs too) as the store's current
        generation's files, so the next open maps them instead of deriving them again. Safe
        beside readers (each folder is written aside and renamed into place) and from another
        thread than the writer's (the server saves after each write in the background). False,
        with the reason logged, where it could not save or the store has moved on since."""
        keyword = self.index.keyword
        if self.store is not None or not self.index.chunks or store.generation() != self.generation:
            return False  # database-side retrieval; nothing held; a newer generation saves itself
        folder = store.cache_path(f"derived-{self.generation}")
        if folder is None:  # a store with nowhere to keep derived files
            return False
        try:
            save(folder, _derived_manifest(store, self.settings, self.index.embedder, self.generation), self.index.chunks,
                 self.index.vectors, self.labels.tolist(), keyword.state() if isinstance(keyword, BM25Scorer) else None,
                 [_record_row(r) for r in self.records.values()])
        except (OSError, ValueError) as exc:  # read-only or full disk, unencodable name: the index still works
            log.info("could not save the derived index in %s (%s); opening will not be fast", folder,
                     exc.strerror if isinstance(exc, OSError) else type(exc).__name__)
            return False
        cache = store.cache_path(f"hnsw-{self.generation}.faiss") if graphs and self.index.ann is not None else None
        if cache is not None and self.index.ann is not None:
            self.index.ann.save(cache)
        return True

    def relabel(self, chunks: np.ndarray | Sequence[int], label: str) -> None:
        """Give ``chunks`` (indices or a boolean mask over the index) ``label``, in this engine
        only (a store relabels documents: ``Store.relabel``); everything derived from labels
        (masks, clearance views, ANN partitions) is derived again."""
        labels = self.labels.copy()
        labels[chunks] = label
        labels.setflags(write=False)
        self.labels, self._masks, self._scoped, self._prior, self._names, self._fields = labels, {}, {}, None, {}, {}
        if self.index.ann is not None:  # (the same rows: each keeps its slot unless its partition changed)
            self.index.ann = _next_ann(self.index.ann, self.index.vectors, self.settings, labels, np.arange(len(labels)))

    @property
    def n_documents(self) -> int:
        """Documents behind this engine (with an index on disk: every stored one)."""
        return len(self.records) if self.records else len(self.documents)

    def mask(self, labels: Iterable[str] | None) -> np.ndarray | None:
        """Boolean mask of chunks whose label is in ``labels``.

        ``None`` means every label except the reserved ones (``_quarantine``): content
        waiting for review is never retrievable, whoever asks and however.
        """
        key = _clearance(labels)
        if key in self._masks:
            return self._masks[key]
        if key is None:
            reserved = [x for x in set(self.labels.tolist()) if str(x).startswith("_")]
            found = ~np.isin(self.labels, reserved) if reserved else None
        else:
            found = np.isin(self.labels, list(key))
        # Built once per clearance (a scan of every chunk: milliseconds at 1M) and shared by
        # its queries, so read-only; the ANN first pass keys its per-partition plan on it.
        if found is not None:
            found.setflags(write=False)
        if len(self._masks) >= 16:  # a handful of clearances in practice; bound it anyway
            self._masks.clear()
        self._masks[key] = found
        return found

    def _visible_labels(self, labels: Iterable[str] | None) -> list[str] | None:
        """For database-side retrieval: the label filter to send (reserved labels never)."""
        if labels is not None:
            return [x for x in labels if not x.startswith("_")]
        present = {d.label for d in self.records.values()}
        return sorted(x for x in present if not x.startswith("_")) if any(x.startswith("_") for x in present) else None

    @classmethod
    def from_documents(cls, docs: list[Document], settings: Settings, progress: bool = False) -> Engine:
        """Chunk and index ``docs`` with ``settings``."""
        settings.validate()
        with span("microrag.ingest", documents=len(docs)):
            docs = _guarded(docs, settings)
            embedder = make_embedder(settings.embedder)
            with span("microrag.chunk") as step:
                chunks = chunk_documents(
                    docs, settings.chunker, settings.size, settings.overlap, settings.max_tokens, embedder
                )
                step.set(chunks=len(chunks))
            with span("microrag.embed", chunks=len(chunks)):  # (the keyword index is fitted here too)
                index = build_index(chunks, settings.keyword, settings.embedder, settings.k1, settings.b, progress=progress)
            index.ann = _maybe_ann(index.vectors, settings)
            return cls(settings, index, docs)

    @classmethod
    def from_paths(cls, paths: Iterable[str | Path], settings: Settings, progress: bool = False) -> Engine:
        """Load every readable document under ``paths`` and index it."""
        from .load import SUPPORTED, load_documents  # the parsers: not on a query's start-up path

        paths = list(paths)
        docs = load_documents(paths, settings.markup)
        if not docs:
            raise CorpusError(f"no readable documents under {', '.join(map(str, paths))}; supported: {' '.join(sorted(SUPPORTED))}")
        return cls.from_documents(docs, settings, progress=progress)

    def retrieve(self, query: str, safeguards: bool | None = None, labels: Iterable[str] | None = None,
                 scoped: bool = True, top_k: int | None = None, where: DocFilter | None = None) -> Retrieval:
        """Step 3 over the chunks whose label is in ``labels`` (all when ``None``).

        ``safeguards=None`` follows the preset (the seed's bare retriever has them off).
        ``scoped=False`` fits keyword statistics over every chunk, hidden ones included
        (the lab baseline's leak, red team #3). ``top_k`` overrides the settings' for
        this call only. ``where`` narrows the documents drawn from (path, collection,
        title, front matter); keyword statistics stay those of the caller's labels.
        """
        settings = self.settings if top_k is None else override(self.settings, top_k=top_k)
        if safeguards is None:
            safeguards = settings.safeguards_on_retrieve
        labels = tuple(labels) if labels is not None else None
        with span("microrag.retrieve", k=settings.top_k, safeguards=safeguards, filtered=where is not None) as step:
            result = self._ranked(query, settings, safeguards, labels, scoped, where)
            if safeguards and settings.hold_mimics and any(restated_question(query, h.chunk.text) for h in result.hits):
                # Ranked again deeper, so the passages held back leave room for others (rare: only then).
                deep = self._ranked(query, override(settings, top_k=settings.top_k + MIMIC_DEPTH), True, labels, scoped, where)
                result = hold_restating(deep, settings.top_k)
            step.set(hits=len(result.hits), refused=result.refused,
                     refused_by=("filter" if "filter" in result.reason else "gate") if result.refused else None,
                     top_score=round(result.hits[0].hybrid, 4) if result.hits else None,
                     held=len(result.held), capped=len(result.capped))
        return replace(result, labels=labels)

    def _ranked(self, query: str, settings: Settings, safeguards: bool, labels: Iterable[str] | None, scoped: bool,
                where: DocFilter | None) -> Retrieval:
        # A filter the database evaluates stays a predicate there (no list of admitted ids per query).
        in_sql = where if self.store is not None and where and self.store.filters(where) else None
        chosen = self.select(where, labels) if where and in_sql is None else None
        if in_sql is not None:
            self._warn_unknown_fields(in_sql, labels)
        if chosen is not None and not chosen:
            return Retrieval(query, [], refused=True, reason=NO_DOCUMENT_MATCHES)
        if self.store is not None:
            qvec = self.index.embedder.embed([query])[0]
            visible = self._visible_labels(labels)
            found, ceiling, floors = self.store.search(query, qvec, visible, n=settings.first_pass,
                                                       docs=sorted(chosen) if chosen is not None else None,
                                                       where=in_sql)
            if in_sql is not None and not found and not self.store.admitted(in_sql, visible, 1):
                return Retrieval(query, [], refused=True, reason=NO_DOCUMENT_MATCHES)
            prior = self._doc_prior(settings)
            penalty = np.array([prior.get(c.doc, 0.0) for c, _, _ in found]) if prior else None
            # Scaled from each leg's least over every chunk they were drawn from, as in memory
            # (retrieve.leg_floors): the same documents rank alike on either backend.
            ranked = rank_candidates(query, [c for c, _, _ in found], np.array([k for _, k, _ in found]),
                                     np.array([e for _, _, e in found]), settings, safeguards, ceiling, penalty,
                                     self._name_prior(query, settings, labels), floors=floors)
            # Both asked of the database only when the answerer reads them (not for a bare retrieve).
            return replace(ranked, weight=StoreWeights(self.store, bm25_tokens(query), visible),
                           known=partial(self.store.holds, labels=visible))
        readable = self.mask(labels)
        scorer = self._scoped_keyword(labels, readable) if scoped else None
        allowed = readable
        if chosen is not None:
            in_docs = np.isin(self.index.chunks.docs(), list(chosen))
            allowed = in_docs if readable is None else readable & in_docs
        result = retrieve(self.index, query, settings, safeguards=safeguards, allowed=allowed, scoped=scorer,
                          penalty=self._penalty(settings), scoped_on=readable,
                          named=self._name_prior(query, settings, labels))
        keyword = scorer or self.index.keyword
        if keyword is None:
            return result
        # Which words the caller's documents hold: only from statistics of exactly what they may read.
        own = scoped and (scorer is not None or readable is None or bool(readable.all()))
        return replace(result, weight=keyword.weight,
                       known=keyword.holds if own and isinstance(keyword, BM25Scorer) else None)

    def select(self, where: DocFilter, labels: Iterable[str] | None = None) -> set[str]:
        """The documents ``where`` admits among those ``labels`` may read (a filter must not
        tell a caller that a document they cannot read exists). In-memory corpora: path,
        title and front matter."""
        visible = self._readable_records(labels)
        self._warn_unknown_fields(where, labels)
        return {doc for doc, rec in visible.items() if where.admits(rec)}

    def _readable_records(self, labels: Iterable[str] | None) -> dict[str, DocRecord]:
        records = self.records or {d.path: DocRecord(d.path, "", meta=_with_title(d)) for d in self.documents}
        readable = None if labels is None else set(labels)
        return {doc: rec for doc, rec in records.items()
                if not rec.label.startswith("_") and (readable is None or rec.label in readable)}

    def _warn_unknown_fields(self, where: DocFilter, labels: Iterable[str] | None) -> None:
        """Say which fields ``where`` names that no document ``labels`` may read has (a typo
        would otherwise just refuse), naming only fields of those documents. Known fields are
        found once per clearance: the records do not change under an engine."""
        key = None if labels is None else tuple(sorted(set(labels)))
        known = self._fields.get(key)
        if known is None:
            visible = self._readable_records(labels)
            known = frozenset(BUILT_IN_FIELDS | {k.lower() for rec in visible.values() for k, _ in rec.meta})
            if len(self._fields) >= 16:  # a handful of clearances in practice; bound it anyway
                self._fields.clear()
            self._fields[key] = known
        unknown = sorted(where.fields() - known)
        if unknown:
            log.warning("no document has the field(s) %s; fields: %s", ", ".join(unknown), ", ".join(sorted(known)))

    def set_tiers(self, tiers: Mapping[str, int]) -> None:
        """The provenance tier of each document that is not the operator's (``Settings.w_provenance``)."""
        self.tiers, self._prior = dict(tiers), None

    def _doc_prior(self, settings: Settings) -> dict[str, float]:
        """The ranking prior per document, computed once per engine: the length prior
        (``retrieve.cap.long_doc_penalty``) plus ``w_provenance`` per provenance tier."""
        key = (settings.w_long_doc, settings.long_doc_chunks, settings.w_provenance)
        if self._prior is None or self._prior[0] != key:
            sizes = ((d, r.n_chunks) for d, r in self.records.items()) if self.store is not None \
                else Counter(self.index.chunks.docs().tolist()).items()
            prior = long_doc_penalty(sizes, settings.w_long_doc, settings.long_doc_chunks)
            for doc, tier in self.tiers.items():
                if tier > 0 and settings.w_provenance > 0:
                    prior[doc] = prior.get(doc, 0.0) + settings.w_provenance * tier
            per_chunk = np.array([prior.get(d, 0.0) for d in self.index.chunks.docs()]) if prior else None
            self._prior = (key, prior, per_chunk)
        return self._prior[1]

    def _name_prior(self, query: str, settings: Settings, labels: Iterable[str] | None) -> dict[str, float]:
        """The name prior of ``query`` per document (``retrieve.names``), with the name statistics
        of what ``labels`` may read: made once per clearance and engine, as the keyword views are."""
        if settings.w_name <= 0:
            return {}
        key = (_clearance(labels), settings.name_rare)
        cache = self._names  # (``relabel`` installs a new one: a build begun before it lands in this one)
        names = cache.get(key)
        if names is None:
            with self._names_lock:  # one build per clearance, however many requests ask at once
                names = cache.get(key)
                if names is None:
                    names = DocNames(self._visible_titles(key[0]), settings.name_rare)
                    if len(cache) >= 16:  # a handful of clearances in practice; bound it anyway
                        cache.clear()
                    cache[key] = names
        return name_boost(names, query, settings.w_name)

    def _visible_titles(self, labels: tuple[str, ...] | None) -> dict[str, str]:
        """Document -> title of what ``labels`` may read: by the chunks' own labels where this
        engine holds them (``relabel`` changes those, not the records), else by the records."""
        if self.store is not None:
            return self.titles(labels)
        table, readable = self.index.chunks, self.mask(labels)
        docs = table.doc_names if readable is None else \
            [table.doc_names[c] for c in np.unique(np.asarray(table.doc_of)[readable])]
        every = self.titles()
        return {d: every.get(d) or Path(d).stem for d in docs}

    def _penalty(self, settings: Settings) -> np.ndarray | None:
        """The length prior per chunk, aligned with ``index.chunks`` (None: no long documents)."""
        self._doc_prior(settings)
        return self._prior[2] if self._prior else None

    def _scoped_keyword(self, labels: Iterable[str] | None, allowed: np.ndarray | None) -> KeywordScorer | None:
        """A keyword scorer with the statistics of the visible chunks only, or None when all are visible.

        BM25 masks its postings (``BM25Scorer.masked``: N, df and avgdl of what ``allowed``
        admits, scores equal to a fit on those chunks alone); the seed's TF-IDF is re-fitted
        on them. Made once per label set and engine, so a caller's statistics never include
        a chunk they cannot read.
        """
        if allowed is None or allowed.all() or not allowed.any():
            return None
        key = tuple(sorted(set(labels))) if labels is not None else ("*",)
        scorer = self._scoped.get(key)
        if isinstance(scorer, BM25Scorer) and not scorer.masked_to(allowed):
            scorer = None  # labels were changed in place since it was made (tests do): make it again
        if scorer is None:  # threads may race to make it: both results are the same, last one kept
            if len(self._scoped) >= 16:  # a handful of clearances in practice; bound it anyway
                self._scoped.clear()
            s = self.settings
            if isinstance(self.index.keyword, BM25Scorer):
                # The view keeps the mask: a copy unless it is read-only (Engine.mask's are).
                scorer = self.index.keyword.masked(allowed if not allowed.flags.writeable else allowed.copy())
            else:
                texts = [self.index.chunks[i].text for i in np.flatnonzero(allowed)]
                scorer = make_keyword(s.keyword, k1=s.k1, b=s.b).fit(texts)
            self._scoped[key] = scorer
        return scorer

    def titles(self, labels: Iterable[str] | None = None) -> dict[str, str]:
        """Document -> title (front matter's, else its first heading, else the file name),
        for the documents whose label is in ``labels`` (every unreserved one for ``None``);
        what a page offers as things to ask about."""
        if self.records:
            seen = {d.doc: (d.label, dict(d.meta).get("title", "")) for d in self.records.values()}
        else:  # built from documents: every chunk is public, as in ``retrieve``
            seen = {d.path: ("public", title_of(d)) for d in self.documents}
        allowed = None if labels is None else set(labels)
        return {doc: title or Path(doc).stem for doc, (label, title) in seen.items()
                if not label.startswith("_") and (allowed is None or label in allowed)}

    def title(self, doc: str) -> str:
        """One document's title, as :meth:`titles` gives it (no scan of the others when stored)."""
        rec = self.records.get(doc)
        if rec is not None:
            return dict(rec.meta).get("title", "") or Path(doc).stem
        found = next((d for d in self.documents if d.path == doc), None)
        return title_of(found) if found is not None else Path(doc).stem

    @property
    def n_chunks(self) -> int:
        """Chunks behind this engine (counted in the store when retrieval is remote)."""
        if self.store is not None:
            return sum(d.n_chunks for d in self.records.values())
        return len(self.index.chunks)

    def rank(self, query: str, labels: Iterable[str] | None = None) -> Retrieval:
        """The ranking protocol: always with the gate and the diversity cap."""
        return self.retrieve(query, safeguards=True, labels=labels)

    def ask(
        self,
        query: str,
        llm: LLMConfig | None = None,
        on_piece: Callable[[str], None] | None = None,
        labels: Iterable[str] | None = None,
        verify: bool = False,
        top_k: int | None = None,
        spotlight: bool = True,
        where: DocFilter | None = None,
    ) -> Answer:
        """Steps 3-6: retrieve with the gate and the cap, then :meth:`answer`."""
        with span("microrag.ask"):
            retrieval = self.retrieve(query, safeguards=True, labels=labels, top_k=top_k, where=where)
            return self.answer(query, retrieval, llm, on_piece=on_piece, verify=verify, spotlight=spotlight)

    def condense(self, turns: Sequence[Turn], llm: LLMConfig | None = None, scope: str = "") -> Condensed:
        """The retrieval query of a conversation's last user message (``Settings.condense``;
        ``retrieve.conversation``; ``scope``: whose rewrite cache). Raises ``MicroRAGError``
        when no user message is there."""
        try:
            return retrieval_query(turns, self.settings.condense, llm, scope)
        except ValueError as exc:
            raise MicroRAGError(str(exc)) from None

    def converse(
        self,
        turns: Sequence[Turn],
        llm: LLMConfig | None = None,
        on_piece: Callable[[str], None] | None = None,
        labels: Iterable[str] | None = None,
        verify: bool = False,
        top_k: int | None = None,
        spotlight: bool = True,
        where: DocFilter | None = None,
    ) -> Answer:
        """:meth:`ask` for the last user message of a conversation: retrieval searches for
        what the conversation is about (:meth:`condense`), the model reads the earlier turns."""
        with span("microrag.ask", turns=len(turns)):
            said = self.condense(turns, llm)
            retrieval = self.retrieve(said.query, safeguards=True, labels=labels, top_k=top_k, where=where)
            ans = self.answer(said.question, retrieval, llm, on_piece=on_piece, verify=verify, spotlight=spotlight,
                              history=earlier_turns(turns))
        ans.condensed = said
        return ans

    def answer(
        self,
        query: str,
        retrieval: Retrieval,
        llm: LLMConfig | None = None,
        *,
        on_piece: Callable[[str], None] | None = None,
        verify: bool = False,
        spotlight: bool = True,
        tools: FileTool | None = None,
        deadline: float | None = None,
        history: Sequence[Turn] = (),
    ) -> Answer:
        """Steps 4-6 for ``retrieval``: the one answer path of the library, CLI and server.

        With ``llm`` the model answers from the spotlighted prompt (streamed to
        ``on_piece``); else, or when the gate refused, the extractive answerer quotes
        the chunks: a refusal never reaches the model (nothing to ground an answer on,
        and a model asked anyway tends to guess). ``verify`` checks every sentence
        against the chunks (step 6; with a ``drop``/``refuse`` policy ``text`` is the
        text after the policy, while pieces already streamed are the model's raw words);
        a backend that cannot load is flagged, not raised, so the answer survives.
        ``tools`` runs the file-tool calls the model makes (appended to the text).
        ``deadline`` (``time.monotonic()``) cuts the model's stream and skips
        verification once passed, each flagged ``budget:``/``verify:``. ``history``: the
        conversation before ``query``, shown to the model (the extractive answerer quotes
        for ``retrieval.query``, which in a conversation is the condensed query).
        """
        with span("microrag.answer", passages=len(retrieval.hits), llm=llm is not None and not retrieval.refused,
                  verify=verify) as step:
            ans = self._answered(query, retrieval, llm, on_piece=on_piece, verify=verify, spotlight=spotlight,
                                 tools=tools, deadline=deadline, history=history)
            step.set(mode=ans.mode, refused=ans.refused, refused_by=refused_by(ans) if ans.refused else None,
                     truncated=ans.truncated, tools=len(ans.tools), conflicts=len(ans.conflicts))
        return ans

    def _answered(
        self,
        query: str,
        retrieval: Retrieval,
        llm: LLMConfig | None = None,
        *,
        on_piece: Callable[[str], None] | None = None,
        verify: bool = False,
        spotlight: bool = True,
        tools: FileTool | None = None,
        deadline: float | None = None,
        history: Sequence[Turn] = (),
    ) -> Answer:
        def over() -> bool:
            return deadline is not None and time.monotonic() > deadline

        disputed, notes = self.conflicts(retrieval) if not retrieval.refused else ([], [])
        if disputed:
            # Shown as the disagreement it is: no model gets to blend the two into one answer.
            text = conflict_answer(disputed)
            if on_piece:
                on_piece(text)
            return Answer(text, "conflict", retrieval, flags=notes, conflicts=disputed)
        retrieval = self.with_context(retrieval)
        if llm is None or retrieval.refused:
            s = self.settings
            asked = retrieval.query if history else query
            reader = load_answer_model(s.answer_model) if s.answer_model else None
            said = extract(asked, retrieval, self.index.embedder, retrieval.weight, s.answer_min_support,
                           s.answer_max_missing, s.answer_rescue_sem, s.answer_selector, reader, s.answer_rerank,
                           s.answer_min_answers)
            if on_piece:
                on_piece(said.text)
            ans = Answer(said.text, "extractive", retrieval, flags=list(notes), refused=bool(said.refusal),
                         reason=said.refusal)
        else:
            stream = ChatStream(llm, build_messages(query, retrieval.passages, spotlight=spotlight, history=history),
                                deadline=deadline)
            ans = Answer("".join(_tee(stream, on_piece)), "llm", retrieval, truncated=stream.truncated, flags=list(notes))
            # Only the sentence itself, as the prompt asks: a reply that opens with it and goes on
            # says something, and is verified like any other.
            if ans.text.strip().strip('"').strip().replace("\u2019", "'") == NOT_IN_DOCUMENTS:
                ans.refused, ans.reason = True, "the model found no answer in the passages"
            if stream.truncated and over():
                ans.flags.append("budget: the answer was cut at the request's time budget")
        if verify and not ans.refused:
            if over():
                ans.flags.append("verify: skipped, the request budget is spent")
            else:
                # The model's own words against the chunks it was given, before tool output.
                began = time.perf_counter()
                backend = self.settings.nli if self.settings.nli in ("shipped", "llm") else "folder"  # (never the path)
                with span("microrag.verify", backend=backend, policy=self.settings.verify_policy) as step:
                    try:
                        ans.verification = self.verify(ans.text, retrieval)
                    except MicroRAGError as exc:  # a missing model must not cost the answer
                        ans.flags.append(f"verify: unavailable ({exc})")
                        step.set(unavailable=True)
                    else:
                        ans.text = ans.verification.text
                        if not ans.verification.supported:
                            ans.flags.append("verify: " + ans.verification.summary())
                        if ans.text.lstrip().startswith(NOT_SUPPORTED):
                            ans.refused = True
                            ans.reason = "verification: " + (ans.verification.off_question or ans.verification.summary())
                        counts = ans.verification.counts
                        step.set(sentences=len(ans.verification.sentences), entailed=counts[ENTAILED],
                                 neutral=counts[NEUTRAL], contradicted=counts[CONTRADICTED],
                                 supported=ans.verification.supported, refused=ans.refused)
                ans.verify_seconds = time.perf_counter() - began
        if tools is not None and ans.mode == "llm":
            # Only files the user's own message names (``query``: this turn's, never history).
            ans.tools = tools.run(ans.text, [h.chunk.text for h in retrieval.passages], query)
            for t in ans.tools:
                ans.text += f"\n[tool {t.call}: " + (t.output if t.ran else f"not run - {t.refused}") + "]"
        return ans

    def with_context(self, retrieval: Retrieval) -> Retrieval:
        """``retrieval`` with the ``context_chunks`` neighbours of each hit in its document
        (``Retrieval.context``): what the answer may also quote. Under the retrieval's own
        clearance (``Retrieval.labels``; labels as stored now on a database), and never a
        chunk the ranking kept out: one held back or pushed out by the diversity cap, or one
        that restates the question when mimics are held (a planted passage next to a hit
        stays out as it would have as a hit)."""
        n = self.settings.context_chunks
        if n == 0 or retrieval.refused or not retrieval.hits or retrieval.context is not None:
            return retrieval  # nothing to add, or fetched already (the server fetches before answering)
        have = {(h.chunk.doc, h.chunk.index) for h in retrieval.hits}
        kept_out = {i for i, _ in retrieval.held} | set(retrieval.capped)
        want: dict[tuple[str, int], None] = {}
        for h in retrieval.hits[:MAX_CONTEXT_HITS]:
            for d in range(1, n + 1):
                for i in (h.chunk.index - d, h.chunk.index + d):
                    if i >= 0 and (h.chunk.doc, i) not in have:
                        want[(h.chunk.doc, i)] = None
        places = list(want)
        if self.store is not None:
            found = self.store.chunks_at(places, self._visible_labels(retrieval.labels))
        else:
            readable = self.mask(retrieval.labels)
            found = [self.index.chunks[r] for r in self.index.chunks.rows_at(places) if readable is None or readable[r]]
        mimics = self.settings.hold_mimics
        by_place = {(c.doc, c.index): c for c in found
                    if c.id not in kept_out and not (mimics and restated_question(retrieval.query, c.text))}
        context = [Hit(by_place[p], 0.0, 0.0, 0.0, 0.0, 0.0) for p in places if p in by_place]
        return replace(retrieval, context=context)

    def conflicts(self, retrieval: Retrieval) -> tuple[list[Conflict], list[str]]:
        """Whether the retrieved sources contradict each other about the query (``verify.conflict``):
        (the conflicts, notes for the caller). An NLI model that cannot load is a note, not an error."""
        s = self.settings
        if not s.conflicts or len({h.chunk.doc for h in retrieval.hits}) < 2:
            return [], []
        try:
            model = load_nli(s.nli if s.nli != "llm" else "shipped")  # a judge by chat is too slow for every answer
        except MicroRAGError as exc:
            return [], [f"conflict check: unavailable ({exc})"]
        if not isinstance(model, NLIModel):
            return [], []
        hits = [(h.chunk.id, h.chunk.doc, h.chunk.text) for h in retrieval.hits]
        found = find_conflicts(retrieval.query, hits, model, s.min_conflict)
        return found, [f"conflict: {c.first.doc} and {c.second.doc} disagree (p={c.probability:.2f})" for c in found]

    def verify(self, answer: str, retrieval: Retrieval) -> Verification:
        """Step 6: every sentence of ``answer`` against the retrieved chunks (settings' backend and policy),
        and whether the supported ones answer the retrieval's question."""
        def relevance_of(question: str, texts: list[str], sources: list[str]) -> Relevance:
            return relevance(question, texts, sources, self.index.embedder, retrieval.weight,
                             common=self.index.embedder.vocabulary())

        # The NLI grid is sentences x passages: checked against the passages the answer cites and
        # the best MAX_VERIFY_PASSAGES others, so a caller's top_k cannot multiply its cost.
        passages = [h for n, h in enumerate(retrieval.passages)
                    if n < MAX_VERIFY_PASSAGES or citation(h) in answer or citation_of(h.chunk.doc, h.chunk.index) in answer]
        return verify_with(self.settings, answer, [(h.chunk.id, h.chunk.text) for h in passages],
                           question=retrieval.query, relevance_of=relevance_of)


MIMIC_DEPTH = 8  # extra hits ranked so that held-back passages can be replaced
MAX_VERIFY_PASSAGES = 16  # passages every answer sentence is checked against, besides those it cites
MAX_CONTEXT_HITS = 8  # hits whose neighbours join the answer's context (a top_k of 50 is not 150 passages)


def hold_restating(r: Retrieval, top_k: int) -> Retrieval:
    """``r`` cut to ``top_k`` hits, without the passages that restate its query (``retrieve.mimic``)
    when at least one other passage passed the gate; when none did they stay, marked ``restating``."""
    said = {h.chunk.id: restated_question(r.query, h.chunk.text) for h in r.hits}
    mimics = [(h.chunk.id, said[h.chunk.id]) for h in r.hits if said[h.chunk.id]]
    others = [h for h in r.hits if not said[h.chunk.id]]
    if mimics and others:
        return replace(r, hits=others[:top_k], held=mimics)
    kept = r.hits[:top_k]
    ids = {h.chunk.id for h in kept}
    return replace(r, hits=kept, restating=[m for m in mimics if m[0] in ids])


def earlier_turns(turns: Sequence[Turn]) -> list[Turn]:
    """The conversation before its last user message."""
    last = max((i for i, t in enumerate(turns) if t.role == "user"), default=len(turns))
    return list(turns[:last])


def _clearance(labels: Iterable[str] | None) -> tuple[str, ...] | None:
    """A label set as the key of what is cached per clearance: sorted, reserved labels dropped
    (nobody reads ``_quarantine``); None: every unreserved label."""
    return None if labels is None else tuple(sorted({x for x in labels if not x.startswith("_")}))


class StoreWeights:
    """A question's word weights (BM25 IDF under the caller's labels) from a database, fetched
    in one round trip on the first call: the answerer weighs words with it as it does with an
    in-memory index's (``Retrieval.weight``)."""

    def __init__(self, store: SearchableStore, terms: list[str], labels: list[str] | None) -> None:
        self.store, self.terms, self.labels = store, terms, labels
        self._idf: dict[str, float] | None = None

    def __call__(self, term: str) -> float:
        if self._idf is None or term not in self._idf:
            self._idf = {**(self._idf or {}), **self.store.idf([*self.terms, term], self.labels)}
        return self._idf[term]


def _with_title(doc: Document) -> tuple[tuple[str, str], ...]:
    meta = dict(doc.meta)
    meta.setdefault("title", title_of(doc))
    return tuple(meta.items())


def _guarded(docs: list[Document], settings: Settings) -> list[Document]:
    """The documents as ``microrag ingest`` would store them (one DLP policy for every front end)."""
    from .ingest import dlp_named, guarded  # DLP and the ingest policy: not on a query's start-up path

    out, found, key = [], 0, secrets.token_hex(16)  # names unique to this engine: it is not stored
    for doc in docs:
        named, in_name = dlp_named(doc, settings, key)  # a name goes through DLP as the text does (#33)
        kept, _, counts = guarded(named, settings)  # in memory every chunk is public: "label" mode only reports
        found += bool(counts) or bool(in_name)
        out.append(kept)
    if found:
        log.warning("DLP (%s) changed %d of %d document(s); 'microrag ingest' names them", settings.dlp, found, len(docs))
    return out


def _maybe_ann(vectors: np.ndarray, settings: Settings, cache: Path | None = None,
               labels: Sequence[str] | np.ndarray | None = None) -> HNSW | None:
    """An ANN first pass when the index is large enough and faiss is installed, partitioned
    by ``labels`` (one per chunk; None: one partition) so a clearance searches only its own."""
    if len(vectors) < settings.ann_threshold:
        return None
    if not faiss_available():
        log.warning("%d chunks but faiss is not installed: scoring every vector exactly "
                    "(pip install 'microrag-engine[ann]' for an HNSW first pass)", len(vectors))
        return None
    return HNSW(vectors, labels, cache=cache)


def _next_ann(ann: HNSW | None, vectors: np.ndarray, settings: Settings, labels: Sequence[str] | np.ndarray,
              remap: np.ndarray) -> HNSW | None:
    """The ANN first pass after a write: ``ann``'s graphs carried over (``remap``: each old
    row's new row, -1 if gone) where there is one, else derived as at open."""
    if ann is None or len(vectors) < settings.ann_threshold:
        return _maybe_ann(vectors, settings, None, labels)
    return ann.updated(vectors, remap, labels)


def _derived_manifest(store: Store, settings: Settings, embedder: Embedder, generation: int) -> dict[str, object]:
    """What a generation's saved files must have been built from and with; anything else is
    derived again."""
    return {"store": store.identity(), "generation": generation, "keyword": settings.keyword == "bm25",
            "k1": settings.k1, "b": settings.b, "tokens": bm25_fingerprint(), "embedder": embedder.name,
            "dim": embedder.dim}


def _remap(keep: np.ndarray, at: np.ndarray, n: int) -> np.ndarray:
    """Each old row's place after a write that kept the rows ``keep`` (in order) and put new
    ones at ``at`` (as ``interleave`` lays them out); -1 for a row removed."""
    free = np.ones(n, dtype=bool)
    free[at] = False
    remap = np.full(len(keep), -1, dtype=np.int64)
    remap[np.flatnonzero(keep)] = np.flatnonzero(free)
    return remap


def _tee(stream: Iterable[str], on_piece: Callable[[str], None] | None) -> Iterator[str]:
    for piece in stream:
        if on_piece:
            on_piece(piece)
        yield piece


def _changed(before: Mapping[str, DocRecord], after: Mapping[str, DocRecord]) -> set[str]:
    """Documents added, removed or rewritten between two reads of a store's records."""
    return {d for d in before.keys() | after.keys() if before.get(d) != after.get(d)}


def _places(table: ChunkTable, keep: np.ndarray, new: Sequence[Chunk]) -> np.ndarray:
    """Where each of ``new`` (in the store's order) goes among the kept rows of ``table`` so
    that the result is in the store's order too - by document, then chunk index - as
    ``from_store`` lays an index out: equal ties then break the same way in both."""
    counts = np.bincount(np.asarray(table.doc_of)[keep], minlength=len(table.doc_names))
    docs = sorted((table.doc_names[int(c)], int(counts[c])) for c in np.flatnonzero(counts))
    names = [d for d, _ in docs]
    ahead = np.concatenate([[0], np.cumsum([n for _, n in docs], dtype=np.int64)])  # kept rows before each document
    return np.array([j + int(ahead[bisect.bisect_left(names, c.doc)]) for j, c in enumerate(new)], dtype=np.int64)


def _record_row(r: DocRecord) -> list:
    """A document's record as a JSON row for the saved index (``_row_record`` reads it)."""
    return [r.doc, r.content_hash, r.label, r.principal, r.origin, r.ingested_at, r.n_chunks, r.collection, dict(r.meta)]


def _row_record(row: list) -> DocRecord:
    doc, content_hash, label, principal, origin, ingested_at, n_chunks, collection, meta = row
    return DocRecord(doc, content_hash, label, principal, origin, ingested_at, int(n_chunks), collection,
                     tuple((str(k), str(v)) for k, v in meta.items()))


_drift_warned: set[str] = set()


def _warn_drift(meta: dict[str, str], digest: str) -> None:
    """Say once per process when an index's vectors came from another build of the embedder."""
    message = embedder_drift(meta, digest)
    if message and message not in _drift_warned:
        _drift_warned.add(message)
        log.warning(message)
