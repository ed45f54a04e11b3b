"""The collision probe: would this document enter the top-K for many unrelated questions?

An embedding-collision document is written to match everything; a reviewer reading
it sees a bland FAQ. So before a document goes live it is ranked, exactly as a
query would rank it (``retrieve.rank_candidates``: both legs, the grounding gate,
the diversity cap) against everything already live, for a set of probe
questions: a generic set shipped with the package (``data/probes/generic.txt``,
~100 questions on unrelated subjects) and the index's own recent queries (the
server's audit trail). A document one of whose passages (chunks) would enter the
top-K for at least ``MIN_UNRELATED`` *mutually unrelated* probes (pairwise query
cosine below ``UNRELATED``) is held for review, whoever uploaded it. Per passage, because that is the collision's signature:
a genuine long page (a FAQ, release notes) answers many unrelated questions, each
with the passage on that subject; a colliding passage answers them all by itself.
Measured on 120 Python-docs pages and the handbook uploaded to a handbook server whose
recent queries are the handbook QA set's 63 questions: counted per document (cosine
< 0.35), 23 of 134 genuine pages won 5+ unrelated probes; per passage, 2; per passage
with the stricter 0.2 (a benefits overview answers insurance, pension and gym questions,
which are related enough), none - while a page of one-line answers on unrelated
subjects wins 7.

Cost: one ranking per probe, as a query ranks (exact below ``ann_threshold``, each leg's
first pass above it): about a query's cost times ~100-300 probes per upload.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from importlib.resources import files
from typing import NamedTuple

import numpy as np

from ..engine import Engine
from ..index.embed import Embedder
from ..retrieve import first_pass, keyword_ceiling, leg_floors, rank_candidates
from ..store.base import SearchableStore
from ..types import Retrieval

MIN_UNRELATED = 5  # mutually unrelated probes one passage may win before its document is held
UNRELATED = 0.2  # two probe questions with a cosine below this are about different things


@dataclass(frozen=True)
class Surfacing:
    """The probes a document would win, and the mutually unrelated ones its most sweeping passage wins."""

    probes: list[str]
    unrelated: list[str]
    passage: str = ""  # the chunk id that wins them

    @property
    def sweeping(self) -> bool:
        return len(self.unrelated) >= MIN_UNRELATED

    def reason(self) -> str:
        """Why it is held, for the uploader: shipped probes only, quoted and counted. Other users'
        questions (the server's recent queries) are not the uploader's to read, nor how many there were."""
        generic = set(generic_probes())
        mine = [q for q in self.unrelated if q in generic]
        shown = "; ".join(repr(q) for q in mine[:4])
        return (f"collision: passage {self.passage} would enter the top-K for questions about unrelated things"
                + (f", {len(mine)} of the shipped probes among them (e.g. {shown})" if mine else "")
                + ": a passage written to match everything")


@lru_cache(maxsize=1)
def generic_probes() -> tuple[str, ...]:
    """The shipped probe questions."""
    text = files("microrag_engine").joinpath("data/probes/generic.txt").read_text(encoding="utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


class ProbeVectors:
    """Probe questions embedded once per process (the generic set) or once per text (recent queries)."""

    def __init__(self, embedder: Embedder, limit: int = 4096) -> None:
        self.embedder, self.limit = embedder, limit
        self.cache: dict[str, np.ndarray] = {}

    def __call__(self, questions: Sequence[str]) -> np.ndarray:
        new = [q for q in dict.fromkeys(questions) if q not in self.cache]
        if len(self.cache) + len(new) > self.limit:
            self.cache.clear()
            new = list(dict.fromkeys(questions))
        for q, v in zip(new, self.embedder.embed(new) if new else []):
            self.cache[q] = v
        return np.stack([self.cache[q] for q in questions]) if questions else np.zeros((0, self.embedder.dim))


def mutually_unrelated(questions: Sequence[str], vectors: np.ndarray, below: float = UNRELATED) -> list[str]:
    """A greedy set of ``questions`` whose pairwise cosine is below ``below`` (in the given order)."""
    chosen: list[int] = []
    for i in range(len(questions)):
        if all(float(vectors[i] @ vectors[j]) < below for j in chosen):
            chosen.append(i)
    return [questions[i] for i in chosen]


def probe(engine: Engine, doc: str, questions: Sequence[str], vectors: ProbeVectors,
          labels: Iterable[str] | None = None, passes: LivePasses | None = None) -> Surfacing:
    """Which of ``questions`` would rank ``doc`` (already in ``engine``'s index, not yet live)
    in the top-K against the live chunks of ``labels`` (all live ones when None): the uploader's
    clearance, so whether an upload is held never depends on documents its uploader cannot read.
    On a database (``SearchableStore``) each probe's first pass over the live chunks comes from
    ``passes`` (kept a while across uploads), the document's own chunks from the database."""
    readable = None if labels is None else set(labels)
    if not questions:
        return Surfacing([], [])
    store = engine.store
    rank: Callable[[str, np.ndarray], Retrieval]
    if store is not None:  # retrieval runs in the database
        if doc not in engine.records:
            return Surfacing([], [])
        live = sorted({r.label for r in engine.records.values()
                       if not r.label.startswith("_") and (readable is None or r.label in readable)})
        rank = partial(_ranked_in_store, engine, store, doc, live, passes or LivePasses(max_age=0))
    else:
        mine = engine.index.chunks.docs() == doc
        if not mine.any():
            return Surfacing([], [])
        live_chunks = np.array([not str(label).startswith("_") and (readable is None or label in readable)
                                for label in engine.labels], dtype=bool)
        live_only, either = live_chunks & ~mine, live_chunks | mine
        for mask in (live_only, either):  # read-only: the ANN keeps its search plan for a mask it knows unchanged
            mask.setflags(write=False)
        rank = partial(_ranked, engine, live=live_only, mine=mine, either=either)
    qv = vectors(list(questions))
    won: list[int] = []
    by_passage: dict[str, list[int]] = {}
    for j, q in enumerate(questions):
        r = rank(q, qv[j])
        mine_here = [h.chunk.id for h in r.hits if h.chunk.doc == doc]
        if mine_here:
            won.append(j)
        for cid in mine_here:
            by_passage.setdefault(cid, []).append(j)
    best: list[str] = []
    passage = ""
    for cid, js in by_passage.items():
        unrelated = mutually_unrelated([questions[j] for j in js], qv[js])
        if len(unrelated) > len(best):
            best, passage = unrelated, cid
    return Surfacing([questions[j] for j in won], best, passage)


def _ranked(engine: Engine, question: str, qv: np.ndarray, live: np.ndarray, mine: np.ndarray,
            either: np.ndarray) -> Retrieval:
    """``question`` ranked over the ``live`` chunks and the document's own (``mine``), as a query
    ranks it: every chunk scored below ``ann_threshold``; above it, each leg's first pass over
    the live chunks (what a query's candidates would be) and every chunk of the document, so a
    colliding passage is never missed for falling outside the first pass, and a probe costs a
    query's time rather than a pass over a million chunks."""
    index, settings = engine.index, engine.settings
    floors: tuple[float | None, float | None] = (None, None)
    if index.ann is None:
        cand = np.flatnonzero(either)
        kw = index.kw_scores(question)[cand]
    else:
        first, _ = first_pass(index, index.keyword, question, qv, settings.first_pass, live,
                              lambda: index.kw_scores(question))
        cand = np.union1d(first, np.flatnonzero(mine))
        kw = index.keyword.scores_at(question, cand) if index.keyword is not None else np.zeros(len(cand))
        floors = leg_floors(index, qv, either)
    return rank_candidates(question, [index.chunks[i] for i in cand], kw, index.vectors[cand] @ qv, settings, True,
                           keyword_ceiling(index, question), floors=floors)


def _ranked_in_store(engine: Engine, store: SearchableStore, doc: str, labels: list[str], passes: LivePasses,
                     question: str, qv: np.ndarray) -> Retrieval:
    """``question`` ranked as the database ranks a query of ``labels``: the live chunks' first
    pass (its chunks from ``passes``, those of documents no longer live left out) and every
    chunk of ``doc``, all scored now with the statistics of ``labels`` and ``doc`` together (the
    upload counted as if live: a word only it holds weighs what it will then)."""
    live_docs = {d for d, r in engine.records.items() if r.label in labels and d != doc}
    live = passes(store, question, qv, labels, engine.settings.first_pass)
    rows, ceiling = store.scores_of(question, qv, labels, [doc], [cid for cid, d in live.found if d in live_docs])
    # Scaled as a query will scale them once the upload is live: from the floors over the live
    # chunks and the upload together (none where the first pass held every live chunk).
    kw_floor, em_floor = live.floors
    if em_floor is not None:
        em_floor = min([em_floor] + [e for c, _, e in rows if c.doc == doc])
    return rank_candidates(question, [c for c, _, _ in rows], np.array([k for _, k, _ in rows]),
                           np.array([e for _, _, e in rows]), engine.settings, True, ceiling, floors=(kw_floor, em_floor))


# How long a probe's first pass over a database's live chunks is reused (``LivePasses``).
LIVE_PASS_S = 600.0


class LivePass(NamedTuple):
    found: list[tuple[str, str]]  # (chunk id, document) of the first pass
    floors: tuple[float | None, float | None]  # each leg's over the live chunks (``Candidates.floors``)


class LivePasses:
    """Each probe question's first pass over the live chunks of a clearance, from the database
    (``SearchableStore.search``): which chunks, of which documents, and each leg's floor, kept ``max_age`` seconds
    (asked again for every upload, ~300 probes would cost ~300 searches under the write lock
    each time). The chunks are scored again for each upload; what the kept pass misses is the
    documents that went live since, which are not among the candidates (a page then looks
    likelier to win than it is: held for a person, not waved through). Documents removed since
    are dropped by the caller."""

    def __init__(self, max_age: float = LIVE_PASS_S, limit: int = 4096) -> None:
        self.max_age, self.limit = max_age, limit
        self.store: SearchableStore | None = None
        self.kept: dict[tuple[str, tuple[str, ...], int], tuple[float, LivePass]] = {}

    def __call__(self, store: SearchableStore, question: str, qv: np.ndarray, labels: list[str], n: int) -> LivePass:
        """The first pass for ``question`` over ``labels``."""
        if store is not self.store:
            self.store, self.kept = store, {}
        key, now = (question, tuple(labels), n), time.monotonic()
        hit = self.kept.get(key)
        if hit is not None and now - hit[0] < self.max_age:  # (0: never reused)
            return hit[1]
        got = store.search(question, qv, labels, n=n)
        found = LivePass([(c.id, c.doc) for c, _, _ in got.rows], got.floors)
        if len(self.kept) >= self.limit:
            self.kept = {k: v for k, v in self.kept.items() if now - v[0] < self.max_age}  # the expired go first
            if len(self.kept) >= self.limit:
                self.kept.clear()
        self.kept[key] = (now, found)
        return found
