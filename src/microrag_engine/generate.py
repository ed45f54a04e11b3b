"""Step 5 - generate: an OpenAI-compatible streaming client, and an extractive answerer.

In:  chat messages from step 4 (LLM), or the query + ``Retrieval`` (extractive).
Out: answer text (streamed as pieces for the LLM).

LLM: ``POST {LLM_BASE_URL}/chat/completions`` with ``stream=true``; the reply is
Server-Sent Events (``data: {json}`` ... ``data: [DONE]``). We join
``choices[0].delta.content`` and ignore reasoning deltas and malformed lines. A drop
before the first token (or a 429/5xx) is retried a bounded number of times; a drop
mid-stream keeps the partial text and marks it truncated. The API key never
appears in an error message.
Extractive: no model at all - the best-supported sentences of the top chunks,
each cited. This module does not retrieve; it answers from what it is given.
"""

from __future__ import annotations

import logging

import numpy as np

from .augment import citation
from .text import bm25_tokens, sentence_spans
from .types import NOT_IN_DOCUMENTS, Retrieval

log = logging.getLogger("microrag")


# ---------------------------------------------------------------- LLM client


# ---------------------------------------------------------------- extractive answerer


def _units(text: str) -> list[tuple[str, bool, bool]]:
    """(sentence, is_heading, starts_a_line) for each sentence of a chunk, in order."""
    out = []
    for s, e in sentence_spans(text):
        sent = text[s:e].strip()
        line_start = s == 0 or text[s - 1] == "\n"
        out.append((sent, sent.startswith("#"), line_start))
    return out


def extractive_answer(query: str, retrieval: Retrieval, embedder=None, max_passages: int = 2, max_chars: int = 700) -> str:
    """Quote the best-supported passages of the retrieved chunks, each cited.

    Every sentence of the hits is scored by query-term coverage (stemmed) blended
    with its embedding cosine to the query when an embedder is given, plus a little
    of its chunk's hybrid score so ties go to better chunks. The best sentence
    anchors a passage that runs on through its section (until a heading or
    ``max_chars``), because procedures and lists follow the sentence that names
    them. A second passage from another chunk is added when it scores nearly as
    well. Sentences with neither a shared term nor a strong cosine are never used.
    """
    if retrieval.refused or not retrieval.hits:
        why = f" ({retrieval.reason})" if retrieval.reason else ""
        return f"{NOT_IN_DOCUMENTS}{why}"
    q_terms = set(bm25_tokens(query))
    units = [_units(h.chunk.text) for h in retrieval.hits]
    cands = [(r, i) for r, us in enumerate(units) for i, (_, head, _) in enumerate(us) if not head]
    if not cands:
        return NOT_IN_DOCUMENTS
    texts = [units[r][i][0] for r, i in cands]
    lex = np.array([len(q_terms & set(bm25_tokens(t))) / max(len(q_terms), 1) for t in texts])
    sem = np.zeros(len(cands))
    if embedder is not None:
        vecs = embedder.embed([query] + texts)
        sem = vecs[1:] @ vecs[0]
    hybrid = np.array([retrieval.hits[r].hybrid for r, _ in cands])
    score = 0.5 * lex + 0.5 * sem + 0.1 * hybrid
    usable = (lex > 0) | (sem >= 0.5)
    order = [int(j) for j in np.lexsort((np.arange(len(cands)), -score)) if usable[j]]
    if not order:
        return f"{NOT_IN_DOCUMENTS} (the closest passages do not mention the question's terms)"
    passages: list[str] = []
    used_hits: set[int] = set()
    best = score[order[0]]
    for j in order:
        r, i = cands[j]
        if r in used_hits or score[j] < 0.8 * best:
            continue
        used_hits.add(r)
        passages.append(_passage(units[r], i, max_chars) + " " + citation(retrieval.hits[r]))
        if len(passages) == max_passages:
            break
    return "\n\n".join(passages)


def _passage(units: list[tuple[str, bool, bool]], i: int, max_chars: int) -> str:
    """The anchor sentence ``i`` and what follows it in its section, within ``max_chars``."""
    text = units[i][0]
    for sent, head, line_start in units[i + 1 :]:
        if head or len(text) + len(sent) > max_chars:
            break
        text += ("\n" if line_start else " ") + sent
    return text
