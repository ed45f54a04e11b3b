"""The retrieval query of a conversation: a follow-up retrieves what the chat is about.

"And how do I turn it off?" names nothing to search for; the turns before it do. Two
ways to build the query, both measured on ``benchmarks/conversations`` (hit@4 on
follow-up turns, ``benchmarks/conversation_report.py``):

* ``condense`` (no model): the last user message alone when it stands on its own, else
  it plus the user turns of the topic it continues. A message depends on the chat when it
  points back (``it``, ``that one``, ``the same``), opens as a continuation (``and``,
  ``what about``) or names too little to search for; it stands alone when it says it
  changes the subject (``unrelated:``, ``another question``). Only user turns are used:
  an answer quotes many documents and would pull retrieval towards all of them.
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

# Words that point back to something said before. Possessives also point inside their own
# sentence ("copy a file and keep its modification time"), so they count only in short messages.
POINTERS = frozenset("it it's itself that those these they them theirs there this such same "
                     "former latter above he she him her".split())
POSSESSIVES = frozenset("its their his".split())
SHORT = 5  # content words: below this a possessive points back
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
MIN_CONTENT_WORDS = 3  # a message with fewer topic words than this cannot be searched for alone
MAX_CONTEXT_TURNS = 2  # earlier user turns folded in, at most (the topic, not the whole chat)
MAX_RETRIEVAL_CHARS = 4000  # of a folded query: what POST /query accepts as a question


def _words(text: str) -> list[str]:
    return [w.strip(".,;:!?()[]{}\"'`").lower() for w in text.split()]


def content_words(text: str) -> list[str]:
    """The words of ``text`` that name a topic."""
    return [w for w in _words(text) if len(w) > 2 and w not in STOP and not w.isdigit()]


def switches(text: str) -> bool:
    """Whether ``text`` announces a new subject."""
    low = " ".join(_words(text))
    return any(low.startswith(s) or f" {s}" in f" {low[:60]}" for s in SWITCHES)


def depends(text: str) -> bool:
    """Whether ``text`` needs the conversation to be searched for (see the module's notes)."""
    if switches(text):
        return False
    words = [w for w in _words(text) if w]
    low = " ".join(words)
    topical = len(content_words(text))

    def opens(o: str) -> bool:
        o = o.strip()
        return low.startswith(o) and (len(o) == len(low) or not low[len(o)].isalnum())

    if any(opens(o) for o in OPENERS):
        return True
    if any(w in POINTERS or (w in POSSESSIVES and topical < SHORT) for w in words):
        return True
    return topical < MIN_CONTENT_WORDS


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
    if len(said) == 1 or not depends(last):
        return Condensed(last, last, "alone")
    context: list[str] = []
    for earlier in reversed(said[:-1]):
        context.insert(0, earlier)
        if len(context) >= MAX_CONTEXT_TURNS or not depends(earlier):
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
