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

Cost: one ranking per probe over the live chunks (exact scores, no ANN): about
a query's cost times ~100-300 probes per upload.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files

import numpy as np

from ..engine import Engine
from ..index.embed import Embedder
from ..retrieve import keyword_ceiling, rank_candidates

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
          labels: Iterable[str] | None = None) -> Surfacing:
    """Which of ``questions`` would rank ``doc`` (already in ``engine``'s index, not yet live)
    in the top-K against the live chunks of ``labels`` (all live ones when None): the uploader's
    clearance, so whether an upload is held never depends on documents its uploader cannot read."""
    index, settings = engine.index, engine.settings
    docs = index.chunks.docs()
    mine = docs == doc
    readable = None if labels is None else set(labels)
    live = np.array([not str(label).startswith("_") and (readable is None or label in readable)
                     for label in engine.labels], dtype=bool)
    cand = np.flatnonzero((live & ~mine) | mine)
    if not mine.any() or not questions:
        return Surfacing([], [])
    chunks = [index.chunks[i] for i in cand]
    qv = vectors(list(questions))
    em_all = index.vectors[cand] @ qv.T  # (candidates, probes): one product for every probe
    won: list[int] = []
    by_passage: dict[str, list[int]] = {}
    for j, q in enumerate(questions):
        r = rank_candidates(q, chunks, index.kw_scores(q)[cand], em_all[:, j], settings, True, keyword_ceiling(index, q))
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
