"""Sentence perturbations that a grounding check must catch (or must let through).

Given a sentence taken from a chunk, each function returns a new sentence or
``None`` when it does not apply:
  * ``paraphrase``   - meaning kept (synonym swaps, dropped asides)  -> should be entailed;
  * ``swap_number``, ``swap_date``, ``negate``, ``swap_antonym``, ``swap_entity``
                     - one fact changed                                -> should be flagged.
``rag_pairs`` turns passages into labelled (premise, hypothesis, label) rows:
copies and paraphrases as entailment, perturbations as contradiction, sentences
from other passages as neutral. The NLI trainer uses it on its training corpora
and ``evaluate_nli`` on held-out ones. Rules only: no model, so the changes are
shallow by design - a verifier that passes them is necessary, not sufficient.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence

ENTAILMENT, NEUTRAL, CONTRADICTION = "entailment", "neutral", "contradiction"

# Word swaps that keep the meaning (lower-case keys; matched on word boundaries).
_SYNONYMS = {
    "approximately": "about", "about": "roughly", "purchase": "buy", "buy": "purchase",
    "begin": "start", "begins": "starts", "began": "started", "start": "begin",
    "employees": "staff", "staff": "employees", "large": "big", "big": "large",
    "small": "little", "help": "assist", "use": "employ", "uses": "employs",
    "must": "has to", "quickly": "rapidly", "rapidly": "quickly", "shows": "demonstrates",
    "showed": "demonstrated", "demonstrated": "showed", "receive": "get", "receives": "gets",
    "however": "but", "also": "additionally", "known as": "called", "called": "known as",
    "located": "situated", "situated": "located", "created": "made", "produced": "made",
    "several": "a number of", "many": "numerous", "numerous": "many", "often": "frequently",
    "frequently": "often", "reduce": "lower", "reduces": "lowers", "increase": "raise",
    "contact": "reach", "within": "inside", "before": "prior to", "after": "following",
}
_ANTONYMS = {
    "increase": "decrease", "increases": "decreases", "increased": "decreased",
    "decrease": "increase", "decreases": "increases", "decreased": "increased",
    "higher": "lower", "lower": "higher", "more": "fewer", "less": "more",
    "before": "after", "after": "before", "first": "last", "last": "first",
    "maximum": "minimum", "minimum": "maximum", "allowed": "forbidden", "forbidden": "allowed",
    "required": "optional", "optional": "required", "always": "never", "never": "always",
    "larger": "smaller", "smaller": "larger", "early": "late", "late": "early",
    "positive": "negative", "negative": "positive", "north": "south", "south": "north",
    "east": "west", "west": "east", "enabled": "disabled", "disabled": "enabled",
    "won": "lost", "lost": "won", "older": "younger", "younger": "older",
    "inhibits": "promotes", "promotes": "inhibits", "activates": "suppresses",
    "suppresses": "activates", "reduced": "raised", "improves": "worsens", "improved": "worsened",
}
_MONTHS = ["January", "February", "March", "April", "May", "June", "July",
           "August", "September", "October", "November", "December"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
# Auxiliaries we can negate by inserting "not" (and their already-negated forms).
_NEGATABLE = re.compile(r"\b(is|are|was|were|can|will|must|should|has been|have been|does|did|may)\b")
_NEGATED = re.compile(r"\b(is|are|was|were|can|will|must|should|does|did|may) not\b|\b(cannot|never)\b")
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:[.,]\d+)?)(?![\w])")
_YEAR = re.compile(r"\b(1[5-9]\d\d|20\d\d)\b")
_ENTITY = re.compile(r"(?<!^)(?<![.!?]\s)\b([A-Z][a-z]+(?:\s+[A-Z][a-z]+)*)\b")
_WORD_CACHE: dict[tuple[str, ...], re.Pattern[str]] = {}


def _word_re(words: Sequence[str]) -> re.Pattern[str]:
    key = tuple(words)
    if key not in _WORD_CACHE:  # longest first so "known as" beats "as"
        alts = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
        _WORD_CACHE[key] = re.compile(rf"\b({alts})\b", re.I)
    return _WORD_CACHE[key]


def _match_case(src: str, new: str) -> str:
    return new[:1].upper() + new[1:] if src[:1].isupper() else new


def _swap_words(sentence: str, table: dict[str, str], rng: random.Random, limit: int) -> str | None:
    hits = list(_word_re(list(table)).finditer(sentence))
    if not hits:
        return None
    chosen = sorted(rng.sample(hits, min(limit, len(hits))), key=lambda m: m.start())
    out, pos = [], 0
    for m in chosen:
        out += [sentence[pos : m.start()], _match_case(m.group(0), table[m.group(0).lower()])]
        pos = m.end()
    return "".join(out) + sentence[pos:]


def paraphrase(sentence: str, rng: random.Random) -> str | None:
    """Meaning-preserving rewrite: drop a bracketed aside and/or swap synonyms."""
    out = re.sub(r"\s*\([^()]{1,80}\)", "", sentence)
    swapped = _swap_words(out, _SYNONYMS, rng, limit=2)
    out = swapped or out
    return out if out != sentence and len(out.split()) >= 4 else None


def swap_number(sentence: str, rng: random.Random) -> str | None:
    """Change one number that is not a year (years belong to ``swap_date``)."""
    hits = [m for m in _NUMBER.finditer(sentence) if not _YEAR.fullmatch(m.group(1))]
    if not hits:
        return None
    m = rng.choice(hits)
    raw = m.group(1)
    value = float(raw.replace(",", ""))
    new = value * rng.choice([2, 3, 0.5]) if value > 3 else value + rng.choice([2, 3, 5])
    text = f"{new:.{len(raw.split('.')[1])}f}" if "." in raw else str(int(round(new)))
    return None if text == raw else sentence[: m.start(1)] + text + sentence[m.end(1) :]


def swap_date(sentence: str, rng: random.Random) -> str | None:
    """Move a year, a month or a weekday."""
    for pattern, pick in (
        (_YEAR, lambda s: str(int(s) + rng.choice([-7, -3, -2, 2, 4, 9]))),
        (re.compile(r"\b(" + "|".join(_MONTHS) + r")\b"), lambda s: rng.choice([x for x in _MONTHS if x != s])),
        (re.compile(r"\b(" + "|".join(_DAYS) + r")\b"), lambda s: rng.choice([x for x in _DAYS if x != s])),
    ):
        hits = list(pattern.finditer(sentence))
        if hits:
            m = rng.choice(hits)
            return sentence[: m.start(1)] + pick(m.group(1)) + sentence[m.end(1) :]
    return None


def negate(sentence: str, rng: random.Random) -> str | None:
    """Insert a "not" after an auxiliary, or remove an existing negation."""
    neg = _NEGATED.search(sentence)
    if neg:
        word = neg.group(0)
        repl = {"cannot": "can", "never": "always"}.get(word.lower(), word[: -len(" not")])
        return sentence[: neg.start()] + _match_case(word, repl) + sentence[neg.end() :]
    m = _NEGATABLE.search(sentence)
    if not m or re.search(r"\b(neither|nor|none|nobody|no)\b", sentence, re.I):  # avoid double negatives
        return None
    aux = m.group(1)
    parts = aux.split(" ", 1)
    new = f"{parts[0]} not" + (f" {parts[1]}" if len(parts) > 1 else "")
    return sentence[: m.start()] + new + sentence[m.end() :]


def swap_antonym(sentence: str, rng: random.Random) -> str | None:
    """Replace one word with its opposite (higher -> lower, before -> after...)."""
    return _swap_words(sentence, _ANTONYMS, rng, limit=1)


def swap_entity(sentence: str, others: Sequence[str], rng: random.Random) -> str | None:
    """Replace one capitalised name (not the first word) with a name from ``others``."""
    hits = [m for m in _ENTITY.finditer(sentence) if m.start() > 0 and m.group(1) not in _MONTHS + _DAYS]
    pool = [o for o in others if o not in sentence]
    if not hits or not pool:
        return None
    m = rng.choice(hits)
    return sentence[: m.start(1)] + rng.choice(pool) + sentence[m.end(1) :]


def entities(texts: Iterable[str]) -> list[str]:
    """Capitalised names found in ``texts`` (a pool for ``swap_entity``)."""
    seen: dict[str, None] = {}
    for t in texts:
        for m in _ENTITY.finditer(t):
            if m.start() > 0 and len(m.group(1)) > 3:
                seen.setdefault(m.group(1))
    return list(seen)


CONTRADICTIONS = ("number", "date", "negation", "antonym", "entity")


def perturb(kind: str, sentence: str, names: Sequence[str], rng: random.Random) -> str | None:
    """Dispatch one named perturbation (``CONTRADICTIONS`` or ``paraphrase``)."""
    if kind == "entity":
        return swap_entity(sentence, names, rng)
    fn = {"number": swap_number, "date": swap_date, "negation": negate,
          "antonym": swap_antonym, "paraphrase": paraphrase}[kind]
    return fn(sentence, rng)


def rag_pairs(
    passages: Sequence[Sequence[str]], rng: random.Random, per_passage: int = 4
) -> list[dict[str, str]]:
    """Labelled RAG-shaped rows from passages given as lists of sentences.

    Each row: ``premise`` (the passage), ``hypothesis``, ``label`` and ``kind``
    (copy, paraphrase, one of ``CONTRADICTIONS``, or unrelated).
    """
    names = entities(s for p in passages for s in p)
    rows: list[dict[str, str]] = []
    for i, sents in enumerate(passages):
        sents = [s.strip() for s in sents if len(s.split()) >= 5]
        if not sents:
            continue
        premise = " ".join(sents)
        for _ in range(per_passage):
            sent = rng.choice(sents)
            kind = rng.choice(["copy", "paraphrase", "contra", "contra", "unrelated"])
            if kind == "copy":
                rows.append(dict(premise=premise, hypothesis=sent, label=ENTAILMENT, kind="copy"))
            elif kind == "paraphrase":
                hyp = paraphrase(sent, rng)
                if hyp:
                    rows.append(dict(premise=premise, hypothesis=hyp, label=ENTAILMENT, kind="paraphrase"))
            elif kind == "contra":
                for k in rng.sample(CONTRADICTIONS, len(CONTRADICTIONS)):
                    hyp = perturb(k, sent, names, rng)
                    if hyp and hyp != sent:
                        rows.append(dict(premise=premise, hypothesis=hyp, label=CONTRADICTION, kind=k))
                        break
            else:
                j = rng.randrange(len(passages))
                other = [s.strip() for s in passages[j] if len(s.split()) >= 5]
                if j != i and other:
                    hyp = rng.choice(other)
                    if hyp not in premise:
                        rows.append(dict(premise=premise, hypothesis=hyp, label=NEUTRAL, kind="unrelated"))
    return rows
