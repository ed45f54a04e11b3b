"""The retrieval query of a conversation: a follow-up retrieves what the chat is about.

"And how do I turn it off?" names nothing to search for; the turns before it do. Two
ways to build the query, both measured on ``benchmarks/conversations`` (hit@4 on
follow-up turns, ``benchmarks/conversation_report.py``):

* ``condense`` (no model): the last user message alone when it stands on its own, else
  it plus the user turns of the topic it continues. A message depends on the chat when it
  points back (``it``, ``that one``, ``the same``), opens as a continuation (``and``,
  ``what about``) or names too little to search for; it stands alone when it says it
  changes the subject (``unrelated:``, ``another question``), when its pointers resolve
  inside it (``run a subprocess and capture its output``, ``is there a way to ...``), or
  when it is short but shares no word with the earlier user turns (``what is the capital
  of France?`` after a strftime question). Only user turns are used: an answer quotes many
  documents and would pull retrieval towards all of them.
* ``rewrite`` (an LLM, opt-in: ``Settings.condense = "llm"``): the model writes a standalone
  query from the last turns. It is bounded (turns, characters, tokens, time), cached, and
  falls back to ``condense`` when the model fails or answers with something that is not a
  query. Not the default: the packaged SmolLM2-135M's rewrites retrieved worse than the
  last message alone; a capable model is the operator's to choose and measure
  (``benchmarks/conversation_report.py --llm``).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..config import CONDENSERS, LLMConfig
from ..errors import LLMError
from ..runtime.llm import chat
from ..types import Turn


@dataclass(frozen=True)
class Condensed:
    """What retrieval searches for, and how it was made (shown to callers and in the audit)."""

    query: str  # the retrieval query
    question: str  # the last user message: what the answer answers
    how: str  # "alone" (the message stood on its own), "history" (folded in), "llm" (rewritten)
    context: tuple[str, ...] = ()  # the earlier user turns that were folded in

    def note(self) -> str:
        """One line for flags and the audit trail."""
        if self.how == "alone":
            return "conversation: the last message stands alone"
        shown = self.query if len(self.query) <= 300 else self.query[:297] + "..."
        return f"conversation: retrieval query ({self.how}) = {json.dumps(shown, ensure_ascii=False)}"


# ---------------------------------------------------------------- lexical cues

# Words that point back to something said before.
POINTERS = frozenset("it it's itself that those these they them theirs there this such same "
                     "former latter above he she him her".split())
# A possessive also points inside its own sentence ("run a subprocess and capture its output",
# "copy a file and keep its modification time"): it points back only when fewer than
# POSSESSIVE_AFTER content words come before it in its sentence. Measured on the conversation
# sets (hit@4 on follow-ups, handbook / python-docs): 1, 2 or 3 keep 61/67 and 49/68 (what the old
# rule, "in a message of fewer than 5 content words", scored); 4 loses the python-docs switch
# "how do I copy a file and keep its modification time?" (48/68). 3 is the most that keeps it.
# "it"/"them" get no such rule: counted the same way, 3 loses two handbook follow-ups ("how fast do
# I have to react when it goes off?", "can I put a personal dinner on it and pay it back later?")
# for one python-docs one (59/67, 50/68) and 4 or more changes nothing, so "open a file and read
# it" still folds: lexically it looks like "put a personal dinner on it".
POSSESSIVES = frozenset("its their his".split())
POSSESSIVE_AFTER = 3
# "there" after or before a form of "be" says that something exists ("is there a way to ...",
# "there is no ..."); it points nowhere. Elsewhere ("my ssh key stopped working there") it points back.
EXISTENTIAL_BE = frozenset("is are was were be isn't aren't wasn't weren't".split())
# How continuations open ("and for contractors?", "what about Windows?"). Not "why", "so" or
# "then": they open standalone questions too ("why does the build fail on ARM?"), and a short
# "why?" or "so what's the limit?" names too little to stand alone anyway.
OPENERS = ("and ", "and,", "but ", "also", "what about", "how about", "what if", "same ", "else", "instead", "any other",
           "anything else", "does that", "do they", "can it", "is it", "what else", "more on", "tell me more", "which one",
           "how so", "in that case")
# How a new subject announces itself: the message is taken on its own whatever it says.
SWITCHES = ("unrelated", "different question", "another question", "new question", "different topic", "new topic",
            "changing the subject", "change of subject", "another thing", "different subject", "switching gears",
            "switching topics", "on another note",
            "separate question", "separate thing", "something else", "by the way", "btw", "totally different",
            "completely different", "different thing", "also unrelated")
# Words that carry no topic of their own.
STOP = frozenset("a an the of to in on for with by at from as is are was were be been being do does did done can could "
                 "should would will shall may might must i me my we our you your what which who whom whose when where "
                 "why how not no yes if or and but so than then too very just also any some all each more most "
                 "other into about over under again once here now get got make made use used using want need know "
                 "tell show give work way thing things there their them they it its this that these those one ones "
                 "same such else instead long much many still ok okay please thanks thank happen happens".split())
MIN_CONTENT_WORDS = 3  # a message with fewer topic words than this cannot be searched for alone...
# ...unless it has exactly one fewer and shares none of them with the earlier user turns: "what is the
# capital of France?" after a strftime question is a new subject, not a follow-up. Words are compared
# by their first SAME_PREFIX characters ("changes" continues "change"). Measured (handbook /
# python-docs follow-ups): 62/67 and 49/68 against 61/67 and 49/68 without it; it decides three
# follow-ups of the sets: "what happens if I miss the deadline?" (now alone, and it hits: +1),
# "can I give the subprocess a timeout?" (alone, hits as before) and "when do the changes kick in?"
# (shares "chang", still folded; comparing whole words instead loses it: 61/67). The sets have no
# short unannounced switch, so what it gains on switches is not measured there.
SAME_PREFIX = 5
MAX_CONTEXT_TURNS = 2  # earlier user turns folded in, at most (the topic, not the whole chat)
MAX_RETRIEVAL_CHARS = 4000  # of a folded query: what POST /query accepts as a question


def _words(text: str) -> list[str]:
    return [w.strip(".,;:!?()[]{}\"'`").lower() for w in text.split()]


def _topical(word: str) -> bool:
    return len(word) > 2 and word not in STOP and not word.isdigit()


def content_words(text: str) -> list[str]:
    """The words of ``text`` that name a topic."""
    return [w for w in _words(text) if _topical(w)]


def switches(text: str) -> bool:
    """Whether ``text`` announces a new subject."""
    low = " ".join(_words(text))
    return any(low.startswith(s) or f" {s}" in f" {low[:60]}" for s in SWITCHES)


def _sentences(text: str) -> list[list[str]]:
    """The words of each sentence of ``text`` (split at ``.``, ``?``, ``!``, ``;`` before a space)."""
    return [ws for part in re.split(r"[.?!;]+(?:\s|$)", text) if (ws := [w for w in _words(part) if w])]


def _existential(words: list[str], i: int) -> bool:
    """Whether ``words[i]`` ("there") says that something exists rather than pointing at a place."""
    return (i > 0 and words[i - 1] in EXISTENTIAL_BE) or (i + 1 < len(words) and words[i + 1] in EXISTENTIAL_BE)


def points_back(text: str) -> bool:
    """Whether a word of ``text`` points at something said before it (see POINTERS, POSSESSIVES)."""
    for words in _sentences(text):
        before = 0  # content words so far in this sentence
        for i, w in enumerate(words):
            if w in POSSESSIVES and before < POSSESSIVE_AFTER:
                return True
            if w in POINTERS and not (w == "there" and _existential(words, i)):
                return True
            before += _topical(w)
    return False


def _shares(words: Sequence[str], earlier: Sequence[str]) -> bool:
    said = {w[:SAME_PREFIX] for text in earlier for w in content_words(text)}
    return any(w[:SAME_PREFIX] in said for w in words)


def depends(text: str, earlier: Sequence[str] = ()) -> bool:
    """Whether ``text`` needs the conversation to be searched for (see the module's notes);
    ``earlier``: the user turns before it (without them a short message always depends)."""
    if switches(text):
        return False
    low = " ".join(w for w in _words(text) if w)

    def opens(o: str) -> bool:
        o = o.strip()
        return low.startswith(o) and (len(o) == len(low) or not low[len(o)].isalnum())

    if any(opens(o) for o in OPENERS) or points_back(text):
        return True
    topical = content_words(text)
    if len(topical) == MIN_CONTENT_WORDS - 1 and earlier:
        return _shares(topical, earlier)
    return len(topical) < MIN_CONTENT_WORDS


def user_turns(turns: Sequence[Turn]) -> list[str]:
    return [t.content for t in turns if t.role == "user" and t.content.strip()]


def condense(turns: Sequence[Turn]) -> Condensed:
    """The retrieval query for the last user message of ``turns`` (no model).

    A dependent message takes the user turns of its topic: walking back, each earlier
    user turn is folded in until one that stood alone (the topic's start) or
    ``MAX_CONTEXT_TURNS``."""
    said = user_turns(turns)
    if not said:
        raise ValueError("the conversation has no user message")
    last = said[-1]
    if len(said) == 1 or not depends(last, said[:-1]):
        # Bounded as a /query question is, alone too: retrieval never reads more than a question.
        return Condensed(last[:MAX_RETRIEVAL_CHARS], last, "alone")
    context: list[str] = []
    for i in range(len(said) - 2, -1, -1):
        context.insert(0, said[i])
        if len(context) >= MAX_CONTEXT_TURNS or not depends(said[i], said[:i]):
            break
    # Bounded as a /query question is: the end of the joined text, where the follow-up is.
    return Condensed(" ".join([*context, last])[-MAX_RETRIEVAL_CHARS:], last, "history", tuple(context))


# ---------------------------------------------------------------- the LLM rewrite

REWRITE_PROMPT = ("You turn the last user message of a conversation into one standalone search query for a "
                  "document search engine. Resolve pronouns and ellipsis from the earlier turns; keep the user's "
                  "own terms; if the last message already stands alone or changes the subject, repeat it as is. "
                  "Reply with the query only: one line, no quotes, no explanation.")
REWRITE_TURNS = 6  # the last messages the model sees
REWRITE_CHARS = 600  # of each message
REWRITE_TOKENS = 48  # of the reply
REWRITE_SECONDS = 15.0
MAX_QUERY_CHARS = 300


class RewriteCache:
    """A bounded LRU of rewrites, keyed by a hash of the model and the turns it saw (no text is kept twice)."""

    def __init__(self, size: int = 512) -> None:
        self.size, self.lock = size, threading.Lock()
        self.items: OrderedDict[str, str] = OrderedDict()

    def get(self, key: str) -> str | None:
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]
            return None

    def put(self, key: str, value: str) -> None:
        with self.lock:
            self.items[key] = value
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)


CACHE = RewriteCache()


def _rewrite_messages(turns: Sequence[Turn]) -> list[dict[str, str]]:
    shown = [t for t in turns if t.role in ("user", "assistant")][-REWRITE_TURNS:]
    lines = "\n".join(f"{t.role}: {' '.join(t.content.split())[:REWRITE_CHARS]}" for t in shown)
    return [{"role": "system", "content": REWRITE_PROMPT},
            {"role": "user", "content": f"Conversation:\n{lines}\n\nStandalone search query for the last user message:"}]


def _as_query(reply: str) -> str | None:
    """The model's reply as a query, or None when it is not one (empty, too long, a refusal)."""
    lines = [x.strip().strip("\"'`").strip() for x in reply.strip().splitlines() if x.strip()]
    if not lines:
        return None
    line = lines[0].removeprefix("Query:").removeprefix("query:").strip()
    return line if 0 < len(line) <= MAX_QUERY_CHARS else None


def retrieval_query(turns: Sequence[Turn], how: str, llm: LLMConfig | None = None, scope: str = "") -> Condensed:
    """The retrieval query by ``Settings.condense``: "lexical" (``condense``), "llm" (the
    model's rewrite, ``condense`` without a model), "off" (the last user message alone)."""
    if how not in CONDENSERS:
        raise ValueError(f"unknown condense {how!r}; choose one of: {', '.join(CONDENSERS)}")
    if how == "off":
        said = user_turns(turns)
        if not said:
            raise ValueError("the conversation has no user message")
        return Condensed(said[-1], said[-1], "alone")
    return rewrite(turns, llm, scope=scope) if how == "llm" and llm is not None else condense(turns)


def rewrite(turns: Sequence[Turn], llm: LLMConfig, cache: RewriteCache = CACHE, scope: str = "") -> Condensed:
    """The retrieval query written by ``llm`` (see the module's notes); ``condense`` when
    the model fails, is cut off, or there is nothing to resolve (the first message).
    ``scope`` (the caller) keys the cache: a cache hit answers faster, and must not tell
    one caller what another one asked."""
    fallback = condense(turns)
    if len(user_turns(turns)) == 1:
        return fallback
    messages = _rewrite_messages(turns)
    key = hashlib.sha256(json.dumps([scope, llm.base_url, llm.model, messages]).encode()).hexdigest()
    query = cache.get(key)
    if query is None:
        bounded = replace(llm, max_tokens=REWRITE_TOKENS, temperature=0.0, timeout=min(llm.timeout, REWRITE_SECONDS),
                          max_retries=0)
        try:
            reply, truncated = chat(bounded, messages)
        except LLMError:
            return fallback
        found = None if truncated else _as_query(reply)
        if found is None:
            return fallback
        query = found
        cache.put(key, query)
    return Condensed(query, fallback.question, "llm", fallback.context)
