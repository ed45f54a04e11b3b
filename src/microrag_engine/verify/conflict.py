"""Step 6, before the answer: do the retrieved sources disagree about the question?

A poisoned passage that outranks nothing still reaches the answer next to the
genuine one, and a model asked to answer from both blends them into one
confident sentence. So the sources are compared first: from each of the top
documents, the passage of two sentences that covers most of the question's words
(``nli.windows``), and the NLI model between the first and each other, both ways. A
pair the model reads as a contradiction in both directions (mean probability at
least ``Settings.min_conflict``) is a conflict, and the engine shows it as one,
both sources quoted, instead of an answer (``Engine.answer``).

Only passages that are about the question (each covers at least half of its
content words) and about the same thing (they share ``MIN_SHARED`` of their words)
are compared: two true sentences about different things are what NLI models most
often call contradictions. Cost: at most ``MAX_DOCS`` documents,
so two pairs, two model calls of ~140 tokens, and the reverse direction only for a
pair that could still reach the threshold (measured in SECURITY.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..text import bm25_tokens
from ..types import C
from .nli import NLIModel, windows

MAX_DOCS = 3  # documents compared: the top three distinct sources of the answer's context
MAX_CHARS = 320  # of a passage sent to the model (~70 tokens)
MIN_COVER = 0.5  # share of the question's content words a passage must hold to be compared
# Two passages that contradict each other say the same thing with one part changed, so they
# share most of their words; two true passages about different people or places (what a
# multi-hop or comparison question retrieves) share only the question's, and NLI models call
# those contradictions. Measured on HotpotQA-100 (no poison): pairs at p >= 0.8 came from 26
# questions; sharing >= 0.4 of their content words, from 2.
MIN_SHARED = 0.4


@dataclass(frozen=True)
class Passage:
    """What one source says about the question: its chunk id, document and the two sentences."""

    chunk: str
    doc: str
    text: str


@dataclass(frozen=True)
class Conflict:
    """Two sources that contradict each other about the question."""

    first: Passage
    second: Passage
    probability: float  # the model's contradiction probability, mean of both directions

    def to_dict(self) -> dict:
        return {"sources": [vars(self.first), vars(self.second)], "probability": round(self.probability, 4)}


def passage_on(question: str, chunk: str, doc: str, text: str) -> Passage | None:
    """The two-sentence window of ``text`` that covers most of ``question``'s words, when it covers enough."""
    wanted = set(bm25_tokens(question))
    if not wanted:
        return None
    best, cover = "", 0.0
    for w in windows(text):
        share = len(wanted & set(bm25_tokens(w))) / len(wanted)
        if share > cover:
            best, cover = w, share
    # Cut, so that a window swollen by a code block costs no more than two sentences of prose.
    return Passage(chunk, doc, best.strip()[:MAX_CHARS]) if cover >= MIN_COVER else None


def find_conflicts(question: str, hits: Sequence[tuple[str, str, str]], model: NLIModel, min_p: float) -> list[Conflict]:
    """Conflicts among ``hits`` ((chunk id, doc, text), best first): one passage per document, the
    first ``MAX_DOCS`` documents that have a passage on the question."""
    passages: list[Passage] = []
    for chunk, doc, text in hits:
        if len(passages) == MAX_DOCS:
            break
        if any(p.doc == doc for p in passages):
            continue
        p = passage_on(question, chunk, doc, text)
        if p is not None:
            passages.append(p)
    # The best source against each of the others: what an answer would lean on, checked.
    pairs = [(passages[0], other) for other in passages[1:] if _shared(passages[0].text, other.text) >= MIN_SHARED]
    if not pairs:
        return []
    forward = model.predict([(a.text, b.text) for a, b in pairs])[:, C]
    # The mean of both directions reaches min_p only if this one reaches 2 * min_p - 1:
    # the reverse call is made for those alone (most pairs are not close).
    close = [i for i, p in enumerate(forward) if p >= 2 * min_p - 1]
    backward = model.predict([(pairs[i][1].text, pairs[i][0].text) for i in close])[:, C] if close else np.zeros(0)
    found = [Conflict(*pairs[i], float(forward[i] + back) / 2) for i, back in zip(close, backward)]
    return sorted((c for c in found if c.probability >= min_p), key=lambda c: -c.probability)


def _shared(a: str, b: str) -> float:
    """Jaccard of two passages' content words (stemmed, stop words out)."""
    x, y = set(bm25_tokens(a)), set(bm25_tokens(b))
    return len(x & y) / len(x | y) if x | y else 0.0


def conflict_answer(conflicts: Sequence[Conflict]) -> str:
    """The answer when sources disagree: each side quoted with its source, no verdict."""
    c = conflicts[0]
    lines = ["The sources disagree about this, so no single answer is given:"]
    for p in (c.first, c.second):
        lines.append(f'- {p.doc} says: "{p.text}"')
    lines.append("Check which source is authoritative before relying on either.")
    return "\n".join(lines)
