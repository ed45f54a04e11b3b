"""POST /query: the caller's question, through the engine, out through the output guard.

Retrieval is filtered by the caller's clearance before ranking; the answer comes from
``Engine.answer`` (the same path as the library and the CLI); what the server adds is
policy: the input guard, the output guard on every channel (answer, sources,
verification, stream events, errors), the per-request time budget, and an audit row
written before any retrieved text leaves.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field, StringConstraints

from ... import guard
from ...engine import Answer, Engine
from ...errors import LLMError, MicroRAGError
from ...store.base import DocFilter
from ...tools import FileTool
from ...types import Retrieval
from ..auth import Principal
from ..context import ServerContext
from ..defences import naive_blocked, naive_despace, naive_output

log = logging.getLogger("microrag")


FilterField = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")]
FilterGlob = Annotated[str, StringConstraints(max_length=200)]


class QueryIn(BaseModel):
    query: str = Field(min_length=1, max_length=4000)
    top_k: int | None = Field(default=None, ge=1, le=50)
    stream: bool = False
    verify: bool | None = None  # None: the server's default
    # Query-time filters (FIELD -> glob; see store.base.DocFilter), within the caller's clearance.
    where: dict[FilterField, FilterGlob] = Field(default_factory=dict, max_length=8)
    exclude: dict[FilterField, FilterGlob] = Field(default_factory=dict, max_length=8)

    def filter(self) -> DocFilter | None:
        found = DocFilter(tuple(self.where.items()), tuple(self.exclude.items()))
        return found or None


@dataclass
class _Turn:
    """One question on its way to an answer: what every answer step reads."""

    question: str
    retrieval: Retrieval
    who: Principal
    check: bool  # verify the answer
    deadline: float | None  # time.monotonic() by which to stop; None: no budget
    engine: Engine  # the one that retrieved (a concurrent write may swap the server's)


def _guarded(text: str) -> str:
    """``text`` through the output guard: redacted where something was found, else as is
    (``redact`` returns the canonical form, which would garble clean text)."""
    redacted, found = guard.redact(text)
    return redacted if found else text


def router(ctx: ServerContext) -> APIRouter:
    router = APIRouter()
    cfg, on = ctx.cfg, ctx.on

    @router.post("/query")
    def query(body: QueryIn, who: Principal = Depends(ctx.principal)):
        deadline = time.monotonic() + cfg.request_seconds if on.request_budget else None
        if not on.structural_guards:  # the naive server: de-space, then match literal phrases
            q = body.query if on.linear_regex else naive_despace(body.query)
            if naive_blocked(q):
                raise HTTPException(400, "blocked by the blocklist")
        check_input = on.structural_guards and cfg.input_guard != "off"
        verdict = guard.injection_check(body.query) if check_input else None
        flags = [f"input: {r}" for r in verdict.reasons] if verdict and verdict.suspicious else []
        safe_query, secrets = guard.redact(body.query)
        safe_query = guard.canonical(safe_query)  # the audit reads what the checks read (no invisible characters)
        # What was sent, for investigators (an obfuscated attack reads differently once
        # canonicalised) - unless it holds a secret, which never enters the audit trail.
        # (keyed with the server's own secret: a plain hash of a short secret could be guessed offline)
        raw = ("hmac-sha256:" + cfg.state.fingerprint(body.query)) if secrets else body.query
        if flags and cfg.input_guard == "block":
            cfg.state.audit(who.name, "query", safe_query, [], "blocked", flags, raw)
            raise HTTPException(400, "the question was blocked by the input guard: " + "; ".join(verdict.reasons if verdict else []))
        eng = ctx.engine
        if eng is None:
            raise MicroRAGError("the index is empty; ingest documents first")
        r = eng.retrieve(body.query, safeguards=True, labels=sorted(who.clearance), scoped=on.scoped_statistics,
                         top_k=body.top_k or None, where=body.filter())
        check = cfg.verify if body.verify is None else body.verify
        records = eng.records  # loaded with the engine: no store round trip per query
        sources = [{"doc": h.chunk.doc, "chunk": h.chunk.index, "id": h.chunk.id, "hybrid": h.hybrid, "kw": h.kw,
                    "em": h.em, "raw_kw": h.raw_kw, "raw_em": h.raw_em,
                    # Chunk text leaves through the same output guard as the answer (red team #10).
                    "text": _guarded(h.chunk.text) if cfg.output_guard and on.guard_every_channel else h.chunk.text,
                    "label": records[h.chunk.doc].label if h.chunk.doc in records else "",
                    "principal": records[h.chunk.doc].principal if h.chunk.doc in records else "",
                    "ingested_at": records[h.chunk.doc].ingested_at if h.chunk.doc in records else ""}
                   for h in r.hits]
        hits = [{"id": h.chunk.id, "hybrid": round(h.hybrid, 4)} for h in r.hits]
        # The audit row goes in before any retrieved text can leave (stream or not), so a
        # client that disconnects after the sources still leaves a trace (red team #5).
        # The lab baseline writes it after the answer, as version one did.
        row = cfg.state.audit(who.name, "query", safe_query, hits, "retrieved", flags, raw) if on.audit_first else None

        def settle(decision: str, final_flags: list[str]) -> None:
            if row is None:
                cfg.state.audit(who.name, "query", safe_query, hits, decision, final_flags, raw)
            else:
                cfg.state.settle(row, decision, final_flags)

        turn = _Turn(body.query, r, who, check, deadline, eng)
        if body.stream:
            return StreamingResponse(_stream(turn, sources, flags, settle), media_type="text/event-stream")
        try:
            ans, checked = _answer(turn)
        except Exception as exc:  # the row says so; the error itself goes on to its handler
            settle("error", flags + [f"answer: {getattr(exc, 'detail', type(exc).__name__)}"])
            raise
        settle("refused" if r.refused else "answered", flags + ans.flags)
        return {"answer": ans.text, "sources": sources, "refused": r.refused, "reason": r.reason, "mode": ans.mode,
                "capped": r.capped, "flags": flags + ans.flags,
                "tools": [t.__dict__ for t in ans.tools], "verification": checked}

    def _answer(turn: _Turn) -> tuple[Answer, dict | None]:
        """The engine's answer, then what the server adds: the output guard on every channel."""
        try:
            ans = turn.engine.answer(turn.question, turn.retrieval, cfg.llm, spotlight=on.spotlight, verify=turn.check,
                                     tools=FileTool(cfg.tools_dir, turn.who.clearance, confined=on.confined_tool),
                                     deadline=turn.deadline)
        except LLMError as exc:
            # The endpoint's address and reply are the operator's business, not the caller's.
            log.warning("LLM call failed: %s", exc)
            raise HTTPException(502, "the language model is unavailable; try again later") from None
        if not on.structural_guards:
            ans.text = naive_output(ans.text)
        elif cfg.output_guard:
            redacted, found = guard.redact(ans.text)
            if found:
                ans.text = redacted
                ans.flags.append("output: redacted " + ", ".join(f"{k} x{v}" for k, v in guard.summary(found).items()))
        verification = ans.verification.to_dict() if ans.verification else None
        if verification is not None:
            verification["text"] = ans.text  # what the caller actually receives
            if cfg.output_guard and on.guard_every_channel:  # the sentences are model output too
                for row in verification["sentences"]:
                    row["sentence"] = guard.redact(row["sentence"])[0]
                    # `missing` quotes the raw sentence: keep only what survived redaction
                    row["missing"] = [m for m in row["missing"] if m in row["sentence"]]
        return ans, verification

    def _stream(turn: _Turn, sources, flags, settle):
        r = turn.retrieval
        head = {"sources": sources, "refused": r.refused, "reason": r.reason, "capped": r.capped,
                "best_raw_em": r.best_raw_em, "best_raw_kw": r.best_raw_kw}
        yield f"event: sources\ndata: {json.dumps(head)}\n\n"
        # The whole answer passes the output guard before any of it leaves: a secret
        # split across streamed pieces could not be caught piece by piece.
        try:
            ans, checked = _answer(turn)
        except Exception as exc:  # the sources already left with a 200: say so in-band, and in the audit row
            detail = exc.detail if isinstance(exc, HTTPException) else "the answer step failed; try again later"
            settle("error", flags + [f"answer: {detail if isinstance(exc, HTTPException) else type(exc).__name__}"])
            if not isinstance(exc, HTTPException):
                log.exception("answer step failed")
            yield f"event: error\ndata: {json.dumps({'error': detail})}\n\n"
            yield "data: [DONE]\n\n"
            return
        for piece in re.findall(r"\S+\s*", ans.text):
            yield f"data: {json.dumps({'delta': piece})}\n\n"
        settle("refused" if r.refused else "answered", flags + ans.flags)
        yield f"event: done\ndata: {json.dumps({'mode': ans.mode, 'flags': flags + ans.flags, 'verification': checked})}\n\n"
        yield "data: [DONE]\n\n"

    return router
