"""Step 5 - generate, without a model: a query-focused extractive answerer.

In:  the query and the ``Retrieval`` of step 3 (plus the embedder and the keyword
     leg's term weights, when the engine has them).
Out: answer text - the passages of the retrieved chunks that answer the query, each
     cited - or a refusal that says plainly what the documents do not cover.

(The model path of step 5 is ``runtime/llm.py``, fed by step 4's messages.)

How: every unit of the retrieved chunks - sentence, list item, table row, code
block - is scored against the query on both legs at unit level: the IDF-weighted
share of the query's terms it holds (a term in its section heading or page name
counts half: "what does X do" is answered by "It converts...") and its embedding
cosine to the query. The best unit anchors a passage, widened just enough to read
on its own: the sentence an "It"/"This" refers to, the list or code a line ending
in ":" introduces. Other units that score nearly as well add passages (from any
chunk) when they cover something the first did not. Before any of that,
answerability: when the query's distinctive terms are nowhere in what was
retrieved and no unit is close in meaning, or no unit supports an answer at all,
the answer says so instead of quoting the nearest text.
This module does not retrieve; it answers from what it is given.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .augment import citation
from .index.embed import Embedder
from .text import bm25_tokens, is_code, sentence_spans
from .types import NOT_IN_DOCUMENTS, Retrieval

log = logging.getLogger("microrag")

# Units embedded per answer: the best by keyword and chunk rank. Embedding is most of
# the answer step's time (MiniLM, ~25 tokens a unit); 24 units keep it near 50 ms.
MAX_EMBED = 24
MAX_PIECES = 3  # passages per answer
PIECE_CHARS = 700  # a passage's prose stops growing here (code blocks are kept whole up to CODE_CHARS)
CODE_CHARS = 1200
PARA_CHARS = 400  # the anchor's paragraph is read on up to here: the sentences after it qualify it
NEARLY = 0.8  # another passage must score at least this share of the best one...
TIED = 0.93  # ...and cover a query term the others do not, unless it is this close to the best

# A unit that starts by pointing back needs the sentence before it to be read.
_REFERS_BACK = re.compile(r"^(?:it|this|these|that|those|they|such|here|otherwise|however|then|also|"
                          r"for example|in this case|in that case|instead)\b", re.I)
# Questions whose answer is a number, a time or a quantity: units stating one rank higher.
_WANTS_NUMBER = re.compile(r"\b(?:how (?:many|much|long|often|old|big|large|soon|far)|when|what (?:time|date|day|port|"
                           r"number|version|size|limit|percentage|rate|amount|extension)|which (?:port|number|version|"
                           r"year|day)|deadline|by when)\b", re.I)
_HAS_NUMBER = re.compile(r"\d")


def _looks_identifier(word: str) -> bool:
    """A code or a name with digits, dots or underscores inside ("E-4012"'s 4012, "lru_cache",
    "os.path"): what the user is really asking about, so it weighs triple."""
    inner = word.strip("._")
    return any(c.isdigit() for c in inner) or "_" in inner or "." in inner
_HOW = re.compile(r"^\s*(?:how|what(?:'s| is) the (?:best |right )?way|show|example|can i|is there a way)\b", re.I)


@dataclass(frozen=True)
class Unit:
    """One answerable piece of a retrieved chunk."""

    hit: int  # index into ``Retrieval.hits``
    pos: int  # order within its chunk
    para: int  # paragraph (block) within its chunk: sentences of one paragraph read on together
    text: str
    kind: str  # heading | code | item | row | sentence
    context: str  # its section heading and page name: what the unit is about


def _kind(text: str) -> str:
    if is_code(text):
        return "code"
    if text.startswith("#"):
        return "heading"
    if text.startswith("|"):
        return "row"
    if re.match(r"^(?:[-*+]|\d+[.)])\s", text):
        return "item"
    return "sentence"


def units_of(retrieval: Retrieval) -> list[Unit]:
    """Every unit of every retrieved chunk, in retrieval then reading order."""
    out: list[Unit] = []
    for r, h in enumerate(retrieval.hits):
        heading, para, prev_end = "", 0, 0
        page = re.sub(r"[/_.#-]+", " ", h.chunk.doc.rsplit(".", 1)[0])
        for pos, (s, e) in enumerate(sentence_spans(h.chunk.text)):
            text = h.chunk.text[s:e].strip()
            kind = _kind(text)
            para += "\n" in h.chunk.text[prev_end:s] or kind != "sentence"
            prev_end = e
            if kind == "heading":
                heading = text.lstrip("#").strip()
            out.append(Unit(r, pos, para, text, kind, f"{heading} {page}"))
    return out


# Words that frame a question rather than name its topic: never "missing", never credit.
_FRAMING_WORDS = """many much long often get gets got mean means meaning way ways need needs use uses using used want
wants tell know explain difference differ happen happens work works possible anyone someone thing things something
kind sort best right correct proper good default purpose reason instead"""


@lru_cache(maxsize=1)
def framing() -> frozenset[str]:
    return frozenset(bm25_tokens(_FRAMING_WORDS))


@dataclass(frozen=True)
class Relevance:
    """How far each of some texts addresses a query (arrays align with the texts)."""

    lex: np.ndarray  # IDF-weighted share of the query's terms held, 0..1 (context terms count half)
    sem: np.ndarray  # embedding cosine to the query (0 where not embedded)
    missing: tuple[str, ...]  # query words whose terms none of the sources holds
    missing_share: float  # their share of the query's term weight

    @property
    def support(self) -> np.ndarray:
        return 0.5 * self.lex + 0.5 * self.sem


def relevance(query: str, texts: Sequence[str], sources: Sequence[str], embedder: Embedder | None = None,
              weight: Callable[[str], float] | None = None, contexts: Sequence[str] | None = None,
              embed: Sequence[int] | None = None) -> Relevance:
    """Score ``texts`` against ``query``: keyword share (``weight`` = the index's IDF;
    identifier-looking words triple; a term only in ``contexts[i]`` counts half) and
    cosine (for the indices in ``embed``, default all). ``missing`` is measured against
    ``sources``: what the query asks about that none of them mentions."""
    q_terms = [t for t in dict.fromkeys(bm25_tokens(query)) if t not in framing()]
    exact = {t for word in re.findall(r"[\w.]+", query) if _looks_identifier(word) for t in bm25_tokens(word)}
    w = np.array([(weight(t) if weight else 1.0) * (3.0 if t in exact else 1.0) for t in q_terms]) if q_terms else np.zeros(0)
    w_sum = float(w.sum()) or 1.0
    lex = np.zeros(len(texts))
    for j, text in enumerate(texts):
        own, ctx = set(bm25_tokens(text)), set(bm25_tokens(contexts[j])) if contexts else set()
        lex[j] = sum(wt * (1.0 if t in own else 0.5 if t in ctx else 0.0) for t, wt in zip(q_terms, w)) / w_sum
    seen: set[str] = set()
    for src in sources:
        seen |= set(bm25_tokens(src))
    absent = [i for i, t in enumerate(q_terms) if t not in seen]
    words = {t: wd for wd in re.findall(r"\w+", query) for t in bm25_tokens(wd)}
    absent.sort(key=lambda i: -w[i])  # the most distinctive first
    missing = tuple(dict.fromkeys(words.get(q_terms[i], q_terms[i]) for i in absent))
    missing_share = float(sum(w[i] for i in absent)) / w_sum if q_terms else 0.0
    sem = np.zeros(len(texts))
    chosen = list(range(len(texts))) if embed is None else list(embed)
    if embedder is not None and chosen:
        vecs = embedder.embed([query] + [texts[j][:400] for j in chosen])
        sem[chosen] = vecs[1:] @ vecs[0]
    return Relevance(lex, sem, missing, missing_share)


@dataclass(frozen=True)
class Scores:
    """Per-unit relevance and the ranking score built on it (arrays align with ``units``)."""

    units: list[Unit]
    rel: Relevance
    total: np.ndarray  # -1 for headings: they label passages, they do not answer


def score_units(query: str, retrieval: Retrieval, embedder: Embedder | None = None,
                weight: Callable[[str], float] | None = None) -> Scores:
    """Score every unit of the retrieved chunks against ``query`` (see the module doc)."""
    units = units_of(retrieval)
    texts = [u.text for u in units]
    sources = [h.chunk.text + "\n" + h.chunk.doc for h in retrieval.hits]
    kw = relevance(query, texts, sources, None, weight, [u.context for u in units])
    # Embed the units most likely to matter: keyword share plus a little for the chunk's rank.
    answerable = [j for j, u in enumerate(units) if u.kind != "heading"]
    prior = np.array([kw.lex[j] + 0.2 / (1 + units[j].hit) for j in answerable])
    chosen = [answerable[k] for k in np.argsort(-prior, kind="stable")[:MAX_EMBED]]
    sem = relevance(query, texts, (), embedder, embed=chosen).sem if embedder is not None else np.zeros(len(units))
    rel = Relevance(kw.lex, sem, kw.missing, kw.missing_share)
    total = rel.support + 0.05 * np.array([1.0 / (1 + u.hit) for u in units])
    if _WANTS_NUMBER.search(query):
        total += 0.05 * np.array([bool(_HAS_NUMBER.search(u.text)) for u in units])
    total[[j for j, u in enumerate(units) if u.kind == "heading"]] = -1.0
    return Scores(units, rel, total)


@dataclass(frozen=True)
class Answerability:
    answerable: bool
    reason: str = ""


def judge(rel: Relevance, min_support: float, max_missing: float, rescue_sem: float,
          usable: np.ndarray | None = None) -> Answerability:
    """Whether the texts scored in ``rel`` (those ``usable``) answer the query at all.

    Not when the query's distinctive terms are absent from every source (their weight
    share over ``max_missing``) and no text comes close in meaning (cosine under
    ``rescue_sem``); nor when the best text's support (half keyword share, half
    cosine) is under ``min_support``. The answerer asks this of the retrieved units,
    verification of the answer's own sentences.
    """
    usable = np.ones(len(rel.lex), dtype=bool) if usable is None else usable
    if not usable.any():
        return Answerability(False, "no passage in the documents answers it")
    if rel.missing_share > max_missing and float(rel.sem[usable].max()) < rescue_sem:
        return Answerability(False, "the documents do not mention " + ", ".join(f"'{m}'" for m in rel.missing[:6]))
    if float(rel.support[usable].max()) < min_support:
        return Answerability(False, "no passage in the documents answers it")
    return Answerability(True)


def _expand(units: list[Unit], j: int, query: str) -> list[int]:
    """The unit ``j`` and the neighbours it needs to be read on its own."""
    same = [k for k, u in enumerate(units) if u.hit == units[j].hit]
    at = same.index(j)
    picked = [j]
    if at > 0:
        prev = units[same[at - 1]]
        # What an "It"/"This" points back to; or the sentence that opens the anchor's paragraph.
        opens = prev.kind == "sentence" and prev.para == units[j].para and len(prev.text) + len(units[j].text) <= PARA_CHARS
        if (_REFERS_BACK.match(units[j].text) and prev.kind not in ("heading", "code")) or opens:
            picked.insert(0, same[at - 1])
    chars = sum(len(units[k].text) for k in picked)
    how = bool(_HOW.match(query))
    for k in same[at + 1 :]:
        tail, nxt = units[picked[-1]], units[k]
        leads_in = tail.text.rstrip().endswith(":")
        in_list = nxt.kind in ("item", "row") and tail.kind in ("item", "row") and len(picked) > 1
        shows_code = nxt.kind == "code" and (leads_in or how)
        reads_on = nxt.kind == "sentence" and nxt.para == tail.para and chars + len(nxt.text) <= PARA_CHARS
        if nxt.kind == "heading" or not (leads_in or in_list or shows_code or reads_on):
            break
        limit = CODE_CHARS if nxt.kind == "code" else PIECE_CHARS
        if chars + len(nxt.text) > limit and picked != [j]:
            break
        picked.append(k)
        chars += len(nxt.text)
    return picked


def _join(units: list[Unit]) -> str:
    out = ""
    for u in units:
        sep = "" if not out else "\n" if u.kind in ("item", "row", "code") or out.endswith("```") else " "
        out += sep + u.text
    return out


def extractive_answer(query: str, retrieval: Retrieval, embedder: Embedder | None = None,
                      weight: Callable[[str], float] | None = None, min_support: float = 0.0,
                      max_missing: float = 1.0, rescue_sem: float = 0.0) -> str:
    """Quote the passages of the retrieved chunks that answer ``query``, each cited,
    or say what the documents do not cover (see the module doc)."""
    if retrieval.refused or not retrieval.hits:
        return f"{NOT_IN_DOCUMENTS}{f' ({retrieval.reason})' if retrieval.reason else ''}"
    scores = score_units(query, retrieval, embedder, weight)
    verdict = judge(scores.rel, min_support, max_missing, rescue_sem, scores.total > -1)
    if not verdict.answerable:
        return f"{NOT_IN_DOCUMENTS} ({verdict.reason})"
    units, total = scores.units, scores.total
    order = [int(j) for j in np.argsort(-total, kind="stable") if total[j] > -1]
    best = total[order[0]]
    q_terms = set(bm25_tokens(query))
    covered: set[str] = set()
    used: set[int] = set()
    pieces: list[tuple[list[int], str]] = []
    for j in order:
        if len(pieces) == MAX_PIECES or total[j] < NEARLY * best:
            break
        if j in used:
            continue
        adds = (q_terms & set(bm25_tokens(units[j].text))) - covered
        if pieces and not adds and total[j] < TIED * best:
            continue  # says nothing the passages so far did not (and is not a near-tie for the best)
        span = _expand(units, j, query)
        if used & set(span):
            continue
        used |= set(span)
        covered |= q_terms & set(bm25_tokens(" ".join(units[k].text for k in span)))
        pieces.append((span, citation(retrieval.hits[units[j].hit])))
    # Passages in reading order: retrieval rank, then position within the chunk.
    pieces.sort(key=lambda p: (units[p[0][0]].hit, units[p[0][0]].pos))
    return "\n\n".join(_join([units[k] for k in span]) + ("\n" if units[span[-1]].kind == "code" else " ") + cite
                       for span, cite in pieces)
