"""Step 3, a safeguard against PoisonedRAG (pure): passages that restate the question.

PoisonedRAG's black-box recipe (Zou et al., USENIX Security 2025) writes each
crafted passage as the target question itself followed by text asserting the
attacker's answer: the question part wins retrieval for exactly that question
(its words and its embedding are the query's), the rest plants the answer. A
genuine document rarely asks the reader's question back in the reader's words; an
FAQ does, which is why such a passage is *held back* only when other passages
ground the answer (``Engine.retrieve``), never dropped from the index.

A sentence restates the query when it is phrased as a question (ends in ``?`` or
opens with an interrogative word) and it and the query share most of their
content words both ways (stemmed, stop words out: ``text.bm25_tokens``), so a
longer question that merely mentions the topic does not count. Paraphrases
with other words are not caught (SECURITY.md, residuals).
"""

from __future__ import annotations

from ..text import bm25_tokens, sentence_spans

# Both shares must reach these: query words found in the sentence, and sentence words found in the query.
MIN_QUERY_SHARE = 0.75
MIN_SENTENCE_SHARE = 0.6
MIN_QUERY_WORDS = 2  # "what is X?" (one content word) is asked back by every glossary
MAX_SPAN = 3  # sentences (as the splitter sees them) one restated question may take
_ASKING = frozenset("who whom whose what when where which why how is are was were do does did can could should "
                    "would will has have had".split())
# Only the opening of a long passage is read: the crafted question leads its passage,
# and a chunk is a few hundred tokens anyway, so this bounds the work, not the catch.
_HEAD_CHARS = 4000


def restated_question(query: str, text: str) -> str:
    """The sentence(s) of ``text`` that restate ``query`` as a question, or ``""``.

    A question can span sentences as the splitter sees them: a question with a preamble
    ("X is the third episode of Y. Who ...?") or initials ("E. B. White"), so the last one to
    three sentences up to each question-shaped one are tried as one."""
    wanted = set(bm25_tokens(query))
    if len(wanted) < MIN_QUERY_WORDS:
        return ""
    head = text[:_HEAD_CHARS]
    spans = sentence_spans(head)
    for k, (start, end) in enumerate(spans):
        sentence = head[start:end].strip()
        words = sentence.split(maxsplit=1)
        opener = words[0].lower().strip("\"'*#([") if words else ""
        if not (sentence.rstrip("\"')]*").endswith("?") or opener in _ASKING):
            continue
        for first in range(k, max(k - MAX_SPAN, -1), -1):
            said = set(bm25_tokens(head[spans[first][0]:end]))
            shared = len(wanted & said)
            if said and shared / len(wanted) >= MIN_QUERY_SHARE and shared / len(said) >= MIN_SENTENCE_SHARE:
                return head[spans[first][0]:end].strip()
    return ""
