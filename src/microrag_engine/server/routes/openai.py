"""The OpenAI-compatible API: ``/v1/models``, ``/v1/chat/completions``, ``/v1/embeddings``.

So that a chat client people already use (Open WebUI, LibreChat, Continue, simonw's
``llm``, the ``openai`` SDK) answers from the index. Behind the same keys, roles,
clearance, guards, audit and verification as ``/query``: the policy steps are
``server.asking``'s; this module only speaks OpenAI's wire format.

* Models: ``microrag`` (every document the caller may read) and ``microrag/<collection>``
  for each collection the caller can see (a filter on ``collection``).
* Chat: the whole ``messages`` list is used: retrieval searches for what the conversation
  is about (``Engine.condense``), the model reads the earlier turns. The answer ends with a
  citations block (``Sources:``) any client can show; the response also carries a
  ``microrag`` field (sources, verification, refusal, flags, the retrieval query). Options
  of ours go in the request's ``microrag`` object (``top_k``, ``where``, ``exclude``,
  ``verify``, ``citations``); ``temperature``, ``top_p`` and ``max_tokens`` reach the
  configured model (the operator's ``max_tokens`` a ceiling). Options this door cannot
  honour - ``n`` > 1, a ``tool_choice`` that demands a call, a ``response_format`` other
  than text, ``logprobs`` - are a 400 naming the option, never a 200 that ignored it;
  ``tools`` left to the model's choice are answered without a call (and a flag says so).
  Streaming sends ``chat.completion.chunk`` events and ``data: [DONE]``; as on ``/query``,
  the answer is streamed once it has passed the output guard whole (a secret split across pieces could not be caught piece by piece).
* Embeddings: the index's own embedder, ``input`` a string or a list of strings (at most
  64, 100,000 characters; a key is required and each 16 inputs spend one request of its
  rate limit), ``encoding_format`` float or base64 (the ``openai`` SDK asks for base64).
* Errors: OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}`` (app.py).
"""

from __future__ import annotations

import base64
import json
import logging
import re
import secrets
import time
from dataclasses import replace
from typing import Annotated, Any, Literal

import numpy as np
from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ... import guard
from ...config import LLMConfig
from ...engine import Answer
from ...store.base import DocFilter
from ...types import Turn
from .. import tasks
from ..asking import Asking, Turned, guarded, shown_name
from ..auth import Principal
from ..context import ServerContext
from .query import FilterField, FilterGlob

log = logging.getLogger("microrag")

MODEL = "microrag"
MAX_MESSAGES = 100
MAX_EMBED_INPUTS = 64
MAX_EMBED_CHARS = 100_000
EMBED_PER_TOKEN = 16  # inputs one request of the rate limit pays for


class Part(BaseModel):
    """One part of a multi-part message (clients send ``[{"type": "text", "text": ...}]``)."""

    model_config = ConfigDict(extra="ignore")
    type: str
    text: str | None = Field(default=None, max_length=16_000)


MAX_MESSAGE_CHARS = 16_000  # of one message, however it is sent: one string or the text of all its parts
MAX_PARTS = 64


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Annotated[str, StringConstraints(max_length=MAX_MESSAGE_CHARS)] | list[Part] | None = None

    @model_validator(mode="after")
    def _few_parts(self) -> Message:
        if isinstance(self.content, list) and len(self.content) > MAX_PARTS:
            raise ValueError(f"a message has at most {MAX_PARTS} parts")
        return self

    def oversized(self) -> str:
        """Why the message is over its cap, or "": the cap is on the message, not on each part
        (28 parts of 16k would be 28 messages' work; red team #33, 5)."""
        if isinstance(self.content, list) and sum(len(p.text or "") for p in self.content) > MAX_MESSAGE_CHARS:
            return f"a message's text parts hold at most {MAX_MESSAGE_CHARS} characters in all"
        return ""

    def text(self) -> str:
        if isinstance(self.content, list):  # images and other parts carry nothing to retrieve with
            return "\n".join(p.text for p in self.content if p.type == "text" and p.text)
        return self.content or ""


class Extensions(BaseModel):
    """Our options, in the request's ``microrag`` object."""

    model_config = ConfigDict(extra="forbid")
    top_k: int | None = Field(default=None, ge=1, le=50)
    where: dict[FilterField, FilterGlob] = Field(default_factory=dict, max_length=8)
    exclude: dict[FilterField, FilterGlob] = Field(default_factory=dict, max_length=8)
    verify: bool | None = None  # None: the server's default
    citations: bool = True  # end the answer with a "Sources:" block
    # A chat UI's housekeeping request, named (tasks.py also recognises the documented prompt shapes).
    task: Literal["title", "tags", "follow_ups", "autocomplete", "queries"] | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class OptionError(HTTPException):
    """A request option this door does not do: a 400 naming it (OpenAI's ``error.param``)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(400, message)
        self.param = param


MAX_REPLY_TOKENS = 1_000_000  # the most a request may ask for (400 above it)
DEFAULT_REPLY_CEILING = 4096  # the ceiling when the operator sets no LLM_MAX_TOKENS


class ChatIn(BaseModel):
    # user, seed, stop, penalties, metadata, ...: accepted and not used (nothing in them
    # changes what the answer says or its shape); what would, below, is refused or used.
    model_config = ConfigDict(extra="ignore")
    model: str = Field(min_length=1, max_length=200)
    messages: list[Message] = Field(min_length=1, max_length=MAX_MESSAGES)
    stream: bool = False
    stream_options: StreamOptions | None = None
    microrag: Extensions = Field(default_factory=Extensions)
    # Passed to the configured model (the operator's max_tokens stays a ceiling); without
    # one, the answer is quoted from the documents and there is nothing to sample.
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_REPLY_TOKENS)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_REPLY_TOKENS)
    # Options whose promise this door cannot keep: refused, never answered as if honoured.
    n: int | None = Field(default=None, ge=1)
    tools: list[dict[str, Any]] | None = None
    functions: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    function_call: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None

    def unsupported(self) -> OptionError | None:
        """The first option asked for that is not supported (an agent relying on it must learn
        so from the status, not from an answer that ignored it)."""
        if self.n is not None and self.n > 1:
            return OptionError("n", f"n: one choice per request (got n={self.n}); send {self.n} requests instead")
        # Tools offered with the choice left to the model ("auto", OpenAI's default) are a promise
        # kept by answering without calling one, as a model may: chat UIs (Open WebUI) offer
        # their built-in tools with every message. Only a call demanded is refused.
        for name, choice in (("tool_choice", self.tool_choice), ("function_call", self.function_call)):
            if choice not in (None, "none", "auto"):
                return OptionError(name, f"{name}: this model answers from the indexed documents and calls no "
                                         "client tools; leave it out, or 'auto'")
        kind = (self.response_format or {}).get("type", "text")
        if kind != "text":
            return OptionError("response_format", f"response_format: only 'text' is supported (got {str(kind)[:40]!r}); "
                                                  "the answer is prose with numbered citations, its sources are in the "
                                                  "'microrag' field as JSON")
        if self.logprobs or self.top_logprobs:
            return OptionError("logprobs", "logprobs: not available (a quoted answer has no token probabilities)")
        return None

    def offered_tools(self) -> int:
        """How many client tools came with the request (none are called: see ``unsupported``)."""
        return len(self.tools or ()) + len(self.functions or ())

    def sampling(self, llm: LLMConfig | None) -> LLMConfig | None:
        """The server's model settings with this request's sampling options (None: unchanged)."""
        cap = self.max_completion_tokens or self.max_tokens
        if llm is None or (self.temperature is None and self.top_p is None and cap is None):
            return None
        if cap is not None:
            cap = min(cap, llm.max_tokens or DEFAULT_REPLY_CEILING)
        return replace(llm, temperature=llm.temperature if self.temperature is None else self.temperature,
                       top_p=llm.top_p if self.top_p is None else self.top_p, max_tokens=cap or llm.max_tokens)


class EmbeddingsIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str = Field(default=MODEL, max_length=200)
    input: Annotated[str, StringConstraints(max_length=32_000)] | list[Annotated[str, StringConstraints(max_length=32_000)]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None


def _escape_glob(name: str) -> str:
    """``name`` as a glob that matches only itself (a collection may contain ``[``, ``*``, ``?``)."""
    return re.sub(r"([\[\]*?])", r"[\1]", name)


def _usage(prompt: str, completion: str) -> dict[str, int]:
    """Token counts, approximated by words: no tokenizer of the operator's model is known here."""
    p, c = len(prompt.split()), len(completion.split())
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}




def router(ctx: ServerContext) -> APIRouter:
    router = APIRouter(prefix="/v1")
    asking, on = Asking(ctx), ctx.on

    def visible_collections(who: Principal) -> dict[str, str]:
        """{model-id name as shown: collection} for the collections ``who`` can see. The shown
        name has been through the output guard (a collection named like a key is not echoed)."""
        eng = ctx.engine
        if eng is None:
            return {}
        names = sorted({r.collection for r in eng.records.values() if r.collection and who.may_read(r.label)})
        return {shown_name(c, ctx): c for c in names}

    def model_filter(model: str, who: Principal) -> DocFilter | None:
        """The documents a model id stands for; an unknown id is a 404 (as OpenAI's)."""
        if model == MODEL:
            return None
        name = model.removeprefix(MODEL + "/")
        visible = visible_collections(who)
        if model.startswith(MODEL + "/") and name in visible:
            return DocFilter((("collection", _escape_glob(visible[name])),))
        raise HTTPException(404, f"the model {model!r} does not exist; GET /v1/models lists them")

    @router.get("/models")
    def models(who: Principal = Depends(ctx.principal)):
        created = int(time.time())
        ids = [MODEL] + [f"{MODEL}/{c}" for c in visible_collections(who)]
        return {"object": "list", "data": [{"id": m, "object": "model", "created": created, "owned_by": "microrag"} for m in ids]}

    @router.post("/chat/completions")
    def chat(body: ChatIn, who: Principal = Depends(ctx.principal)):
        refused = body.unsupported()
        if refused is not None:
            raise refused
        scope = model_filter(body.model, who)
        ext = body.microrag
        where = DocFilter(tuple(ext.where.items()) + (scope.where if scope else ()), tuple(ext.exclude.items()))
        if body.messages[-1].role != "user":  # OpenAI's clients end a turn with the user's message
            raise HTTPException(400, "messages: the last message must have role 'user'")
        too_big = [f"messages[{i}]: {why}" for i, m in enumerate(body.messages) if (why := m.oversized())]
        if too_big and on.bounded_parts:  # before any work is done on them
            raise HTTPException(400, too_big[0])
        role = {"developer": "system"}
        # Tool results belong to the client's own tools: nothing of ours called them.
        turns = [Turn(role.get(m.role, m.role), m.text()) for m in body.messages if m.role not in ("tool", "function")]
        users = [t.content for t in turns if t.role == "user"]
        task = tasks.recognise(users[-1], users[:-1], ext.task)
        if task is not None:  # a title, tags, follow-ups: the UI's own, not a question to the documents
            return _housekeeping(task, body, who)
        turned = asking.start(who, turns, top_k=ext.top_k, where=where or None, verify=ext.verify, action="chat")
        turned.llm = body.sampling(ctx.cfg.llm)
        if body.offered_tools():
            turned.flags.append(f"tools: {body.offered_tools()} client tools offered, none called "
                                "(this model answers from the indexed documents)")
        ident, created = "chatcmpl-" + secrets.token_hex(12), int(time.time())
        head = {"id": ident, "created": created, "model": body.model}
        if body.stream:
            usage = body.stream_options is not None and body.stream_options.include_usage
            return StreamingResponse(_stream(turned, head, ext.citations, usage), media_type="text/event-stream")
        ans, checked = asking.answer(turned, action="chat")
        text = asking.shown(turned, ans).markdown() if ext.citations else ans.text
        return {**head, "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": _usage(" ".join(t.content for t in turns), text),
                "microrag": _extension(turned, ans, checked)}

    def _housekeeping(task: tasks.Task, body: ChatIn, who: Principal):
        # The conversation reaches the model here too: the same input guard as a question.
        found: list[str] = []
        if ctx.on.structural_guards and ctx.cfg.input_guard != "off":
            for said in (task.history, task.prompt, body.messages[-1].text()):
                verdict = guard.injection_check(said) if said else None
                if verdict is not None and verdict.suspicious:
                    found += [f"input: {r}" for r in verdict.reasons if f"input: {r}" not in found]
        if found and ctx.cfg.input_guard == "block":
            ctx.cfg.state.audit(who.name, "task", f"{task.kind} (chat UI housekeeping)", [], "blocked", found)
            raise HTTPException(400, "the question was blocked by the input guard: "
                                + "; ".join(f.removeprefix("input: ") for f in found))
        text, how = tasks.answer(task, body.sampling(ctx.cfg.llm) or ctx.cfg.llm)
        text = guarded(text) if ctx.cfg.output_guard else text
        # What was asked and who answered it, never the conversation (the caller's, not the index's).
        ctx.cfg.state.audit(who.name, "task", f"{task.kind} (chat UI housekeeping)", [], "answered", [f"task: {how}", *found])
        head = {"id": "chatcmpl-" + secrets.token_hex(12), "created": int(time.time()), "model": body.model}
        ext = {"task": task.kind, "mode": how, "sources": [], "context": [], "refused": False, "reason": "",
               "flags": [f"task: {task.kind}, answered without retrieval ({how})"], "verification": None}
        if not body.stream:
            return {**head, "object": "chat.completion",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                    "usage": _usage(body.messages[-1].text(), text), "microrag": ext}

        def events():
            for delta, finish, extra in (({"role": "assistant", "content": ""}, None, {}), ({"content": text}, None, {}),
                                         ({}, "stop", {"microrag": ext})):
                event = {**head, "object": "chat.completion.chunk",
                         "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
                yield f"data: {json.dumps(event, ensure_ascii=False)}\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")

    def _extension(turned: Turned, ans: Answer, checked: dict | None) -> dict[str, Any]:
        return {"sources": turned.sources, "context": turned.context, "verification": checked, "refused": ans.refused,
                "reason": ans.reason,
                "mode": ans.mode, "flags": turned.flags + ans.flags, "retrieval_query": guarded(turned.condensed.query),
                "condensed": turned.condensed.how}

    def _stream(turned: Turned, head: dict, cite: bool, usage: bool):
        def chunk(delta: dict, finish: str | None = None, **extra: Any) -> str:
            event = {**head, "object": "chat.completion.chunk",
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
            return f"data: {json.dumps(event, ensure_ascii=False)}\n\n"

        yield chunk({"role": "assistant", "content": ""})
        try:
            ans, checked = asking.answer(turned, action="chat", settle=False)
        except Exception as exc:  # the stream began with a 200: the error goes in-band, in OpenAI's shape
            if not isinstance(exc, HTTPException):
                log.exception("answer step failed")
            message = exc.detail if isinstance(exc, HTTPException) else "the answer step failed; try again later"
            yield f"data: {json.dumps({'error': {'message': message, 'type': 'server_error', 'param': None, 'code': None}})}\n\n"
            yield "data: [DONE]\n\n"
            return
        text = asking.shown(turned, ans).markdown() if cite else ans.text
        for piece in re.findall(r"\s*\S+", text):
            yield chunk({"content": piece})
        asking.done(turned, ans, "chat")
        yield chunk({}, "stop", microrag=_extension(turned, ans, checked))
        if usage:
            event = {**head, "object": "chat.completion.chunk", "choices": [],
                     "usage": _usage(turned.question, text)}
            yield f"data: {json.dumps(event)}\n\n"
        yield "data: [DONE]\n\n"

    @router.post("/embeddings")
    def embeddings(body: EmbeddingsIn, who: Principal = Depends(ctx.need("reader"))):
        # A key is required and every EMBED_PER_TOKEN inputs spend one more request of its rate
        # limit: one request embeds many texts, and the model's CPU is shared by every caller.
        eng = ctx.engine
        if eng is None:
            raise HTTPException(400, "the index is empty; ingest documents first (the embedder is the index's)")
        if body.model not in (MODEL, eng.settings.embedder) and not body.model.startswith(MODEL + "/"):
            raise HTTPException(404, f"the model {body.model!r} does not exist; embeddings come from 'microrag' "
                                     f"(the index's {eng.settings.embedder} embedder)")
        texts = [body.input] if isinstance(body.input, str) else body.input
        if not texts or len(texts) > MAX_EMBED_INPUTS or sum(map(len, texts)) > MAX_EMBED_CHARS:
            raise HTTPException(400, f"input: send 1 to {MAX_EMBED_INPUTS} strings, {MAX_EMBED_CHARS} characters in all")
        for _ in range((len(texts) - 1) // EMBED_PER_TOKEN):
            if not ctx.limiter.allow(who.name):
                raise HTTPException(429, "rate limit exceeded; slow down (each 16 inputs count as one request)")
        embedder = eng.index.embedder
        if body.dimensions is not None and body.dimensions != embedder.dim:
            raise HTTPException(400, f"dimensions: this index's embedder gives {embedder.dim}, not {body.dimensions}")
        vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
        # Who embedded how much, never the text: it is the caller's, not the index's.
        ctx.cfg.state.audit(who.name, "embed", f"{len(texts)} input(s)", [], "answered", [])

        def encode(v: np.ndarray) -> list[float] | str:
            return base64.b64encode(v.astype("<f4").tobytes()).decode() if body.encoding_format == "base64" else v.tolist()

        tokens = sum(len(t.split()) for t in texts)
        # The reply names the model the caller asked for, as OpenAI's does: clients match
        # replies to requests (and cache vectors) by that name. Which embedder made them is
        # in the microrag field.
        return {"object": "list", "model": body.model, "microrag": {"embedder": eng.settings.embedder},
                "data": [{"object": "embedding", "index": i, "embedding": encode(v)} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    return router
