"""The records every step passes along: documents, chunks, retrieval hits.

Plain frozen dataclasses with no behaviour beyond presenting themselves; every
layer may import them, and they import nothing of ours.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Turn:
    """One message of a conversation, as OpenAI's chat API spells it (``role``, ``content``)."""

    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass(frozen=True)
class Chunk:
    """One retrievable unit. ``text == source_text[start:end]`` for chunks we cut."""

    id: str
    doc: str
    index: int
    start: int
    end: int
    text: str
    page: int = 0  # the page it starts on, for paged sources (PDF); 0 = not paged


@dataclass(frozen=True)
class Document:
    """A loaded document. ``prechunked`` holds chunks that came ready-made (.jsonl)."""

    path: str
    text: str
    prechunked: tuple[Chunk, ...] = field(default=())
    meta: tuple[tuple[str, str], ...] = field(default=())  # front-matter key/values, e.g. label


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk with every score that decided its place."""

    chunk: Chunk
    hybrid: float
    kw: float  # keyword leg, normalised over the candidates (above ann_threshold: scaled from its least over every visible chunk)
    em: float  # embedding leg, likewise
    raw_kw: float
    raw_em: float
    rerank: float | None = None  # p(relevant) from the cross-encoder, when reranking is on

    def as_dict(self) -> dict[str, Any]:
        c = self.chunk
        return {
            "id": c.id, "doc": c.doc, "chunk": c.index, "start": c.start, "end": c.end,
            "hybrid": self.hybrid, "kw": self.kw, "em": self.em,
            "raw_kw": self.raw_kw, "raw_em": self.raw_em, "rerank": self.rerank, "text": c.text,
            **({"page": c.page} if c.page else {}),
        }


@dataclass(frozen=True)
class Retrieval:
    """The outcome of one query: hits, or a refusal with its reason."""

    query: str
    hits: list[Hit]
    refused: bool = False
    reason: str = ""
    best_raw_kw: float = 0.0
    best_raw_em: float = 0.0
    capped: list[str] = field(default_factory=list)  # ids the diversity cap pushed out
    # Passages that restate the question (retrieve.mimic): (chunk id, the restating sentence)
    # held back from the answer because others ground it, or kept because nothing else does.
    held: list[tuple[str, str]] = field(default_factory=list)
    restating: list[tuple[str, str]] = field(default_factory=list)
    # The keyword leg's term weight (IDF) over what this caller may read: the answerer weighs
    # the query's words with it. Never fitted on hidden chunks (a side channel otherwise).
    weight: Callable[[str], float] | None = field(default=None, compare=False, repr=False)
    # Whether any chunk this caller may read holds a (tokenised) term: the answerer refuses a
    # question about a name no document holds (``generate.unknown_names``). None: not known.
    known: Callable[[str], bool] | None = field(default=None, compare=False, repr=False)
    # Chunks next to the hits in their documents (``Engine.with_context``): not ranked and not
    # shown as sources, but quotable, so a fact one sentence past a chunk's edge is in reach.
    context: list[Hit] | None = None  # None: not fetched yet (an empty list: fetched, none found)
    # The labels the caller's retrieval could read (None: every unreserved one): the context
    # is fetched under the same clearance.
    labels: tuple[str, ...] | None = None

    @property
    def passages(self) -> list[Hit]:
        """What an answer may draw on: the hits, then their neighbours."""
        return self.hits + (self.context or [])


# What an answer says when there is nothing to say - one wording per reason, everywhere.
# Plain words for the person reading: why (a threshold, a missing word) is in ``reason`` and
# the structured fields, never in the sentence a chat UI shows or makes a title of.
NOT_IN_DOCUMENTS = "The indexed documents don't cover that."  # nothing retrieved answers it
NOT_SUPPORTED = "I can't give an answer that the documents support."  # verification removed every sentence

# The three outcomes of checking a claim against a passage - one vocabulary for the NLI
# model, the LLM judge, verification and every front end. A verdict's position here is
# also its column in every probability row the checkers return.
VERDICTS = ("entailed", "neutral", "contradicted")
ENTAILED, NEUTRAL, CONTRADICTED = VERDICTS
E, N, C = (VERDICTS.index(v) for v in VERDICTS)
