"""Screening an upload before it goes live, whoever sent it (#19).

Trust decides who may skip the review queue; it says nothing about the content, and a
trusted key can be stolen. So every upload is read before it goes live:

* hidden text (``screen.hidden``): what the page hides from its reader;
* prompt injection (``screen.injection``): a trained classifier per sentence window,
  beyond the phrase heuristics of ``guard.injection_check``;
* shape (``screen.shape``): keyword stuffing, copies of the uploader's own live
  documents (slots past the per-source cap), sentences asking readers for credentials;
* collisions (``screen.collision``): for how many unrelated probe questions (the
  shipped generic set and this server's recent queries) the document would enter the
  top-K against everything already live.

A reason from any of them holds the upload for review (``_quarantine``), with the
reasons in the queue and in the response. The collision probe needs the document's
chunks and vectors, so the upload is first written under ``_quarantine`` and probed
there; nothing is live until it passes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from ..engine import Engine
from ..screen.collision import LivePasses, ProbeVectors, generic_probes, probe
from ..screen.content import content_reasons
from ..screen.shape import copy_of
from ..types import Document
from .state import ServerState

RECENT_QUERIES = 200  # of the audit trail's latest distinct questions, added to the probes


class Screening:
    """The checks of one server (probe vectors cached across uploads)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._vectors: ProbeVectors | None = None
        self._passes = LivePasses()  # a database's live first pass per probe, across uploads
        self._lock = threading.Lock()

    def content(self, name: str, raw: str, docs: list[Document]) -> list[str]:
        """Reasons read from the upload alone (``screen.content``)."""
        return content_reasons(name, raw, "\n".join(d.text for d in docs))

    def copies(self, engine: Engine, doc: str, owner: str) -> list[str]:
        """A reason when ``doc`` is a copy of a live document of the same uploader (``owner``)."""
        mine = [d for d, r in engine.records.items() if r.principal == owner and d != doc and not r.label.startswith("_")]
        if not mine:
            return []
        if engine.store is not None:  # retrieval runs in the database: the chunks are there
            texts = engine.store.texts_of([doc, *mine])
        else:
            texts = engine.index.chunks.texts_by_doc([doc, *mine])
        found = copy_of(texts.get(doc, ""), ((d, texts.get(d, "")) for d in mine))
        return [found] if found else []

    def collision(self, engine: Engine, doc: str, labels: Iterable[str]) -> list[str]:
        """A reason when ``doc`` (in ``engine``'s index, not live) would sweep the top-K of what ``labels`` may read."""
        questions = list(dict.fromkeys([*generic_probes(), *self.state.recent_queries(RECENT_QUERIES)]))
        with self._lock:  # one embedding cache, filled by one upload at a time
            if self._vectors is None or self._vectors.embedder is not engine.index.embedder:
                self._vectors = ProbeVectors(engine.index.embedder)
            found = probe(engine, doc, questions, self._vectors, labels, self._passes)
        return [found.reason()] if found.sweeping else []
