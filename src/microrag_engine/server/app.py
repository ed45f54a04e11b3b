"""FastAPI routes over the shared pipeline. ``create_app(ServerConfig)`` builds the app.

Policy in one place: who may do what (roles), what they may read (clearance
labels filter chunks *before* ranking), what may enter the index (namespaced
sources, DLP, quarantine for untrusted contributors), what may leave it
(output guard), and what is recorded (audit trail). Every user mistake is a
4xx with ``{"error": ...}``; keys never reach a log line.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import guard
from ..config import LLMConfig, Settings
from ..engine import Answer, Engine
from ..errors import LLMError, MicroRAGError
from ..ingest import apply_dlp, delete_documents, ingest_documents, store_form
from ..load import jsonl_documents, load_documents, parse_upload
from ..store.base import Store
from ..tools import FileTool
from ..types import Document, Retrieval
from .auth import ANONYMOUS, KeyStore, Principal
from .defences import Defences, naive_blocked, naive_despace, naive_output
from .state import QUARANTINE, ServerState

log = logging.getLogger("microrag")


@dataclass
class ServerConfig:
    """Everything the server needs; defaults are the hardened profile."""

    store: Store
    settings: Settings
    keys: KeyStore
    state: ServerState
    corpus: list[str] = field(default_factory=list)  # what /reset re-ingests
    llm: LLMConfig | None = None
    allow_anonymous: bool = True
    input_guard: str = "flag"  # flag | block | off
    output_guard: bool = True
    tools_dir: Path | None = None  # None = the file tool is off
    max_body: int = 1_000_000
    rate_per_minute: int = 120
    # Wrong keys a client address may send per minute before every key it sends is
    # refused (429) for the rest of that minute: a key cannot be guessed online.
    key_failures_per_minute: int = 10
    # Host headers served; others get 400 (a DNS-rebinding page cannot reach a
    # loopback server). None: any host (only behind a proxy that checks it).
    allowed_hosts: tuple[str, ...] | None = ("127.0.0.1", "localhost", "[::1]")
    verify: bool = True  # NLI-check every answer sentence (requests may turn it off)
    # Wall-clock seconds a request may take: checked between steps, and the model's
    # stream is cut at it (the answer so far is kept and flagged).
    request_seconds: float = 60.0
    # Every defence, on; defences.LAB_BASELINE turns them off for `microrag redteam`.
    defences: Defences = field(default_factory=Defences)


# The page runs only its own script and styles; nothing from a document can execute.
UI_HEADERS = {"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
              "object-src 'none'; frame-ancestors 'none'; base-uri 'none'",
              "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}

# Who every caller is when authentication is off (the lab baseline).
EVERYONE_ADMIN = Principal("anyone", "admin", frozenset({"public", "internal", "restricted"}), trusted=True)


class QueryIn(BaseModel):
    query: str = Field(min_length=1, max_length=4000)
    top_k: int | None = Field(default=None, ge=1, le=50)
    stream: bool = False
    verify: bool | None = None  # None: the server's default


class IngestIn(BaseModel):
    source: str = Field(min_length=1, max_length=300)
    body: str = Field(min_length=1)
    label: str | None = Field(default=None, max_length=40, pattern=r"^[a-z][a-z0-9_-]*$")


class RateLimiter:
    """Per-principal sliding window; returns False when over the limit."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute, self.lock = per_minute, threading.Lock()
        self.hits: defaultdict[str, list[float]] = defaultdict(list)

    def allow(self, who: str) -> bool:
        t = time.monotonic()
        with self.lock:
            recent = [x for x in self.hits[who] if t - x < 60]
            ok = len(recent) < self.per_minute
            self.hits[who] = recent + [t] if ok else recent
        return ok

    def exhausted(self, who: str) -> bool:
        """Whether ``who`` has used up this minute's allowance (records nothing)."""
        t = time.monotonic()
        with self.lock:
            return sum(t - x < 60 for x in self.hits.get(who, ())) >= self.per_minute


def _listing(d, who: Principal, private: bool = True) -> dict:
    """What /documents shows of a document (red team #4).

    Never ``content_hash``: it is taken over the text *before* DLP redaction, so anyone
    holding it can test guesses for a redacted value offline. The file it came from
    (an absolute server path, the operator's account) is for admins only.
    ``private=False`` is the lab baseline: the whole record.
    """
    if not private:
        return dict(d.__dict__)
    out = {"doc": d.doc, "label": d.label, "n_chunks": d.n_chunks, "ingested_at": d.ingested_at,
           "principal": d.principal if d.principal.startswith("api:") else "operator"}
    if who.at_least("admin"):
        out.update(principal=d.principal, origin=d.origin)
    return out


PREVIEW_CHARS = 20_000  # of an upload, in the review queue


def _guarded(text: str) -> str:
    """``text`` through the output guard: redacted where something was found, else as is
    (``redact`` returns the canonical form, which would garble clean text)."""
    redacted, found = guard.redact(text)
    return redacted if found else text


def _namespace(key_name: str) -> str:
    """Where a key's uploads live: "@name". Operator files come from folders on disk and
    are owned by the operator; uploads are owned by their key, and ownership (not the
    path) decides who may replace or delete, so even a folder named "@x" is safe."""
    return "@" + key_name


def _host_name(header: str) -> str:
    """The name in a Host header, without its port ("[::1]:8000" -> "[::1]")."""
    header = header.lower()
    if header.startswith("["):
        return header[: header.find("]") + 1]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _safe_source(source: str) -> str:
    """A relative, traversal-free path fragment for a document name."""
    parts = [p for p in re.split(r"[\\/]+", guard.canonical(source)) if p not in ("", ".", "..")]
    name = "/".join(re.sub(r"[^\w.@-]", "_", p) for p in parts)
    if not name:
        raise MicroRAGError("source must name a document, e.g. 'runbooks/vpn.md'")
    return name


class BodyLimit:
    """ASGI middleware: a request body may not exceed ``max_body`` bytes *as read*.

    A ``Content-Length`` over the cap is refused before anything is read; a chunked
    (or lying) body is counted as it arrives and refused the moment it passes the cap,
    so memory never holds more than ``max_body`` bytes of one request. The refusal is
    an ``HTTPException`` raised from ``receive``, which FastAPI passes through its body
    parsing to the app's JSON error handler (413).
    """

    def __init__(self, app, max_body: int, streamed: bool = True) -> None:
        self.app, self.max_body, self.streamed = app, max_body, streamed

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_body:
            return await JSONResponse(self._error(), status_code=413)(scope, receive, send)
        if not self.streamed:  # the lab baseline: a chunked body is never counted (red team #2)
            return await self.app(scope, receive, send)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise StarletteHTTPException(413, self._error()["error"])
            return message

        await self.app(scope, counted, send)

    def _error(self) -> dict:
        return {"error": f"request body over {self.max_body} bytes; send less (one document per /ingest call)"}


@dataclass
class _Turn:
    """One question on its way to an answer: what every answer step reads."""

    question: str
    retrieval: Retrieval
    who: Principal
    check: bool  # verify the answer
    deadline: float | None  # time.monotonic() by which to stop; None: no budget
    engine: Engine  # the one that retrieved (a concurrent write may swap the server's)


def create_app(cfg: ServerConfig) -> FastAPI:
    on = cfg.defences
    # No Swagger/ReDoc pages: they load scripts from a CDN, outside the page's CSP.
    # The schema stays at /openapi.json for any client or offline viewer.
    app = FastAPI(title="microRAG", version="0.1.0", docs_url=None if on.closed_surface else "/docs", redoc_url=None,
                  description="Retrieval-augmented answers over your documents, with identity, labels and an audit trail.")
    lock = threading.RLock()  # one writer; the engine reference swaps atomically after each write
    holder: dict = {"engine": None}
    limiter = RateLimiter(cfg.rate_per_minute)
    guesses = RateLimiter(cfg.key_failures_per_minute)  # wrong keys per client address

    def reload() -> None:
        with lock:
            docs = cfg.store.documents()
            # Postgres + BM25: retrieval runs in the database (stateless replicas); else loaded here.
            holder["engine"] = Engine.from_store(cfg.store, cfg.settings) if docs else None

    reload()

    # ------------------------------------------------------------ errors and limits

    app.add_middleware(BodyLimit, max_body=cfg.max_body, streamed=on.streamed_body_cap)

    @app.exception_handler(MicroRAGError)
    async def _user_error(_: Request, exc: MicroRAGError):
        return JSONResponse({"error": str(exc)}, status_code=400)

    @app.exception_handler(StarletteHTTPException)  # also 404/405 from routing
    async def _http_error(_: Request, exc: StarletteHTTPException):
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        if first.get("type") == "json_invalid":
            return JSONResponse({"error": "invalid request: the body is not valid JSON"}, status_code=422)
        if first.get("type") == "model_attributes_type":
            return JSONResponse({"error": "invalid request: send a JSON object with content-type: application/json"},
                                status_code=422)
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
        return JSONResponse({"error": f"invalid request: {where or 'body'}: {first.get('msg', 'malformed')}"},
                            status_code=422)

    @app.middleware("http")
    async def _limits(request: Request, call_next):
        host = _host_name(request.headers.get("host") or "")
        if on.closed_surface and cfg.allowed_hosts is not None and host not in cfg.allowed_hosts:
            return JSONResponse({"error": "unknown Host header; serve with --allowed-host NAME for this name"},
                                status_code=400)
        response = await call_next(request)
        if request.url.path == "/" or request.url.path.startswith("/ui/"):
            response.headers.update(UI_HEADERS)
        return response

    def principal(request: Request) -> Principal:
        if not on.authentication:
            return EVERYONE_ADMIN
        auth = request.headers.get("authorization", "")
        key = auth[7:].strip() if auth.lower().startswith("bearer ") else request.headers.get("x-api-key", "")
        if key:
            who = cfg.keys.resolve(key)
            if who is None:
                # Wrong keys are throttled per address; right keys never are (behind a shared
                # proxy address one guesser must not lock every key holder out).
                client = f"ip:{request.client.host if request.client else ''}"
                if not guesses.allow(client):
                    raise HTTPException(429, "too many wrong API keys from this address; wait a minute")
                raise HTTPException(401, "invalid or revoked API key", headers={"WWW-Authenticate": "Bearer"})
        elif cfg.allow_anonymous:
            who = ANONYMOUS
        else:
            raise HTTPException(401, "an API key is required (Authorization: Bearer <key>)",
                                headers={"WWW-Authenticate": "Bearer"})
        if not limiter.allow(who.name if who is not ANONYMOUS else f"anon:{request.client.host if request.client else ''}"):
            raise HTTPException(429, "rate limit exceeded; slow down")
        return who

    def need(role: str):
        def check(who: Principal = Depends(principal)) -> Principal:
            if who is ANONYMOUS:
                raise HTTPException(401, f"this needs an API key with the {role} role",
                                    headers={"WWW-Authenticate": "Bearer"})
            if not who.at_least(role):
                raise HTTPException(403, f"this needs the {role} role")
            return who
        return check

    # ------------------------------------------------------------ reading

    static = Path(__file__).parent / "static"
    app.mount("/ui", StaticFiles(directory=static), name="ui")

    @app.get("/", include_in_schema=False)
    def index():
        return FileResponse(static / "index.html", headers=UI_HEADERS)

    @app.get("/whoami")
    def whoami(who: Principal = Depends(principal)) -> dict:
        return {"name": who.name, "role": who.role, "clearance": sorted(who.clearance)}

    @app.get("/health")
    def health(request: Request) -> dict:
        """Liveness for anyone (no key needed, nothing revealed, no rate budget spent);
        counts for admins only: they include quarantined and restricted documents."""
        has_key = request.headers.get("authorization") or request.headers.get("x-api-key")
        try:
            who = principal(request) if has_key else ANONYMOUS
        except HTTPException:
            who = ANONYMOUS
        if on.closed_surface and (who is ANONYMOUS or not who.at_least("admin")):
            return {"status": "ok"}
        eng = holder["engine"]
        return {"status": "ok", "chunks": eng.n_chunks if eng else 0,
                "documents": len(eng.documents) if eng else 0, "generation": eng.generation if eng else 0}

    @app.post("/query")
    def query(body: QueryIn, who: Principal = Depends(principal)):
        deadline = time.monotonic() + cfg.request_seconds if on.request_budget else None
        if not on.structural_guards:  # the naive server: de-space, then match literal phrases
            q = body.query if on.linear_regex else naive_despace(body.query)
            if naive_blocked(q):
                raise HTTPException(400, "blocked by the blocklist")
        check_input = on.structural_guards and cfg.input_guard != "off"
        verdict = guard.injection_check(body.query) if check_input else None
        flags = [f"input: {r}" for r in verdict.reasons] if verdict and verdict.suspicious else []
        safe_query, secrets = guard.redact(body.query)
        # What was sent, for investigators (an obfuscated attack reads differently once
        # canonicalised) - unless it holds a secret, which never enters the audit trail.
        # (keyed with the server's own secret: a plain hash of a short secret could be guessed offline)
        raw = ("hmac-sha256:" + cfg.state.fingerprint(body.query)) if secrets else body.query
        if flags and cfg.input_guard == "block":
            cfg.state.audit(who.name, "query", safe_query, [], "blocked", flags, raw)
            raise HTTPException(400, "the question was blocked by the input guard: " + "; ".join(verdict.reasons if verdict else []))
        eng = holder["engine"]
        if eng is None:
            raise MicroRAGError("the index is empty; ingest documents first")
        r = eng.retrieve(body.query, safeguards=True, labels=sorted(who.clearance), scoped=on.scoped_statistics,
                         top_k=body.top_k or None)
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
        hits = [{"id": s["id"], "hybrid": round(s["hybrid"], 4)} for s in sources]
        # The audit row goes in before any retrieved text can leave (stream or not), so a
        # client that disconnects after the sources still leaves a trace (red team #5).
        # The lab baseline writes it after the answer, as version one did.
        row = cfg.state.audit(who.name, "query", safe_query, hits, "retrieved", flags, raw) if on.audit_first else None

        def settle(decision: str, final_flags: list[str]) -> None:
            if row is None:
                cfg.state.audit(who.name, "query", safe_query, hits, decision, final_flags, raw)
            else:
                cfg.state.settle(row, decision, final_flags)

        ctx = _Turn(body.query, r, who, check, deadline, eng)
        if body.stream:
            return StreamingResponse(_stream(ctx, sources, flags, settle), media_type="text/event-stream")
        try:
            ans, checked = _answer(ctx)
        except Exception as exc:  # the row says so; the error itself goes on to its handler
            settle("error", flags + [f"answer: {getattr(exc, 'detail', type(exc).__name__)}"])
            raise
        settle("refused" if r.refused else "answered", flags + ans.flags)
        return {"answer": ans.text, "sources": sources, "refused": r.refused, "reason": r.reason, "mode": ans.mode,
                "capped": r.capped, "flags": flags + ans.flags,
                "tools": [t.__dict__ for t in ans.tools], "verification": checked}

    def _answer(ctx: _Turn) -> tuple[Answer, dict | None]:
        """The engine's answer, then what the server adds: the output guard on every channel."""
        try:
            ans = ctx.engine.answer(ctx.question, ctx.retrieval, cfg.llm, spotlight=on.spotlight, verify=ctx.check,
                                    tools=FileTool(cfg.tools_dir, ctx.who.clearance, confined=on.confined_tool),
                                    deadline=ctx.deadline)
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

    def _stream(ctx: _Turn, sources, flags, settle):
        r = ctx.retrieval
        head = {"sources": sources, "refused": r.refused, "reason": r.reason, "capped": r.capped,
                "best_raw_em": r.best_raw_em, "best_raw_kw": r.best_raw_kw}
        yield f"event: sources\ndata: {json.dumps(head)}\n\n"
        # The whole answer passes the output guard before any of it leaves: a secret
        # split across streamed pieces could not be caught piece by piece.
        try:
            ans, checked = _answer(ctx)
        except HTTPException as exc:  # the sources already left with a 200: say so in-band
            settle("error", flags + [f"answer: {exc.detail}"])
            yield f"event: error\ndata: {json.dumps({'error': exc.detail})}\n\n"
            yield "data: [DONE]\n\n"
            return
        for piece in re.findall(r"\S+\s*", ans.text):
            yield f"data: {json.dumps({'delta': piece})}\n\n"
        settle("refused" if r.refused else "answered", flags + ans.flags)
        yield f"event: done\ndata: {json.dumps({'mode': ans.mode, 'flags': flags + ans.flags, 'verification': checked})}\n\n"
        yield "data: [DONE]\n\n"

    @app.get("/documents")
    def documents(who: Principal = Depends(principal)) -> list[dict]:
        docs = cfg.store.documents().values()
        visible = [d for d in docs if who.role == "admin" or d.label in who.clearance
                   or (who is not ANONYMOUS and d.principal == f"api:{who.name}")]
        return [_listing(d, who, on.private_listing) for d in visible]

    # ------------------------------------------------------------ writing

    @app.post("/ingest")
    def ingest(body: IngestIn, who: Principal = Depends(need("contributor"))) -> dict:
        # Bound to the caller, in a namespace no operator file maps to ("@name/...": see
        # _namespace), and never over a document someone else owns.
        name = f"{_namespace(who.name)}/{_safe_source(body.source)}" if on.namespaced_uploads else body.source
        if on.confined_records:
            # Parsed as the operator's loader parses a file; every document it yields must
            # be this upload itself (a .jsonl record naming another document is refused).
            docs = parse_upload(name, body.body)
            strays = sorted({d.path for d in docs} - {name})
            if strays:
                raise HTTPException(400, f"a record names document {strays[0]!r}; records of an uploaded .jsonl "
                                         "belong to that upload: drop their \"doc\" field or upload each document itself")
        else:  # the lab baseline: the body as sent, .jsonl records naming any document (red team #12)
            docs = jsonl_documents(body.body, name) if name.endswith(".jsonl") else [Document(name, body.body)]
        if not any(d.text.strip() for d in docs):
            raise MicroRAGError("the upload holds no text (an HTML page with nothing visible, or empty records)")
        doc = name if name in {d.path for d in docs} else docs[0].path
        for d in docs:
            owner = cfg.store.documents().get(d.path)
            if owner is not None and on.namespaced_uploads and owner.principal != f"api:{who.name}":
                raise HTTPException(409, f"{d.path!r} belongs to someone else; upload under another name")
        label = body.label or "public"
        if label not in who.clearance and who.role != "admin":
            raise HTTPException(403, f"you may not publish {label!r} documents")
        hostile = guard.injection_check(body.body)
        flags = [f"content: {r}" for r in hostile.reasons] if hostile.suspicious else []
        status = "live" if who.trusted else "quarantined"
        with lock:
            report = ingest_documents(cfg.store, docs, cfg.settings, label=label if who.trusted else QUARANTINE,
                                      principal=f"api:{who.name}", visible=on.visible_store)
            findings = report.findings.get(doc, {})
            if findings and cfg.settings.dlp == "label":
                label = "restricted"
                if who.trusted:
                    cfg.store.relabel(doc, label)
            if not who.trusted:
                # The queue shows what will go live - the stored form, homoglyphs and all - and
                # its version; approval names that version.
                version = cfg.store.documents()[doc].content_hash
                stored = apply_dlp(store_form(docs[0]), cfg.settings.dlp)[0].text
                preview = stored[:PREVIEW_CHARS] + (f"\n[... {len(stored) - PREVIEW_CHARS} more characters]"
                                                    if len(stored) > PREVIEW_CHARS else "")
                cfg.state.queue(doc, label, who.name, findings, flags, version, preview)
            reload()
        cfg.state.audit(who.name, "ingest", doc, [], status, flags)
        return {"doc": doc, "status": status, "label": label, "chunks": report.chunks_written,
                "findings": findings, "flags": flags}

    @app.delete("/documents/{doc:path}")
    def delete(doc: str, who: Principal = Depends(need("contributor"))) -> dict:
        record = cfg.store.documents().get(doc)
        # Ownership is provenance (who uploaded it), not a path prefix a key name could mimic.
        if who.role != "admin" and (record is None or record.principal != f"api:{who.name}"):
            raise HTTPException(403, "you may only delete your own documents")
        with lock:
            delete_documents(cfg.store, [doc])
            cfg.state.take(doc)
            reload()
        cfg.state.audit(who.name, "delete", doc, [], "deleted", [])
        return {"deleted": doc}

    @app.get("/review")
    def review(who: Principal = Depends(need("admin"))) -> list[dict]:
        return cfg.state.pending()

    @app.post("/review/{doc:path}/{decision}")
    def decide(doc: str, decision: str, version: str | None = None, who: Principal = Depends(need("admin"))) -> dict:
        """Approve or reject a queued upload. Approval names the ``version`` the reviewer
        read (from GET /review): a newer upload under the same name is not approved with it."""
        if decision not in ("approve", "reject"):
            raise HTTPException(404, "use /review/<doc>/approve?version=<version> or /review/<doc>/reject")
        if decision == "approve" and not version:
            raise HTTPException(422, "approving needs ?version=<the version shown by GET /review>")
        with lock:
            entry = cfg.state.take(doc, version if decision == "approve" else None)
            if entry is None:
                raise HTTPException(404, f"{doc!r} is not waiting for review")
            if entry.get("stale"):
                raise HTTPException(409, f"{doc!r} changed since that version was shown (now {entry['version'][:12]}); "
                                         "review it again")
            if decision == "approve":
                cfg.store.relabel(doc, entry["label"])
            else:
                delete_documents(cfg.store, [doc])
            reload()
        cfg.state.audit(who.name, "review", doc, [], decision, [])
        return {"doc": doc, "decision": decision}

    @app.post("/reset")
    def reset(who: Principal = Depends(need("admin"))) -> dict:
        if not cfg.corpus:
            raise MicroRAGError("this server was started without a corpus to reset from (serve --corpus PATH)")
        with lock:
            docs = load_documents(cfg.corpus)
            gone = [d for d in cfg.store.documents() if d not in {x.path for x in docs}]
            report = ingest_documents(cfg.store, docs, cfg.settings, principal=f"operator:{who.name}", prune_missing=gone)
            reload()
        cfg.state.audit(who.name, "reset", ",".join(cfg.corpus), [], report.summary(), [])
        return {"summary": report.summary(), "generation": report.generation}

    # ------------------------------------------------------------ oversight

    @app.get("/audit")
    def audit(limit: int = 100, principal_name: str | None = None, who: Principal = Depends(need("admin"))):
        return cfg.state.trail(max(1, min(limit, 1000)), principal_name)

    @app.get("/audit/collisions")
    def collisions(min_queries: int = 5, who: Principal = Depends(need("admin"))):
        return collision_report(cfg.state.trail(1000), holder["engine"], min_queries)

    return app


def collision_report(trail: list[dict], engine: Engine | None, min_queries: int = 5) -> list[dict]:
    """Documents that surface for many *unrelated* queries - the mark of an embedding-collision
    or slow-drip attack. Unrelated = low mean pairwise similarity of those queries' embeddings."""
    by_doc: dict[str, set[str]] = defaultdict(set)
    for row in trail:
        if row["action"] == "query":
            for h in row["hits"]:
                by_doc[h["id"].rsplit("#", 1)[0]].add(row["query"])
    out = []
    for doc, queries in by_doc.items():
        if len(queries) < min_queries or engine is None:
            continue
        qs = sorted(queries)
        v = engine.index.embedder.embed(qs)
        sim = v @ v.T
        mean = float((sim.sum() - np.trace(sim)) / (len(qs) * (len(qs) - 1)))
        out.append({"doc": doc, "queries": len(qs), "mean_query_similarity": round(mean, 3),
                    "suspicious": mean < 0.35, "examples": qs[:5]})
    return sorted(out, key=lambda r: (not r["suspicious"], -r["queries"]))
