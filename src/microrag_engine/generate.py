"""Step 5 - generate, without a model: a query-focused extractive answerer.

In:  the query and the ``Retrieval`` of step 3 (with the keyword leg's term weights
     over what the caller may read) and the embedder.
Out: answer text - the passages of the retrieved chunks that answer the query, each
     cited - or the refusal sentence (``NOT_IN_DOCUMENTS``), its reason (a missing word,
     no passage that answers) apart for the structured fields.

(The model path of step 5 is ``runtime/llm.py``, fed by step 4's messages.)

How: the retrieved chunks are cut into units - sentence, list item, table row, code
block (whole) - and every unit becomes a candidate passage, widened just enough to
read on its own: the sentence an "It"/"This" refers to, the sentence that opens its
paragraph, the signature or term a description belongs to, the list or code a line
ending in ":" introduces. Each passage is scored on both legs at passage level: the
IDF-weighted share of the query's topic words it holds (words only in its heading,
page name or table header count half; identifiers count triple; question framing
such as "how many" or "use" counts not at all) and its MiniLM cosine to the query
(for the 12 most promising). Before quoting, answerability: refuse when the query's
distinctive words are absent from every retrieved chunk and no passage is close in
meaning, or when no passage supports an answer at all (thresholds calibrated on the
QA dev sets: benchmarks/results/qa.md). Which passage answers is learned: a linear
selector over features of every candidate (``models/selector``); optionally an answer
model - a cross-encoder that reads the question with each of the selector's best six,
reorders them and can refuse when none answers (``answer_model``; none ships: 0-2 points
of facts for 2.3-2.8x the time, training/ANSWER_MODEL.md).
Then the best passage, and others that score nearly as well and add a query word, up
to four, each with its citation.
This module does not retrieve; it answers from what it is given.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib.resources import files
from pathlib import Path

import numpy as np

from . import rx
from .augment import citation
from .index.embed import Embedder
from .runtime.crossencoder import CrossEncoder, load_encoder
from .text import bm25_tokens, is_code, sentence_spans
from .types import NOT_IN_DOCUMENTS, Retrieval

log = logging.getLogger("microrag")

# Candidate passages embedded per answer: the best by keyword share and chunk rank.
# Embedding is most of the answer step's time; measured on the QA dev sets (python
# benchmarks/qa_report.py): 12 gives 113-168 ms p50 on 2 cores, 8 met 100 ms but lost 2
# points of fact recall, 16-32 gained nothing.
MAX_EMBED = 12
MAX_PIECES = 4  # passages per answer
RANK_PRIOR = 0.05  # a passage from the top-ranked chunk gets this much, from the k-th 1/k of it (0.15+ lost recall)
PIECE_CHARS = 700  # a passage's prose stops growing here (code blocks are kept whole up to CODE_CHARS)
CODE_CHARS = 1200
LABEL_CHARS = 200  # a label line (signature, term) is at most this long
MAX_LABELS = 4  # names of one option or term read as its label ("-s", "--signoff", "--no-signoff")
PARA_CHARS = 400  # the anchor's paragraph is read on up to here: the sentences after it qualify it
NEARLY = 0.7  # another passage must score at least this share of the best one...
TIED = 0.93  # ...and cover a query term the others do not, unless it is this close to the best
# The same two rules on the selector's odds against the best passage (its scale is not the
# hand-set score's: a 0.7 share of support is a much wider margin than odds of 0.7).
NEARLY_ODDS, TIED_ODDS = 0.15, 0.5  # chosen on the QA dev sets (training/build_selector.py)

# A unit that starts by pointing back needs the sentence before it to be read.
_REFERS_BACK = re.compile(r"^(?:it|this|these|that|those|they|such|here|otherwise|however|then|also|"
                          r"for example|in this case|in that case|instead)\b", re.I)
# Questions whose answer is a number, a time or a quantity: units stating one rank higher.
_WANTS_NUMBER = re.compile(r"\b(?:how (?:many|much|long|often|old|big|large|soon|far)|when|what (?:time|date|day|port|"
                           r"number|version|size|limit|percentage|rate|amount|extension)|which (?:port|number|version|"
                           r"year|day)|deadline|by when)\b", re.I)
_HAS_NUMBER = re.compile(r"\d")


def _looks_identifier(word: str) -> bool:
    """A code or a name with digits, underscores or dotted parts ("E-4012"'s 4012, "lru_cache",
    "os.path", not "e.g."): what the user is really asking about, so it weighs triple."""
    inner = word.strip("._")
    if any(c.isdigit() for c in inner) or "_" in inner:
        return True
    parts = inner.split(".")  # "os.path" yes, "e.g" no
    return len(parts) > 1 and all(len(p) >= 2 for p in parts)


def names_code(word: str) -> bool:
    """A dotted or snake_case name with letters ("os.path.splitroot", "eager_task_factory"),
    not a number, a version or an abbreviation ("3.12", "v2.10", "e.g.")."""
    name = word.strip("._")
    return (_looks_identifier(name) and ("_" in name or "." in name) and any(c.isalpha() for c in name)
            and not _VERSION.match(name))


# Written in prose, not code: web and mail addresses are dropped before names are looked for,
# and a dotted word ending in a file type or a domain is a file or a host ("config.yaml",
# "vpn.acme.com"), not a member of a module.
_ADDRESS = rx.compile(r"\w+://\S+|\S+@\S+")  # (RE2: "\S+@" backtracks quadratically in re)
_VERSION = rx.compile(r"^[A-Za-z]{0,10}\d+(?:\.\d+)+[A-Za-z]?$")
_NOT_MEMBERS = frozenset("""com org net io dev app edu gov int example internal local lan py pyc md rst txt pdf doc
docx xls xlsx ppt pptx csv tsv json yaml yml toml ini cfg conf env html htm xml js ts css sh bat ps1 exe dll so
log zip tar gz tgz bz2 xz png jpg jpeg gif svg mp4 sql db sqlite""".split())
MAX_NAMES = 8  # code names looked up per question, at most (each may cost a database round trip)


@dataclass(frozen=True)
class UnknownNames:
    """Names a question asks about that no readable document holds: ``members`` of a module
    the documents do have ("os.path.splitroot": refused outright), and bare ``names`` - code
    ("pg_cron") or a product or project written with capitals ("Sigstore", "GitLab", "TOTP") -
    missing words that no closeness in meaning rescues."""

    members: tuple[str, ...] = ()
    names: tuple[str, ...] = ()


# What may come between a sentence's end and its next word: a word after one of these opens a
# sentence, a line or a quote, and its capital says nothing.
_OPENS = re.compile(r"[?!:;\"'(\[\n\u2014\u2013\u2026-]")


def _proper_name(word: str) -> bool:
    """A word written with a capital ("Sigstore", "GitLab", "TOTP"; not "I"): where it does not
    open a sentence, a name the asker copied, not a word they chose."""
    return len(word) > 1 and word[:1].isalpha() and any(c.isupper() for c in word) and word.isalnum()


def unknown_names(query: str, known: Callable[[str], bool]) -> UnknownNames:
    """The code names ``query`` asks about that no document the caller can read holds
    (``known``: a term is in some chunk), by their last part only: a method is often written
    without its class ("get(key)" under "dict"). Documentation of another release answers a
    question about a function it lacks with the one next to it ("splitdrive" for
    "os.path.splitroot"). A dotted name counts only when the documents hold everything before
    its last dot (``my_app.views.show`` is the user's own code), and not when its last part is
    a file type or a domain, or when it is two sentences that lost their space ("docs.Thanks")."""
    members: list[str] = []
    names: list[str] = []
    seen = proper = 0
    prose = _ADDRESS.sub(" ", query)
    words = list(re.finditer(r"[\w.]+", prose))
    # A question in capitals or in title case ("How To Configure Logging") writes no names that way.
    capitals = sum(w.group()[:1].isupper() for w in words) > len(words) / 2
    for i, m in enumerate(words):
        name = m.group().strip(".")  # "__post_init__" is one word of the index, underscores and all
        if name in members or name in names:
            continue
        if not names_code(name):
            opens = i == 0 or words[i - 1].group().endswith(".") or bool(_OPENS.search(prose, words[i - 1].end(), m.start()))
            terms = bm25_tokens(name) if not capitals and not opens and _proper_name(name) else []
            if terms and proper < MAX_NAMES:  # (a budget of its own: "On Windows" never crowds out os.path.x)
                proper += 1
                if not any(known(t) for t in terms):
                    names.append(name)
            continue
        head, _, last = name.rpartition(".")
        if head and (last.lower() in _NOT_MEMBERS or (head[-1].islower() and last.istitle())):
            continue
        seen += 1
        if seen > MAX_NAMES:
            break
        terms = bm25_tokens(last) + bm25_tokens(last.strip("_"))
        if not terms or any(known(t) for t in terms):
            continue
        if not head:
            names.append(name)
        elif all(known(t) for t in bm25_tokens(head.replace(".", " "))):
            members.append(name)
    return UnknownNames(tuple(members), tuple(names))


_HOW = re.compile(r"^\s*(?:how|what(?:'s| is) the (?:best |right )?way|show|example|can i|is there a way)\b", re.I)


@dataclass(frozen=True)
class Unit:
    """One answerable piece of a retrieved chunk."""

    hit: int  # index into ``Retrieval.passages`` (the hits, then their neighbours)
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
    for r, h in enumerate(retrieval.passages):
        heading, header, para, prev_end, prev_kind = "", "", 0, 0, ""
        page = re.sub(r"[/_.#-]+", " ", h.chunk.doc.rsplit(".", 1)[0])
        for pos, (s, e) in enumerate(sentence_spans(h.chunk.text)):
            text = h.chunk.text[s:e].strip()
            kind = _kind(text)
            # A table's first row names its columns: every later row is about them ("Port").
            header = (text if prev_kind != "row" else header) if kind == "row" else ""
            prev_kind = kind
            # A new paragraph after a blank line (hard-wrapped lines are one paragraph); items,
            # rows, code and headings are each their own.
            para += "\n\n" in h.chunk.text[prev_end:s].replace(" ", "").replace("\t", "") or kind != "sentence"
            prev_end = e
            if kind == "heading":
                heading = text.lstrip("#").strip()
            out.append(Unit(r, pos, para, text, kind, f"{heading} {page}" + (f" {header}" if header != text else "")))
    return out


# Words that frame a question rather than name its topic: never "missing", never credit.
_FRAMING_WORDS = """many much long often get gets got mean means meaning way ways need needs use uses using used want
wants tell know explain difference differ happen happens work works possible anyone someone thing things something
kind sort best right correct proper good default purpose reason instead several once multiple various certain
every lot lots automatically actually really simply also still even always never ever usually sometimes like"""


@lru_cache(maxsize=1)
def framing() -> frozenset[str]:
    return frozenset(bm25_tokens(_FRAMING_WORDS))


def topic_terms(query: str) -> list[str]:
    """The query's terms that name its topic, in order: no framing words, and no single
    letters (what contractions leave behind: "I'm" -> "m")."""
    return [t for t in dict.fromkeys(bm25_tokens(query)) if t not in framing() and (len(t) > 1 or t.isdigit())]


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
              embed: Sequence[int] | None = None, common: frozenset[str] = frozenset()) -> Relevance:
    """Score ``texts`` against ``query``: keyword share (``weight`` = the index's IDF;
    identifier-looking words triple; a term only in ``contexts[i]`` counts half) and
    cosine (for the indices in ``embed``, default all). ``missing`` is measured against
    ``sources``: what the query asks about that none of them mentions. A plain word in
    ``common`` (general English, from the embedder's vocabulary: "lose", "July") that the
    sources lack is more likely a paraphrase than a name, so it is not counted missing;
    names, jargon and identifiers ("Heroku", "401k", "batched", "os.walk") are."""
    q_terms = topic_terms(query)
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
    words = {t: wd for wd in re.findall(r"\w+", query) for t in bm25_tokens(wd)}
    absent = [i for i, t in enumerate(q_terms)
              if t not in seen and not (words.get(t, t).lower() in common and t not in exact)]
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
    """Candidate passages - each answerable unit widened by ``_expand`` - and their scores."""

    units: list[Unit]
    spans: list[list[int]]  # unit indices of each candidate passage, in reading order
    rel: Relevance  # per passage
    total: np.ndarray  # per passage: the selector's score, else support plus small priors (see score_units)
    features: np.ndarray  # per passage: what the selector reads (FEATURES)
    shown: list[str]  # per passage: as embedded and as an answer model reads it, "<heading and page>: <text>"
    answers: float | None = None  # the answer model's probability that its best-read passage answers; None: not run


# What the answer selector reads of a candidate passage: the two legs as the answerer
# measures them, their share of the best candidate's, where the passage sits and what it
# is. One row per passage; training/build_selector.py fits weights over the same rows.
FEATURES = ("lex", "sem", "embedded", "lex_of_best", "sem_of_best", "rank_prior", "context", "code", "item", "row",
            "chars", "units", "position", "figure", "own_lex", "names", "names_asked", "how_code")

# A name a reader types: an option, a dotted or snake_case identifier, a call, code in backticks.
_NAME = re.compile(r"(?:^|\s)--?[A-Za-z][\w-]*|\b\w+\.\w+|\b[a-z]+_\w+|\b\w+\(|`[^`\n]+`|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b")
# A question whose answer is such a name (or a recipe that shows one).
# RE2: with ``re`` the ".*" made a question of repeated "what" quadratic (8 s for 32k characters).
_ASKS_NAME = rx.compile(r"(?i)\b(?:which|what)\b.*\b(?:option|flag|switch|setting|variable|function|method|command|config\w*|"
                        r"parameter|argument|key|class|hook|attribute|field|decorator|module|signal|header|directive|"
                        r"pragma|name)s?\b")


def passage_features(query: str, units: list[Unit], spans: list[list[int]], texts: list[str], rel: Relevance,
                     embedded: Sequence[int], n_hits: int, own: np.ndarray | None = None) -> np.ndarray:
    """The ``FEATURES`` row of every candidate passage."""
    x = np.zeros((len(spans), len(FEATURES)), dtype=np.float32)
    if not spans:
        return x
    per_chunk: dict[int, int] = {}
    for u in units:
        per_chunk[u.hit] = max(per_chunk.get(u.hit, 0), u.pos + 1)
    wants = bool(_WANTS_NUMBER.search(query))
    asks_name, how = bool(_ASKS_NAME.search(query)), bool(_HOW.match(query))
    own = rel.lex if own is None else own
    top_lex, top_sem = max(float(rel.lex.max()), 1e-6), max(float(rel.sem.max()), 1e-6)
    on = np.zeros(len(spans), dtype=bool)
    on[list(embedded)] = True
    for i, (span, text) in enumerate(zip(spans, texts)):
        u = _lead(units, span)
        names = min(len(_NAME.findall(text)), 4) / 4.0
        row = {
            "lex": rel.lex[i], "sem": rel.sem[i], "embedded": on[i],
            "lex_of_best": rel.lex[i] / top_lex, "sem_of_best": rel.sem[i] / top_sem,
            "rank_prior": 1.0 / (1 + u.hit) if u.hit < n_hits else 0.0, "context": u.hit >= n_hits,
            "code": u.kind == "code", "item": u.kind == "item", "row": u.kind == "row",
            "chars": np.log1p(len(text)) / 7.0, "units": len(span) / 4.0, "position": u.pos / per_chunk[u.hit],
            "figure": wants and bool(_HAS_NUMBER.search(text)), "own_lex": own[i], "names": names,
            "names_asked": asks_name * names, "how_code": how and (names > 0 or u.kind == "code"),
        }
        x[i] = [row[f] for f in FEATURES]
    return x


@lru_cache(maxsize=1)
def selector() -> np.ndarray | None:
    """The shipped answer selector's weights (``models/selector/weights.json``, one per
    ``FEATURES`` entry), or None when they are missing or were fitted on other features."""
    try:
        meta = json.loads((files("microrag_engine") / "models" / "selector" / "weights.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if tuple(meta.get("features", ())) != FEATURES:  # weights for other features: not these
        log.warning("the answer selector's weights do not match its features; scoring without it")
        return None
    return np.array(meta["weights"], dtype=np.float32)


@lru_cache(maxsize=2)
def load_answer_model(folder: str | Path) -> CrossEncoder:
    """The answer model in ``folder`` (training/train_selector.py builds one; none ships:
    training/ANSWER_MODEL.md), loaded once. A missing or broken folder is a ``ModelMissingError``."""
    return load_encoder(Path(folder))


def answers_floor(min_answers: float | None, reader: CrossEncoder) -> float:
    """``min_answers``, or when None the floor calibrated with the model on the QA dev
    sets (its config.json, written by training/train_selector.py; 0 when absent)."""
    if min_answers is not None:
        return min_answers
    return float(reader.config.get("microrag", {}).get("min_answers", 0.0))


def _sigmoid(x: float) -> float:
    return 0.5 * (1.0 + math.tanh(0.5 * x))  # = 1 / (1 + e^-x), without overflow for large |x|


def read_answers(query: str, shown: Sequence[str], logit: np.ndarray, top: int,
                 model: CrossEncoder) -> tuple[np.ndarray, float]:
    """The selector's logits with the ``top`` best candidates put in the order of the
    selector's logit plus the answer model's read (``blend`` from its config: chosen on
    validation questions it never trained on), and the model's probability that the best
    of them answers the question at all.

    Only the order moves: the ``top`` keep the selector's own values, handed out in the new
    order. Adding the read to the logits sharpened the odds, so fewer passages cleared
    ``NEARLY_ODDS`` and answers lost facts (git's QA set: 0.51 -> 0.44; reordered: 0.53).
    Candidates the model did not read stay strictly below the ones it did (a tie with
    the lowest read one would let reading order, not the read, decide)."""
    first = [int(i) for i in np.argsort(-logit, kind="stable")[:top]]
    read = model.logits([(query, shown[i]) for i in first])[:, 0]
    mixed = logit[first] + float(model.config.get("blend", 1.0)) * read
    out = logit.copy()
    out[first] = np.sort(logit[first])[::-1][np.argsort(np.argsort(-mixed, kind="stable"))]
    unread = np.ones(len(out), dtype=bool)
    unread[first] = False
    out[unread] = np.minimum(out[unread], np.nextafter(out[first].min(), -np.inf))
    return out, _sigmoid(float(read.max()))


def read_scores(query: str, scores: Scores, reader: CrossEncoder, rerank: int | None = None) -> Scores:
    """``scores`` (the learned selector's) with the answer model's read: its best ``rerank``
    (None: the ``top`` the model was tuned at, in its config) reordered by ``read_answers``,
    and ``answers`` set."""
    top = rerank if rerank is not None else int(reader.config.get("top", 6))
    logit, answers = read_answers(query, scores.shown, np.log(scores.total), top, reader)
    return replace(scores, total=np.exp(logit - logit.max()), answers=answers)


def score_units(query: str, retrieval: Retrieval, embedder: Embedder | None = None,
                weight: Callable[[str], float] | None = None, learned: bool = False) -> Scores:
    """Score every candidate passage of the retrieved chunks against ``query``.

    A passage is scored whole, not by its anchor unit alone: a signature is judged with
    the description it introduces, a lead-in with its list or code.
    """
    units = units_of(retrieval)
    bounds: dict[int, tuple[int, int]] = {}  # a hit's units are contiguous: [first, last + 1)
    for j, u in enumerate(units):
        bounds[u.hit] = (bounds.get(u.hit, (j, j))[0], j + 1)
    # The chunk just before each one in its document, where that one was retrieved too (or is
    # context): ending where it starts, not overlapping it (the "chars" chunker's windows) and
    # on the same page (a page's footer is no label of the next page's first sentence).
    at = {(h.chunk.doc, h.chunk.index): r for r, h in enumerate(retrieval.passages)}
    before: dict[int, int | None] = {}
    for r, h in enumerate(retrieval.passages):
        b = at.get((h.chunk.doc, h.chunk.index - 1))
        c = retrieval.passages[b].chunk if b is not None else None
        before[r] = b if c is not None and c.end <= h.chunk.start and c.page == h.chunk.page else None
    spans: list[list[int]] = []
    seen: set[tuple[int, ...]] = set()
    for j, u in enumerate(units):
        if u.kind == "heading":
            continue
        prev = before[u.hit]
        span = _expand(units, j, query, bounds[u.hit], bounds.get(prev) if prev is not None else None)
        while span and _asks(units[span[-1]]):
            span = span[:-1]  # a question with nothing after it in its chunk answers nothing: not quoted
        if not span:
            continue
        if tuple(span) not in seen:
            seen.add(tuple(span))
            spans.append(span)
    texts = [_join([units[k] for k in span]) for span in spans]
    sources = [h.chunk.text + "\n" + h.chunk.doc for h in retrieval.passages]
    common = embedder.vocabulary() if embedder is not None else frozenset()
    kw = relevance(query, texts, sources, None, weight, [_lead(units, span).context for span in spans], common=common)
    # Embed the passages most likely to matter: keyword share plus a little for the chunk's rank.
    prior = np.array([kw.lex[i] + 0.2 / (1 + _lead(units, span).hit) for i, span in enumerate(spans)])
    chosen = [int(i) for i in np.argsort(-prior, kind="stable")[:MAX_EMBED]]
    # Embedded with its heading and page name: "Remove any common leading whitespace" alone is about nothing.
    shown = [f"{_lead(units, span).context.strip()}: {t}" for span, t in zip(spans, texts)]
    sem = relevance(query, shown, (), embedder, embed=chosen).sem if embedder is not None else np.zeros(len(spans))
    rel = Relevance(kw.lex, sem, kw.missing, kw.missing_share)
    own = relevance(query, texts, (), None, weight, common=common).lex  # its own words only, no heading credit
    features = passage_features(query, units, spans, texts, rel, chosen if embedder is not None else [],
                                len(retrieval.hits), own)
    model = selector() if learned and spans else None
    if model is not None:
        # Which passage answers, as learned (training/build_selector.py): a softmax over the
        # candidates, each scored by its odds against the best (1.0), so NEARLY_ODDS and
        # TIED_ODDS read as "this much as likely to be the answer".
        logit = features @ model
        total = np.exp(logit - logit.max())
    else:
        total = rel.support + RANK_PRIOR * np.array([1.0 / (1 + _lead(units, span).hit) for span in spans])
        if _WANTS_NUMBER.search(query):
            total += 0.05 * np.array([bool(_HAS_NUMBER.search(t)) for t in texts])
    return Scores(units, spans, rel, total, features, shown)


@dataclass(frozen=True)
class Answerability:
    answerable: bool
    reason: str = ""


def never_mentioned(names: Sequence[str]) -> Answerability:
    return Answerability(False, "the documents never mention " + ", ".join(f"'{n}'" for n in names))


def judge(rel: Relevance, min_support: float, max_missing: float, rescue_sem: float,
          usable: np.ndarray | None = None, unknown: UnknownNames = UnknownNames()) -> Answerability:
    """Whether the texts scored in ``rel`` (those ``usable``) answer the query at all.

    Not when the query's distinctive terms are absent from every source (their weight
    share over ``max_missing``) and no text comes close in meaning (cosine under
    ``rescue_sem``); nor when the best text's support (half keyword share, half
    cosine) is under ``min_support``. The answerer asks this of the retrieved units,
    verification of the answer's own sentences. ``unknown``: the query's names no document
    holds (``unknown_names``): a member of a module the documents have refuses outright; a
    bare name is missing like any word, but no passage close in meaning stands in for it
    ("pg_cron" is not "cron", "Sigstore" is not "GPG").
    """
    if unknown.members:
        return never_mentioned(unknown.members)
    rescue_sem = rescue_sem if not unknown.names else math.inf
    usable = np.ones(len(rel.lex), dtype=bool) if usable is None else usable
    if not usable.any():
        return Answerability(False, "no passage in the documents answers it")
    if rel.missing_share > max_missing and float(rel.sem[usable].max()) < rescue_sem:
        return Answerability(False, "none of the passages found mentions " + ", ".join(f"'{m}'" for m in rel.missing[:6]))
    if float(rel.support[usable].max()) < min_support:
        return Answerability(False, "no passage in the documents answers it")
    return Answerability(True)


def _is_label(units: list[Unit], k: int) -> bool:
    """A short line that is a paragraph of its own and ends without a full stop: a
    definition term, an API signature ("shutil.copytree(src, dst)"), a field name.
    It names what the paragraph after it describes."""
    u = units[k]
    alone = all(units[i].para != u.para or i == k for i in (k - 1, k + 1) if 0 <= i < len(units) and units[i].hit == u.hit)
    return u.kind == "sentence" and alone and len(u.text) <= LABEL_CHARS and u.text.rstrip()[-1:] not in ".!?:;"


def _names_a_thing(text: str) -> bool:
    """A label that is a name (an option, an identifier, a call, code), not a short line of
    prose or page chrome ("About", "Next topic")."""
    return bool(_NAME.search(text))


def _labels_before(units: list[Unit], before: Sequence[int], nearest: bool = True,
                   room: int = MAX_LABELS) -> list[int]:
    """The run of label lines that ends ``before`` (unit indices in reading order), in
    reading order: every name of an option or term ("-s", "--signoff", "--no-signoff"),
    at most ``room`` of them and ``LABEL_CHARS`` in all. Only the nearest may be any
    label (``nearest``: a term, a signature); the others must name something, so a
    navigation list's short lines never come along."""
    run: list[int] = []
    chars = 0
    for k in reversed(before):
        chars += len(units[k].text)
        if len(run) == room or chars > LABEL_CHARS or not _is_label(units, k):
            break
        if not ((nearest and not run) or _names_a_thing(units[k].text)):
            break
        run.insert(0, k)
    return run


def _expand(units: list[Unit], j: int, query: str, bounds: tuple[int, int],
            before: tuple[int, int] | None = None) -> list[int]:
    """The unit ``j`` and the neighbours it needs to be read on its own; ``bounds`` are
    its chunk's units, ``before`` those of the chunk just before it in its document (ending
    where it starts, on its page) when that chunk was retrieved too. Looks only at
    neighbours, so all candidates cost linear time."""
    same = range(*bounds)
    at = j - bounds[0]
    picked = [j]
    if at > 0:
        prev = units[same[at - 1]]
        # The labels (signature, term, every name of an option) the anchor's paragraph describes;
        # what an "It"/"This" points back to; the sentence that opens the anchor's paragraph.
        opens = prev.kind == "sentence" and prev.para == units[j].para and len(prev.text) + len(units[j].text) <= PARA_CHARS
        if prev.para != units[j].para and _is_label(units, same[at - 1]):
            # (before a label, only its other names: a term or signature only before a description)
            label = _is_label(units, j)
            picked[:0] = _labels_before(units, same[:at], nearest=not label, room=MAX_LABELS - label)
        elif (_REFERS_BACK.match(units[j].text) and prev.kind not in ("heading", "code")) or opens:
            picked.insert(0, same[at - 1])
    elif before is not None and units[j].kind == "sentence":
        # The chunker may cut between an option's names and what they do (a man page's
        # "-p / --patch" ends one chunk, "Interactively choose hunks..." opens the next):
        # the description is quoted with its names, or it answers "which flag" with no flag.
        picked[:0] = _labels_before(units, range(*before), nearest=False, room=MAX_LABELS - _is_label(units, j))
    chars = sum(len(units[k].text) for k in picked)
    how = bool(_HOW.match(query))
    for k in same[at + 1 :]:
        tail, nxt = units[picked[-1]], units[k]
        leads_in = tail.text.rstrip().endswith(":")
        in_list = nxt.kind in ("item", "row") and tail.kind in ("item", "row") and len(picked) > 1
        shows_code = nxt.kind == "code" and (leads_in or how)
        # Labels are read on with what they name, through the thing's other names.
        labels = all(_is_label(units, i) for i in picked)
        another = _is_label(units, k) and (len(picked) >= MAX_LABELS or not _names_a_thing(nxt.text)
                                           or not _names_a_thing(tail.text))
        reads_on = nxt.kind == "sentence" and chars + len(nxt.text) <= PARA_CHARS and (
            nxt.para == tail.para or (labels and not another))
        # A question (an FAQ's) is read with what follows it, in whatever form: alone it answers nothing.
        answers_it = _asks(tail)
        if nxt.kind == "heading" or not (leads_in or in_list or shows_code or reads_on or answers_it):
            break
        limit = CODE_CHARS if nxt.kind == "code" else PIECE_CHARS
        if chars + len(nxt.text) > limit and picked != [j]:
            break
        picked.append(k)
        chars += len(nxt.text)
    return picked


def _lead(units: list[Unit], span: list[int]) -> Unit:
    """The first unit of ``span`` in its anchor's chunk: where the passage is from (its
    citation, rank and heading), though labels from the chunk before may open it."""
    home = units[span[-1]].hit
    return next(units[k] for k in span if units[k].hit == home)


def _asks(unit: Unit) -> bool:
    return unit.kind == "sentence" and unit.text.rstrip().endswith("?")


def _join(units: list[Unit]) -> str:
    out = ""
    for prev, u in zip([None, *units], units):
        new_line = prev is not None and (u.para != prev.para or u.hit != prev.hit or u.kind in ("item", "row", "code")
                                         or prev.kind == "code")
        out += ("\n" if new_line else " " if prev is not None else "") + u.text
    return out


def is_refusal(answer: str) -> bool:
    """Whether ``answer`` is a whole-answer refusal (the gate's or the answerer's)."""
    return answer.lstrip().startswith(NOT_IN_DOCUMENTS)


@dataclass(frozen=True)
class Extracted:
    """The extractive answer, and why it is a refusal (``refusal``; "" when it answers)."""

    text: str
    refusal: str = ""


def extractive_answer(query: str, retrieval: Retrieval, embedder: Embedder | None = None,
                      weight: Callable[[str], float] | None = None, min_support: float = 0.0,
                      max_missing: float = 1.0, rescue_sem: float = 0.0, learned: bool = False,
                      reader: CrossEncoder | None = None, rerank: int | None = None,
                      min_answers: float | None = None) -> str:
    """Quote the passages of the retrieved chunks that answer ``query``, each cited,
    or say what the documents do not cover (see the module doc). ``learned``: pick the
    passages with the trained selector, not the hand-set score; ``reader``: an answer
    model that reads the selector's best ``rerank``, and refuses when it gives none of them
    ``min_answers`` probability of answering (None: its calibrated floor, ``answers_floor``)."""
    return extract(query, retrieval, embedder, weight, min_support, max_missing, rescue_sem, learned,
                   reader, rerank, min_answers).text


def extract(query: str, retrieval: Retrieval, embedder: Embedder | None = None,
            weight: Callable[[str], float] | None = None, min_support: float = 0.0,
            max_missing: float = 1.0, rescue_sem: float = 0.0, learned: bool = False,
            reader: CrossEncoder | None = None, rerank: int | None = None,
            min_answers: float | None = None) -> Extracted:
    """:func:`extractive_answer`, with the refusal's reason apart from its text."""
    if retrieval.refused or not retrieval.hits:
        why = retrieval.reason or "nothing retrieved answers it"
        return Extracted(NOT_IN_DOCUMENTS, why)
    unknown = unknown_names(query, retrieval.known) if retrieval.known is not None else UnknownNames()
    if unknown.members:  # (before scoring: the refusal costs no embedding)
        return Extracted(NOT_IN_DOCUMENTS, never_mentioned(unknown.members).reason)
    scores = score_units(query, retrieval, embedder, weight, learned)
    verdict = judge(scores.rel, min_support, max_missing, rescue_sem, unknown=unknown)
    if not verdict.answerable:
        return Extracted(NOT_IN_DOCUMENTS, verdict.reason)
    if not scores.spans:  # only headings and bare questions: nothing that says anything
        return Extracted(NOT_IN_DOCUMENTS, "no passage in the documents answers it")
    if reader is not None and learned and selector() is not None:
        # Read only now: a question refused above costs no model call.
        scores = read_scores(query, scores, reader, rerank)
        if scores.answers is not None and scores.answers < answers_floor(min_answers, reader):
            # Every word may be there ("replication" in "source-code history replicated"):
            # the answer model read the best passages and none says what was asked.
            return Extracted(NOT_IN_DOCUMENTS, "no passage in the documents answers it")
    units, spans, total = scores.units, scores.spans, scores.total
    passages = retrieval.passages
    order = [int(i) for i in np.argsort(-total, kind="stable")]
    best = total[order[0]]
    nearly, tied = (NEARLY_ODDS, TIED_ODDS) if learned and selector() is not None else (NEARLY, TIED)
    q_terms = set(topic_terms(query))
    covered: set[str] = set()
    used: set[int] = set()
    pieces: list[tuple[list[int], str]] = []
    for i in order:
        if len(pieces) == MAX_PIECES or total[i] < nearly * best:
            break
        span = spans[i]
        if used & set(span):
            continue
        adds = (q_terms & set(bm25_tokens(" ".join(units[k].text for k in span)))) - covered
        if pieces and not adds and total[i] < tied * best:
            continue  # says nothing the passages so far did not (and is not a near-tie for the best)
        used |= set(span)
        covered |= adds
        pieces.append((span, citation(passages[_lead(units, span).hit])))
    # The chunk of the best passage first; within a chunk, reading order.
    first_seen = {_lead(units, span).hit: n for n, (span, _) in reversed(list(enumerate(pieces)))}
    pieces.sort(key=lambda p: (first_seen[_lead(units, p[0]).hit], _lead(units, p[0]).pos))
    return Extracted("\n\n".join(_join([units[k] for k in span]) + ("\n" if units[span[-1]].kind == "code" else " ")
                                   + cite for span, cite in pieces))
