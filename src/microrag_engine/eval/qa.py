"""QA evaluation: does the answer a user reads carry the facts, and refuse when it should?

In:  a QA file (JSON lines) and an engine over the corpus it was written for:
       {"id", "question", "kind", "docs": [page, ...], "facts": [[any-of, ...], ...]}
       {"id", "question", "kind": "unanswerable", "answerable": false}
     ``facts`` are all-of groups of any-of strings, checked against the answer text
     (case-insensitive, whitespace collapsed, not the tail of a longer word or number
     nor the head of a number: "5" is not found in "15" or "50", "day" is in "days").
Out: per question the retrieved pages, the answer, what it contained and how long
     the answer step took; overall
       * hit@4          - a listed page among the top 4 retrieved (answerable);
       * fact recall    - share of fact groups present in the answers (answerable);
       * all facts      - share of answers holding every group;
       * refused when unanswerable / false refusals - whole-answer refusals;
       * answer latency - the answer step alone, after retrieval (p50, p95), over the
         questions the gate let through.
This module only measures; it never changes what the engine does.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..config import LLMConfig
from ..engine import Engine
from ..errors import CorpusError
from ..generate import Relevance, UnknownNames, judge, score_units, unknown_names
from ..types import NOT_IN_DOCUMENTS
from ..verify import CITATION as _CITATION

KINDS = ("howto", "identifier", "conceptual", "unanswerable")


@dataclass(frozen=True)
class QAItem:
    id: str
    question: str
    kind: str
    docs: tuple[str, ...] = ()
    facts: tuple[tuple[str, ...], ...] = ()

    @property
    def answerable(self) -> bool:
        return self.kind != "unanswerable"


def load_qa(path: str | Path) -> list[QAItem]:
    """Read and check a QA file; a malformed line is a :class:`CorpusError` naming it."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"QA file {str(path)!r} does not exist")
    items: list[QAItem] = []
    seen: set[str] = set()
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            answerable = rec.get("answerable", True) and rec.get("kind") != "unanswerable"
            item = QAItem(str(rec["id"]), str(rec["question"]), "unanswerable" if not answerable else str(rec["kind"]),
                          tuple(rec.get("docs", ())) if answerable else (),
                          tuple(tuple(str(s) for s in group) for group in rec.get("facts", ())) if answerable else ())
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorpusError(f"{path}:{n}: not a QA record ({type(exc).__name__}: {exc}); "
                              'expected {"id", "question", "kind", "docs", "facts"}') from None
        if item.kind not in KINDS:
            raise CorpusError(f"{path}:{n}: kind {item.kind!r} is not one of {', '.join(KINDS)}")
        if item.answerable and not (item.docs and item.facts and all(item.facts)):
            raise CorpusError(f"{path}:{n}: an answerable question needs 'docs' and non-empty 'facts' groups")
        if item.id in seen:
            raise CorpusError(f"{path}:{n}: repeated id {item.id!r}")
        seen.add(item.id)
        items.append(item)
    if not items:
        raise CorpusError(f"{path} holds no questions")
    return items


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def fact_present(answer: str, alternatives: tuple[str, ...]) -> bool:
    """Whether any alternative occurs in ``answer`` as a whole token sequence."""
    hay = _norm(answer)
    for alt in alternatives:
        needle = _norm(alt)
        for m in re.finditer(re.escape(needle), hay):
            before = hay[m.start() - 1] if m.start() else " "
            after = hay[m.end()] if m.end() < len(hay) else " "
            # Not the tail of a longer word or number ("5" in "15", "pired" in "expired"), nor
            # a number's head ("5" in "50"); a word may go on ("day" in "days", "cache" in "cached").
            if not (needle[0].isalnum() and before.isalnum()) and not (needle[-1].isdigit() and after.isdigit()):
                return True
    return False


def is_refusal(answer: str) -> bool:
    """A whole-answer refusal: the engine's wording (extractive) or a model that used it.
    Looser than ``generate.is_refusal`` on purpose: a model may open with a word or two
    ("Sorry, the indexed documents don't cover that") before the refusal sentence, or drop its full stop."""
    head = answer.strip()[: len(NOT_IN_DOCUMENTS) + 40].lower().replace("\u2019", "'")  # a model's typographic apostrophe
    return NOT_IN_DOCUMENTS.lower()[:-1] in head


@dataclass
class QAResult:
    item: QAItem
    pages: list[str]
    answer: str
    refused: bool
    found: list[bool] = field(default_factory=list)  # per fact group
    seconds: float = 0.0
    gate_refused: bool = False  # nothing was retrieved, so there was no answer step to time

    def as_dict(self) -> dict:
        return {"id": self.item.id, "kind": self.item.kind, "question": self.item.question, "pages": self.pages,
                "hit": self.hit, "refused": self.refused, "facts_found": self.found, "answer": self.answer,
                "answer_ms": round(self.seconds * 1000, 1)}

    @property
    def hit(self) -> bool:
        return any(p in self.item.docs for p in self.pages[:4])


def run_qa(engine: Engine, items: list[QAItem], llm: LLMConfig | None = None, top_k: int = 4,
           progress: Callable[[int, int], None] | None = None) -> list[QAResult]:
    """Ask every question the way ``microrag ask`` does; time the answer step alone."""
    out: list[QAResult] = []
    for n, item in enumerate(items):
        retrieval = engine.retrieve(item.question, safeguards=True, top_k=top_k)
        t = time.perf_counter()
        answer = engine.answer(item.question, retrieval, llm).text
        seconds = time.perf_counter() - t
        pages = list(dict.fromkeys(h.chunk.doc for h in retrieval.hits))
        claims = _CITATION.sub(" ", answer)  # a fact must be in the words, not in a "[source: page]" tag
        found = [fact_present(claims, group) for group in item.facts]
        out.append(QAResult(item, pages, answer, is_refusal(answer), found, seconds, retrieval.refused))
        if progress:
            progress(n + 1, len(items))
    return out


def summarise(results: list[QAResult]) -> dict:
    """The table's figures (rates in 0..1; latency in ms)."""
    ans = [r for r in results if r.item.answerable]
    un = [r for r in results if not r.item.answerable]
    groups = [f for r in ans for f in r.found]
    answered = [r.seconds * 1000 for r in results if not r.gate_refused]
    ms = np.array(answered) if answered else np.zeros(1)
    return {
        "answerable": len(ans), "unanswerable": len(un),
        "hit@4": float(np.mean([r.hit for r in ans])) if ans else 0.0,
        "fact_recall": float(np.mean(groups)) if groups else 0.0,
        "all_facts": float(np.mean([all(r.found) for r in ans])) if ans else 0.0,
        "refused_unanswerable": float(np.mean([r.refused for r in un])) if un else 0.0,
        "false_refusals": float(np.mean([r.refused for r in ans])) if ans else 0.0,
        "answer_ms_p50": float(np.percentile(ms, 50)), "answer_ms_p95": float(np.percentile(ms, 95)),
    }


COLUMNS = (("hit@4", "hit@4"), ("fact_recall", "facts"), ("all_facts", "all facts"),
           ("refused_unanswerable", "refused unans."), ("false_refusals", "false refusals"),
           ("answer_ms_p50", "answer ms p50"))


def table(rows: list[tuple[str, dict]]) -> str:
    """A Markdown table of :func:`summarise` figures, one row per (name, summary)."""
    head = "| set | questions | " + " | ".join(label for _, label in COLUMNS) + " |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 2)]
    for name, s in rows:
        cells = [f"{s[k]:.0f}" if k.startswith("answer_ms") else f"{s[k]:.2f}" for k, _ in COLUMNS]
        lines.append(f"| {name} | {s['answerable']}+{s['unanswerable']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@dataclass(frozen=True)
class Signals:
    """What the answerability test reads for one question (for calibration sweeps)."""

    gate_refused: bool
    rel: Relevance | None = None  # the candidate passages' relevance (None when the gate refused)
    unknown: UnknownNames = UnknownNames()  # the question's names no document holds

    def refused(self, min_support: float, max_missing: float, rescue_sem: float) -> bool:
        """Whether the gate or the answerer's test (``generate.judge``) refuses at these thresholds."""
        return self.gate_refused or self.rel is None or not judge(self.rel, min_support, max_missing,
                                                                   rescue_sem, unknown=self.unknown).answerable


def answer_signals(engine: Engine, items: list[QAItem], top_k: int = 4) -> list[Signals]:
    """The answerer's answerability inputs per question, retrieved as ``run_qa`` does."""
    out: list[Signals] = []
    for item in items:
        retrieval = engine.retrieve(item.question, safeguards=True, top_k=top_k)
        if retrieval.refused or not retrieval.hits:
            out.append(Signals(True))
            continue
        # The candidates the answerer sees: the hits and their neighbours (Engine.answer adds them).
        retrieval = engine.with_context(retrieval)
        scores = score_units(item.question, retrieval, engine.index.embedder, retrieval.weight)
        unknown = unknown_names(item.question, retrieval.known) if retrieval.known is not None else UnknownNames()
        out.append(Signals(False, scores.rel, unknown) if scores.spans else Signals(True))
    return out
