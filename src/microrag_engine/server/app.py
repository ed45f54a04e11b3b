"""The HTTP server: ``create_app(ServerConfig)`` builds the FastAPI app over one ``Engine``.

Thin routes (``routes/``) over the engine, policy in one place: who may do what
(roles), what they may read (clearance labels filter chunks *before* ranking), what
may enter the index (namespaced sources, DLP, quarantine for untrusted contributors),
what may leave it (output guard), and what is recorded (audit trail). Every defence is
a switch in ``defences.py``; its two profiles are ``HARDENED`` (every real server) and
``LAB`` (the target of ``microrag redteam``). Every user mistake is a 4xx with ``{"error": ...}``; keys never
reach a log line. With the ``mcp`` extra, MCP clients are served at ``/mcp`` (``mcp.py``), behind the same
keys and policy.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Mount, Route

from .. import __version__
from ..errors import MicroRAGError
from ..runtime.tracing import failed, server_span
from . import logs
from .config import UI_HEADERS, ServerConfig
from .context import ServerContext
from .logs import request_id
from .routes import documents, openai, oversight, query

__all__ = ["ServerConfig", "create_app", "mcp_sdk"]


def mcp_sdk() -> bool:
    """Whether the ``mcp`` extra is there as ``mcp.py`` needs it: the official SDK, 2.x (``MCPServer``).
    The server runs without it, and without /mcp."""
    try:  # find_spec of a submodule imports its parents: a broken install must not stop `serve`
        return importlib.util.find_spec("mcp") is not None and importlib.util.find_spec("mcp.server.mcpserver") is not None
    except Exception:
        return False


def _host_name(header: str) -> str:
    """The name in a Host header, without its port ("[::1]:8000" -> "[::1]")."""
    header = header.lower()
    if header.startswith("["):
        return header[: header.find("]") + 1]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


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


# OpenAI's error types by status, for the /v1 routes (their clients read error.type and error.code).
_OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                 404: "invalid_request_error", 405: "invalid_request_error", 413: "invalid_request_error", 422: "invalid_request_error",
                 429: "rate_limit_error"}


def _error(request: Request, message: str, status: int, headers: Mapping[str, str] | None = None,
           param: str | None = None) -> JSONResponse:
    """Every error as one JSON object: ``{"error": message}``, or OpenAI's shape under ``/v1/``."""
    if not request.url.path.startswith("/v1/"):
        return JSONResponse({"error": message}, status_code=status, headers=headers)
    code = {401: "invalid_api_key", 404: "model_not_found" if "model" in message else "not_found",
            429: "rate_limit_exceeded"}.get(status)
    body = {"message": message, "type": _OPENAI_TYPES.get(status, "server_error"), "param": param or None, "code": code}
    return JSONResponse({"error": body}, status_code=status, headers=headers)


access = logging.getLogger("microrag.access")

# FastAPI's own OpenTelemetry (0.16x: spans, metrics and logs of every request through the global
# providers) records the path, the query string and validation errors with their input - a
# document's name, a question. Off: this app's spans are its own (``microrag.request``).
_NATIVE_TELEMETRY_OFF: dict[str, Any] = {"telemetry": {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}} \
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters else {}

# How long a stopping server waits for the background save of derived files (seconds).
SAVE_ON_EXIT_S = 60.0


def create_app(cfg: ServerConfig) -> FastAPI:
    on = cfg.defences
    # No Swagger/ReDoc pages: they load scripts from a CDN, outside the page's CSP.
    # The schema stays at /openapi.json for any client or offline viewer.
    ctx = ServerContext(cfg)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        # Shutting down (SIGTERM): uvicorn has stopped accepting and let in-flight requests
        # finish; the last write's derived files are saved before the process goes, so the
        # next start maps them instead of deriving everything again.
        await asyncio.to_thread(ctx.saver.wait, SAVE_ON_EXIT_S)

    app = FastAPI(title="microRAG", version=__version__, docs_url=None if on.closed_surface else "/docs", redoc_url=None,
                  description="Retrieval-augmented answers over your documents, with identity, labels and an audit trail.",
                  lifespan=lifespan, **_NATIVE_TELEMETRY_OFF)

    # ------------------------------------------------------------ errors and limits

    app.add_middleware(BodyLimit, max_body=cfg.max_body, streamed=on.streamed_body_cap)

    @app.exception_handler(MicroRAGError)
    async def _user_error(request: Request, exc: MicroRAGError):
        return _error(request, str(exc), 400)

    @app.exception_handler(StarletteHTTPException)  # also 404/405 from routing
    async def _http_error(request: Request, exc: StarletteHTTPException):
        param = exc.param if isinstance(exc, openai.OptionError) else None
        return _error(request, str(exc.detail), exc.status_code, exc.headers, param=param)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        if first.get("type") == "json_invalid":
            return _error(request, "invalid request: the body is not valid JSON", 422)
        if first.get("type") == "model_attributes_type":
            return _error(request, "invalid request: send a JSON object with content-type: application/json", 422)
        # (these two stay 422 under /v1 too: no OpenAI client sends them)
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
        # OpenAI answers a malformed request with 400, and its clients expect that status.
        status = 400 if request.url.path.startswith("/v1/") else 422
        return _error(request, f"invalid request: {where or 'body'}: {first.get('msg', 'malformed')}", status, param=where)

    @app.middleware("http")
    async def _limits(request: Request, call_next):
        host = _host_name(request.headers.get("host") or "")
        if on.closed_surface and cfg.allowed_hosts is not None and host not in cfg.allowed_hosts:
            return JSONResponse({"error": "unknown Host header; serve with --allowed-host NAME for this name"},
                                status_code=400)
        began = time.perf_counter()
        rid = request_id(request.headers.get(logs.HEADER))
        token = logs.REQUEST_ID.set(rid)  # the route's thread, the engine and the audit row see it
        # The request's span (runtime/tracing.py), parent of the pipeline's steps: the route's
        # template and the status, as the metrics have them; never the path or a header's value.
        traced = server_span("microrag.request", request.headers, request_id=rid, **{"http.method": request.method})
        try:
            with traced:
                response = await call_next(request)
                seconds = time.perf_counter() - began
                # By the route's template (/documents/{doc}), never the path: a caller cannot grow the series.
                route = request.scope.get("route")
                template = route.path if isinstance(route, Route | Mount) else "unmatched"
                ctx.metrics.request(template, request.method, response.status_code, seconds)
                traced.set(**{"http.route": template, "http.status_code": response.status_code})
                if response.status_code >= 500:
                    failed(traced, f"HTTP {response.status_code}")
            access.info("%s %s %d %.1f ms", request.method, request.url.path, response.status_code, seconds * 1000)
        finally:
            logs.REQUEST_ID.reset(token)
        response.headers[logs.HEADER] = rid
        if request.url.path == "/" or request.url.path.startswith("/ui/"):
            response.headers.update(UI_HEADERS)
        return response

    # html=True: /ui/ serves index.html, as a person typing the address expects
    app.mount("/ui", StaticFiles(directory=Path(__file__).parent / "static", html=True), name="ui")
    for routes in (oversight, query, documents, openai):
        app.include_router(routes.router(ctx))
    if mcp_sdk():  # the mcp extra: MCP clients at /mcp, behind the same keys and policy
        from .mcp import mount

        mount(app, ctx)
    return app
