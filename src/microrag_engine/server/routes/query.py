"""POST /query: the caller's question through the server's policy (``server.asking``).

Retrieval is filtered by the caller's clearance before ranking; the answer comes from
``Engine.answer`` (the same path as the library and the CLI); the input guard, the
output guard on every channel, the time budget and the audit row are ``Asking``'s.
This route adds its wire format: one JSON object, or server-sent events.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import re
from collections import Counter
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field, StringConstraints

from ... import guard
from ...store.base import FIELD_NAME, DocFilter
from ...types import Turn
from ..asking import Asking, Turned, guarded
from ..auth import Principal
from ..context import ServerContext

log = logging.getLogger("microrag")


FilterField = Annotated[str, StringConstraints(pattern=FIELD_NAME)]
FilterGlob = Annotated[str, StringConstraints(max_length=200)]


class SearchIn(BaseModel):
    query: str = Field(min_length=1, max_length=4000)
    top_k: int | None = Field(default=None, ge=1, le=50)
    # Query-time filters (FIELD -> glob; see store.base.DocFilter), within the caller's clearance.
    where: dict[FilterField, FilterGlob] = Field(default_factory=dict, max_length=8)
    exclude: dict[FilterField, FilterGlob] = Field(default_factory=dict, max_length=8)

    def filter(self) -> DocFilter | None:
        found = DocFilter(tuple(self.where.items()), tuple(self.exclude.items()))
        return found or None


class TurnIn(BaseModel):
    role: Literal["user", "assistant"]
    content: str = Field(max_length=16_000)


MAX_HISTORY = 40  # earlier turns a /query may carry (the page keeps the last ones)


class QueryIn(SearchIn):
    stream: bool = False
    verify: bool | None = None  # None: the server's default
    # The conversation before ``query``, oldest first: a follow-up ("and for contractors?")
    # is searched for with what it refers to (``Engine.condense``), as /v1/chat/completions does.
    history: list[TurnIn] = Field(default_factory=list, max_length=MAX_HISTORY)


# A title worth offering as a question: a word of two letters or more (any script), and no
# code, path or markup characters (matched on at most 80 characters: its cost is bounded).
_ASKABLE = re.compile(r"^(?=.*[^\W\d_]{2})[^{}<>\[\]`|*_=#~/\\]{2,80}$")
_NUMBERING = re.compile(r"^\d{1,3}(?:\.\d{1,3})*\.?\s+")  # "12. Virtual Environments", "3.2 Lists"
_INLINE_MARKS = str.maketrans("", "", "`*")  # "`json` — JSON encoder" reads as "json — JSON encoder"


@functools.lru_cache(maxsize=65_536)
def askable(title: str) -> str | None:
    """``title`` as a reader would say it, or None when it is no topic to offer: code, a
    path, markup, or text the input guard would flag. Cached: a page asks on every load,
    and the guard's check is the costly part."""
    if len(title) > 400:
        return None
    text = _NUMBERING.sub("", " ".join(title.translate(_INLINE_MARKS).split()))
    if " " not in text:  # a file name standing in for a title: "vpn-setup" -> "vpn setup"
        text = text.replace("-", " ").replace("_", " ").strip()
    if len(text) > 80 or not _ASKABLE.match(text) or guard.injection_check(text).suspicious:
        return None
    return text


def askable_titles(titles: dict[str, str]) -> list[tuple[str, str]]:
    """(document, title as said) for the titles worth offering (see ``askable``). A title
    several documents share ("Introduction", "Overview") names no topic: it is offered only
    when nothing else is."""
    said = [(doc, text) for doc, title in sorted(titles.items()) if (text := askable(title))]
    counts = Counter(text.casefold() for _, text in said)
    distinct = [(doc, text) for doc, text in said if counts[text.casefold()] == 1]
    return distinct or said


def sample_questions(pool: list[tuple[str, str]], n: int, rng: random.Random) -> list[dict[str, str]]:
    """Up to ``n`` questions drawn at random from ``pool`` (``askable_titles``: one per
    document the caller may read), so a page load shows different ones."""
    picked = rng.sample(pool, min(n, len(pool)))
    return [{"doc": guarded(doc), "title": guarded(title),
             "question": guarded(title if title.endswith("?") else f"What do the documents say about {title}?")}
            for doc, title in picked]


def router(ctx: ServerContext) -> APIRouter:
    router = APIRouter()
    asking = Asking(ctx)

    @router.post("/search")
    def search(body: SearchIn, who: Principal = Depends(ctx.principal)):
        """Retrieval only (no answer): the ranked chunks the caller may read, through the same
        guards and audit as /query. For tools that bring their own model (MCP, adapters)."""
        turned = asking.search(who, body.query, top_k=body.top_k, where=body.filter())
        r = turned.retrieval
        return {"hits": turned.sources, "refused": r.refused, "reason": r.reason, "capped": turned.capped, "flags": turned.flags}

    # The titles worth offering, per engine and clearance: every page load asks, and checking
    # every title of a big index each time would be a cheap way to spend the server's CPU.
    pools: dict[tuple[str, ...], tuple[object, list[tuple[str, str]]]] = {}

    @router.get("/samples")
    def samples(n: int = 4, who: Principal = Depends(ctx.principal)) -> dict:
        """Questions to start from, about documents the caller may read (the page's suggestions)."""
        eng = ctx.current(who)
        if eng is None:
            return {"questions": []}
        clearance = tuple(sorted(who.clearance))
        cached = pools.get(clearance)
        if cached is None or cached[0] is not eng:  # another engine: a write came in
            if len(pools) >= 16:
                pools.clear()
            cached = pools[clearance] = (eng, askable_titles(eng.titles(clearance)))
        return {"questions": sample_questions(cached[1], max(1, min(n, 12)), random.Random())}

    @router.post("/query")
    def query(body: QueryIn, who: Principal = Depends(ctx.principal)):
        turns = [Turn(t.role, t.content) for t in body.history] + [Turn("user", body.query)]
        turned = asking.start(who, turns, top_k=body.top_k, where=body.filter(), verify=body.verify)
        if body.stream:
            return StreamingResponse(_stream(turned), media_type="text/event-stream")
        ans, checked = asking.answer(turned)
        shown = asking.shown(turned, ans)
        return {"answer": ans.text, "text": shown.markdown(), "cited": shown.entries(),
                "sources": turned.sources, "context": turned.context, "refused": ans.refused,
                "reason": ans.reason, "mode": ans.mode,
                "capped": turned.capped, "flags": turned.flags + ans.flags, "held": turned.held,
                "conflicts": asking.conflicts(ans), "tools": [t.__dict__ for t in ans.tools], "verification": checked}

    def _stream(turned: Turned):
        r = turned.retrieval
        head = {"sources": turned.sources, "context": turned.context, "refused": r.refused, "reason": r.reason,
                "capped": turned.capped,
                "held": turned.held,
                "best_raw_em": r.best_raw_em, "best_raw_kw": r.best_raw_kw}
        yield f"event: sources\ndata: {json.dumps(head)}\n\n"
        # The whole answer passes the output guard before any of it leaves: a secret
        # split across streamed pieces could not be caught piece by piece.
        try:
            ans, checked = asking.answer(turned, settle=False)
        except Exception as exc:  # the sources already left with a 200: say so in-band (the audit row says so too)
            detail = exc.detail if isinstance(exc, HTTPException) else "the answer step failed; try again later"
            if not isinstance(exc, HTTPException):
                log.exception("answer step failed")
            yield f"event: error\ndata: {json.dumps({'error': detail})}\n\n"
            yield "data: [DONE]\n\n"
            return
        for piece in re.findall(r"\S+\s*", ans.text):
            yield f"data: {json.dumps({'delta': piece})}\n\n"
        asking.done(turned, ans)
        # The sources event could only say whether the gate refused; this is the answer's own word.
        shown = asking.shown(turned, ans)
        done = {"mode": ans.mode, "refused": ans.refused, "reason": ans.reason, "flags": turned.flags + ans.flags,
                "text": shown.markdown(), "cited": shown.entries(),
                "conflicts": asking.conflicts(ans), "verification": checked}
        yield f"event: done\ndata: {json.dumps(done)}\n\n"
        yield "data: [DONE]\n\n"

    return router
