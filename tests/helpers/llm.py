"""A scripted OpenAI-compatible server on a real loopback socket, and SSE replies for it.

``ScriptedServer`` answers each successive ``POST /chat/completions`` with the next
scripted ``Responder`` and records every request (path, headers, JSON body).
Responses are written as raw bytes, so a test can end a stream without
``data: [DONE]`` and close the connection (a "drop"). The ``llm_server`` fixture
in conftest.py starts one per test.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from microrag_engine.config import LLMConfig

KEY = "sk-test-SECRET-123"  # the API key scripted configs carry; tests assert it never leaks




Responder = Callable[[BaseHTTPRequestHandler], None]


def delta(**delta: object) -> str:
    return "data: " + json.dumps({"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]})


def sse(*lines: str, done: bool = True) -> Responder:
    """200 text/event-stream with these lines (each followed by a blank line, as SSE does).

    ``done=False`` ends the body without ``data: [DONE]``; the server then closes the
    connection (HTTP/1.0, no Content-Length), so the client sees a clean EOF mid-stream.
    """
    body = "".join(f"{line}\n\n" if line else "\n" for line in lines)
    if done:
        body += "data: [DONE]\n\n"

    def respond(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.end_headers()
        h.wfile.write(body.encode("utf-8"))
        h.wfile.flush()
        h.close_connection = True

    return respond


def chunked_then_reset(*lines: str) -> Responder:
    """HTTP/1.1 chunked SSE: some chunks, then the socket closes mid-body (no final chunk).

    The client sees a protocol error (incomplete chunked read), not a clean EOF.
    """

    def respond(h: BaseHTTPRequestHandler) -> None:
        h.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for line in lines:
            data = f"{line}\n\n".encode()
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        h.wfile.flush()
        h.close_connection = True

    return respond


def status(code: int, body: str = "", ctype: str = "application/json") -> Responder:
    def respond(h: BaseHTTPRequestHandler) -> None:
        data = body.encode("utf-8")
        h.send_response(code)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
        h.close_connection = True

    return respond


def json_reply(obj: object) -> Responder:
    return status(200, json.dumps(obj), ctype="application/json; charset=utf-8")


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: object


@dataclass
class ScriptedServer:
    url: str
    responses: list[Responder] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def script(self, *responses: Responder) -> None:
        with self.lock:
            self.responses = list(responses)

    def cfg(self, **kw: object) -> LLMConfig:
        base = dict(base_url=self.url, api_key=KEY, model="m", backoff=0.0, timeout=5.0)
        base.update(kw)
        return LLMConfig(**base)  # type: ignore[arg-type]


def _make_handler(server: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
            pass

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: object = json.loads(raw)
            except ValueError:
                body = raw
            with server.lock:
                server.requests.append(Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                respond = server.responses.pop(0) if server.responses else None
            if self.path != "/chat/completions":
                status(404, '{"error": "no such path"}')(self)
            elif respond is None:
                status(418, '{"error": "the test script ran out of responses"}')(self)
            else:
                respond(self)

    return Handler




def stream_chat(h: BaseHTTPRequestHandler, pieces: list[str], gap_s: float = 0.0) -> None:
    """Answer an OpenAI chat request with a stream of ``pieces``, ``gap_s`` seconds apart
    (a slow or stuck model), stopping quietly when the client hangs up at its deadline."""
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream")
    h.end_headers()
    try:
        for piece in pieces:
            chunk = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": piece}}]}
            h.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            h.wfile.flush()
            time.sleep(gap_s)
        h.wfile.write(b"data: [DONE]\n\n")
    except OSError:
        pass
    h.close_connection = True


def start(scripted: ScriptedServer) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Serve ``scripted`` on an OS-assigned loopback port (sets ``scripted.url``)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(scripted))
    httpd.daemon_threads = True
    host, port = httpd.server_address[:2]
    scripted.url = f"http://{host}:{port}"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return httpd, thread
