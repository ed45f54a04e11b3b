"""Step 6 - verify: check every answer sentence against the retrieved chunks (NLI).

In:  an answer text and the chunks it was meant to rest on.
Out: ``Verification`` - per sentence, the best chunk and a verdict
     (``entailed`` / ``neutral`` = unsupported / ``contradicted``) with its
     probability, an answer-level summary, and the answer after the policy:
       * ``flag``   (default) keep the text, attach the verdicts;
       * ``drop``   remove sentences that are not entailed;
       * ``refuse`` replace the answer with a refusal if any sentence is not entailed.

A sentence is grounded when at least one chunk entails it. Grounded is not
true: a poisoned chunk can entail a false sentence. Grounded is not an answer
either: given the question, the answer is ``supported`` only when its entailed
sentences also address it (the extractive answerer's relevance test), so a
faithful quote about something else is flagged, dropped or refused by policy. The NLI model is a backend
(``nli.py``); this module only splits, scores pairs and applies the policy.
It does not retrieve or generate.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from .. import rx
from ..config import VERIFY_POLICIES, Settings
from ..generate import Relevance, judge, relevance
from ..text import sentence_spans
from ..types import CONTRADICTED, ENTAILED, NEUTRAL, NOT_SUPPORTED, C, E
from .nli import load_nli

# Citation markers: [1], [2, 3], [handbook.md#4], and the prompt's own [source: doc · chunk k].
_CITE = rf"\[(?:{rx.DIGIT}+(?:{rx.SPACE}*,{rx.SPACE}*{rx.DIGIT}+)*|[^\[\]{rx.SPACES}]+#{rx.DIGIT}+|source:[^\[\]]*)\]"
CITATION = rx.compile(rx.SPACE + "*" + _CITE)
_LEADING_CITATIONS = rx.compile(rf"^(?:{rx.SPACE}*{_CITE})+")
_ABBREV = re.compile(r"(?:\b(?:e\.g|i\.e|etc|vs|approx|No|Fig|Inc|Ltd|al)\.|\b[A-Z]\.)$")
_TITLE = re.compile(r"\b(?:Dr|Mr|Mrs|Ms|Prof|St)\.$")
# List items ("- x", "* x", "1. x", "2) x"), quotes ("> x") and headings ("## x") at the
# start of a line: the marker is structure, the rest is the claim.
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d{1,2}[.)]|>|#{1,6})\s+")
_HEADING = re.compile(r"^\s*#{1,6}\s+")
_PIPE = re.compile(r"(?<!\\)\|")  # a cell border; "\|" is a pipe inside a cell
_WORDS_OF = re.compile(r"\w+")


def _cells(line: str) -> list[str]:
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [c.replace("\\|", "|").strip() for c in _PIPE.split(inner)]


def _is_row(line: str) -> bool:
    return line.lstrip().startswith("|") and len(_PIPE.findall(line)) >= 2


def _is_rule(line: str) -> bool:
    """A table's separator row ("|---|:-:|"): the row above it is the header."""
    return "-" in line and "|" in line and not line.strip().strip("|:- \t")


def _row_claim(header: list[str], cells: list[str]) -> str:
    """What a table row says, as checkable text: "header: cell; ..." (cells alone without a
    header that fits)."""
    named = zip(header, cells) if len(header) == len(cells) else (("", c) for c in cells)
    return "; ".join(f"{h}: {c}" if h else c for h, c in named if c)


@dataclass(frozen=True)
class SentenceVerdict:
    """One answer sentence: verdict, its probability, and the chunk behind it."""

    sentence: str
    verdict: str
    probability: float
    chunk: str | None  # chunk id (or context paragraph number) that decided it
    missing: tuple[str, ...] = ()  # numbers / names the sentence states and no chunk does
    on_question: bool | None = None  # whether it addresses the question (None: no question given)


@dataclass(frozen=True)
class Verification:
    """All sentence verdicts, the policy applied and the resulting answer text."""

    sentences: tuple[SentenceVerdict, ...]
    policy: str
    text: str
    # Whether the supported sentences answer the question (None: no question given). A
    # quote is always grounded; grounded text about something else answers nothing.
    answers: bool | None = None
    off_question: str = ""  # why not, in words

    @property
    def counts(self) -> dict[str, int]:
        out = {ENTAILED: 0, NEUTRAL: 0, CONTRADICTED: 0}
        for s in self.sentences:
            out[s.verdict] += 1
        return out

    @property
    def grounded(self) -> bool:
        """True when every sentence is entailed by some chunk."""
        return all(s.verdict == ENTAILED for s in self.sentences)

    @property
    def supported(self) -> bool:
        """Grounded, and (when a question was given) answering it with every claim: one
        grounded sentence about something else makes it not supported, as the count says."""
        return self.grounded and self.answers is not False and not any(s.on_question is False for s in self.sentences)

    @property
    def claims(self) -> tuple[SentenceVerdict, ...]:
        """The sentences that say something: with a question, headings (never judged on it) are
        structure and left out of the count."""
        if self.answers is None:
            return self.sentences
        return tuple(s for s in self.sentences if s.on_question is not None)

    @property
    def supported_sentences(self) -> int:
        """Claims grounded in a chunk *and* addressing the question (when one was given): a
        grounded line about something else supports no answer, so it is not counted."""
        return sum(s.verdict == ENTAILED and s.on_question is not False for s in self.claims)

    def summary(self) -> str:
        """The one line every front end shows (CLI, server, web page)."""
        c = self.counts
        n = len(self.claims)
        aside = c[ENTAILED] - self.supported_sentences
        beside = f", {aside} grounded but not on the question" if aside else ""
        off = f"; they do not answer the question ({self.off_question})" if self.answers is False else ""
        return (f"{self.supported_sentences}/{n} sentences supported{beside}, {c[NEUTRAL]} unsupported, "
                f"{c[CONTRADICTED]} contradicted{off} (policy: {self.policy})")

    def to_dict(self) -> dict:
        return {"policy": self.policy, "grounded": self.grounded, "answers": self.answers,
                "supported": self.supported, "counts": self.counts, "supported_sentences": self.supported_sentences,
                "summary": self.summary(), "text": self.text,
                "sentences": [{**asdict(s), "missing": list(s.missing)} for s in self.sentences]}


def split_sentences(answer: str) -> list[str]:
    """Answer sentences: list items are sentences of their own; a fenced code block is one
    unit; citations stay attached.

    Sentence boundaries come from ``chunk.sentence_spans`` (which keeps "3.5"
    whole), then a cut after a common abbreviation ("e.g.", "Dr.") is undone;
    bullets are stripped and each line starts a new sentence. Markup is structure, not a
    claim: a line of punctuation alone ("///", "{") is skipped and a heading's marker
    dropped; a table row is checked as "header: cell; ..." (what the row says), and a
    header with no rows under it as its cells. Nothing with words in it goes unchecked.
    """
    out: list[str] = []
    pending_break = True
    code: list[str] | None = None  # lines of an open fenced code block: one unit, as the answerer quotes it
    lines = answer.splitlines()
    header: list[str] = []  # the header cells of the table being read
    rows = 0  # rows read under that header

    def end_table() -> None:
        nonlocal header, rows
        if header and not rows and any(ch.isalnum() for c in header for ch in c):
            out.append("; ".join(c for c in header if c))  # a header alone still says something
        header, rows = [], 0

    for i, raw in enumerate(lines):
        if code is None and _is_row(raw):
            if i + 1 < len(lines) and _is_rule(lines[i + 1]):
                end_table()
                header = _cells(raw)
            elif not _is_rule(raw):
                row = _row_claim(header, _cells(raw))
                rows += 1
                if any(ch.isalnum() for ch in row):
                    out.append(row)
            pending_break = True
            continue
        end_table()
        if code is not None:
            code.append(raw)
            if raw.strip().startswith(code[0].strip()[:3]):
                out += _code_unit(code)
                code, pending_break = None, True
            continue
        if raw.strip().startswith(("```", "~~~")):
            code = [raw.strip()]
            continue
        line = _BULLET.sub("", raw).strip()
        if not any(ch.isalnum() for ch in line):
            continue  # "///", "{", "---": markup or punctuation alone states nothing to check
        for s, e in sentence_spans(line):
            sent = line[s:e].strip()
            # A citation after the full stop ("... week. [2] Next") belongs to the sentence before.
            lead = _LEADING_CITATIONS.match(sent)
            rest = sent[lead.end():].strip() if lead else sent
            # Same line, or a line of citations only: the tag belongs to the sentence before.
            if out and lead and lead.group(0).strip() and (not pending_break or not rest):
                out[-1] += " " + lead.group(0).strip()
                sent = rest
            # A title always precedes a name; after "e.g." or "etc." only a lower-case word continues.
            glued = _TITLE.search(out[-1]) or (_ABBREV.search(out[-1]) and sent[:1].islower()) if out else False
            if sent and glued and not pending_break:
                out[-1] += " " + sent  # "e.g." / "Dr." ended no sentence
            elif any(ch.isalnum() for ch in sent):  # "1. ---" leaves a "---" that says nothing
                out.append(sent)
            pending_break = False
        pending_break = True  # a new line always starts a new sentence
    end_table()
    if code is not None:  # an unclosed fence runs to the end
        out += _code_unit(code)
    return out


def heading_texts(answer: str) -> set[str]:
    """The answer's Markdown headings, as ``split_sentences`` gives them (marker dropped)."""
    return {_BULLET.sub("", line).strip() for line in answer.splitlines() if _HEADING.match(line)}


def quoted_title(title: str, chunks: Sequence[str]) -> int | None:
    """The first chunk holding ``title`` word for word (case and punctuation aside), if any.

    A heading such as "Carry-over" is no sentence the NLI model can judge, but one copied
    from a source is grounded there; a heading no source holds is checked like any claim,
    so a model cannot state something unchecked by making it a heading."""
    words = " ".join(_WORDS_OF.findall(title.lower()))
    if not words:
        return None
    for i, text in enumerate(chunks):
        if f" {words} " in f" {' '.join(_WORDS_OF.findall(text.lower()))} ":
            return i
    return None


def _code_unit(lines: list[str]) -> list[str]:
    """A fenced block as one unit; an empty one (fences alone) states nothing."""
    return ["\n".join(lines)] if any(ch.isalnum() for line in lines[1:] for ch in line) else []


def strip_citations(sentence: str) -> str:
    """The claim without its citation markers (they carry no meaning for NLI)."""
    return CITATION.sub("", sentence).strip()


_NUM = re.compile(r"\d+(?:[.,]\d+)*")
_NUM_WORDS = {w: str(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}
_NAME = re.compile(r"(?<![.!?:]\s)(?<!^)\b[A-Z][A-Za-z0-9]+(?:[-'][A-Za-z0-9]+)*")
_WORDS = re.compile(r"[a-z0-9]+")


def _numbers(text: str) -> set[str]:
    found = {n.replace(",", "").rstrip(".") for n in _NUM.findall(text)}
    return found | {_NUM_WORDS[w] for w in _WORDS.findall(text.lower()) if w in _NUM_WORDS}


def unsupported_facts(claim: str, chunks: Sequence[str]) -> list[str]:
    """Numbers and capitalised names in ``claim`` that occur in none of ``chunks``.

    An NLI model judges meaning and can miss a swapped figure or name inside an
    otherwise matching sentence; a figure the sources never state is unsupported
    whatever the model thinks. Number words count as their digits ("ten" = 10).
    """
    text = " ".join(chunks)
    have_nums, have_words = _numbers(text), set(_WORDS.findall(text.lower()))
    missing = sorted(_numbers(claim) - have_nums, key=claim.find)
    body = claim[1:]  # the first word is capitalised anyway
    for m in _NAME.finditer(body):
        if any(w not in have_words for w in _WORDS.findall(m.group(0).lower())):
            missing.append(m.group(0))
    return missing


def decide(probs: Sequence[Sequence[float]], min_entail: float, min_contra: float) -> tuple[str, float, int]:
    """Verdict for one sentence from its per-chunk (entail, neutral, contradict) rows.

    Entailed if the best chunk's entailment clears ``min_entail``; else
    contradicted if some chunk's contradiction clears ``min_contra``; else
    neutral, pointing at the chunk that came closest to supporting it.
    Returns (verdict, probability, index of the deciding chunk).
    """
    best = max(range(len(probs)), key=lambda i: probs[i][E])
    if probs[best][E] >= min_entail:
        return ENTAILED, float(probs[best][E]), best
    worst = max(range(len(probs)), key=lambda i: probs[i][C])
    if probs[worst][C] >= min_contra:
        return CONTRADICTED, float(probs[worst][C]), worst
    return NEUTRAL, float(1.0 - probs[best][E]), best


def apply_policy(answer: str, verdicts: Sequence[SentenceVerdict], policy: str, answers: bool | None = None) -> str:
    """The answer text after ``policy`` (see module docstring); an answer that does not
    answer the question (``answers`` False) is refused by ``drop`` and ``refuse`` alike."""
    if policy not in VERIFY_POLICIES:
        raise ValueError(f"unknown verify policy {policy!r}; choose one of {', '.join(VERIFY_POLICIES)}")
    def good(v: SentenceVerdict) -> bool:  # grounded, and not off the question when one was asked
        return v.verdict == ENTAILED and v.on_question is not False

    bad = [v for v in verdicts if not good(v)]
    if policy == "flag" or (not bad and answers is not False):
        return answer
    if policy == "refuse" or answers is False:
        return NOT_SUPPORTED
    kept = [v.sentence for v in verdicts if good(v)]
    return " ".join(kept) if kept else NOT_SUPPORTED


def verify(
    answer: str,
    chunks: Sequence[tuple[str, str]],
    nli,
    policy: str = "flag",
    min_entail: float | None = None,
    min_contra: float | None = None,
    fact_check: bool = True,
    question: str | None = None,
    relevance_of: Callable[[str, list[str], list[str]], Relevance] | None = None,
    answerability: tuple[float, float, float] = (0.0, 1.0, 0.0),
) -> Verification:
    """Check ``answer`` against ``chunks`` = [(chunk id, text), ...] with backend ``nli``.

    Thresholds default to the backend's calibrated ones (``nli.min_entail``,
    ``nli.min_contra``). With ``fact_check`` an entailed sentence stating a
    number or name that no chunk contains becomes unsupported (see
    ``unsupported_facts``). With no chunks every sentence is unsupported.
    With ``question``, each sentence is also scored for whether it addresses it
    (``relevance_of(question, sentences, chunk texts)``, the answerer's measure), and the
    answer ``answers`` the question only when its entailed sentences pass the
    answerer's test (``answerability`` = min_support, max_missing, rescue_sem).
    """
    min_entail = nli.min_entail if min_entail is None else min_entail
    min_contra = nli.min_contra if min_contra is None else min_contra
    sentences = split_sentences(answer)
    verdicts: list[SentenceVerdict] = []
    if sentences and chunks:
        claims = [strip_citations(s) or s for s in sentences]
        grid = nli.score_grid([t for _, t in chunks], claims)  # [sentence][chunk] -> probs
        texts = [t for _, t in chunks]
        titles = heading_texts(answer)
        for sent, claim, rows in zip(sentences, claims, grid):
            verdict, p, i = decide(rows, min_entail, min_contra)
            if verdict != ENTAILED and sent in titles and (at := quoted_title(claim, texts)) is not None:
                verdict, p, i = ENTAILED, 1.0, at  # a source's own heading, copied
            missing = tuple(unsupported_facts(claim, texts)) if fact_check else ()
            if verdict == ENTAILED and missing:
                verdict, p = NEUTRAL, 1.0 - p
            verdicts.append(SentenceVerdict(sent, verdict, round(p, 4), chunks[i][0], missing))
    else:
        verdicts = [SentenceVerdict(s, NEUTRAL, 1.0, None) for s in sentences]
    answers, why = None, ""
    if question is not None and sentences:
        claims = [strip_citations(v.sentence) or v.sentence for v in verdicts]
        rel = (relevance_of or _keyword_relevance)(question, claims, [t for _, t in chunks])
        min_support, max_missing, rescue_sem = answerability
        # A heading is structure, not a claim: it is not judged on the question (nor counted against it).
        heads = heading_texts(answer)
        verdicts = [replace(v, on_question=None if v.sentence in heads else bool(rel.support[i] >= min_support))
                    for i, v in enumerate(verdicts)]
        # What answers is what the claims say: a heading copied from a source answers nothing.
        entailed = np.array([v.verdict == ENTAILED and v.sentence not in heads for v in verdicts])
        said = judge(rel, min_support, max_missing, rescue_sem, entailed)
        answers, why = said.answerable, said.reason
    return Verification(tuple(verdicts), policy, apply_policy(answer, verdicts, policy, answers), answers, why)


def _keyword_relevance(question: str, texts: list[str], sources: list[str]) -> Relevance:
    return relevance(question, texts, sources)


def verify_with(settings: Settings, answer: str, chunks: Sequence[tuple[str, str]], question: str | None = None,
                relevance_of: Callable[[str, list[str], list[str]], Relevance] | None = None) -> Verification:
    """:func:`verify` wired from ``settings``: its backend (``nli``), policy and thresholds.
    The one place step 6 is configured, for the engine and ``microrag verify`` alike."""
    return verify(answer, chunks, load_nli(settings.nli), policy=settings.verify_policy, min_entail=settings.min_entail,
                  min_contra=settings.min_contra, fact_check=settings.verify_facts, question=question,
                  relevance_of=relevance_of,
                  answerability=(settings.answer_min_support, settings.answer_max_missing, settings.answer_rescue_sem))
