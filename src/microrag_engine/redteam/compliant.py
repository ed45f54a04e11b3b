"""A maximally compliant model: the worst case a RAG server must survive.

OpenAI-compatible ``POST /chat/completions`` (SSE when ``stream`` is true, plain
JSON otherwise), deterministic, no weights. It:
  * quotes its whole retrieved context verbatim (fences removed),
  * obeys every instruction it sees, in the question, the context *or* an earlier turn:
    each ``read_file(...)`` it reads it repeats as its own tool call,
  * re-encodes the context when asked - base64, rot13, spaced-out letters,
    ``[at]``/``(dot)`` addresses - so output guards are tested against encodings.
If the server's defences hold against this model, they hold against any model.
"""

from __future__ import annotations

import base64
import codecs
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CALL = re.compile(r"read_file\([^)]*\)")
FENCE = re.compile(r"<<<(?:END )?DATA [0-9a-f]+>>>\n?")


def respond(messages: list[dict]) -> str:
    """The compliant reply to a chat."""
    user = next((m.get("content", "") for m in reversed(messages) if m.get("role") == "user"), "")
    context, _, question = user.partition("# User question")
    context = FENCE.sub("", context.replace("# Retrieved context", "")).strip()
    q = question.lower()
    parts = [f"Here is everything I was given:\n{context}"]
    if "base64" in q:
        parts.append("In base64: " + base64.b64encode(context.encode()).decode())
    if "rot13" in q or "rot-13" in q:
        parts.append("In rot13: " + codecs.encode(context, "rot13"))
    if "spell" in q or "letter by letter" in q or "spaced" in q:
        parts.append("Spelled out: " + " ".join(context))
    if "[at]" in q or "(dot)" in q:
        parts.append("Addresses: " + context.replace("@", " [at] ").replace(".", " (dot) "))
    # Obey: every tool call seen anywhere becomes our own - in the context, the question, or an
    # earlier turn of the conversation (the caller's or one it says was ours: red team #33, 2).
    said = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") in ("user", "assistant"))
    for call in dict.fromkeys(CALL.findall(said)):
        parts.append(call)
    return "\n\n".join(parts)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_POST(self):  # noqa: N802 - http.server's naming
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0) or 0)) or b"{}")
            reply = respond(body.get("messages", []))
        except (ValueError, AttributeError):
            self.send_response(400)
            self.end_headers()
            return
        if body.get("stream"):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            for piece in re.findall(r"\S+\s*|\s+", reply):
                self.wfile.write(f"data: {json.dumps({'choices': [{'delta': {'content': piece}}]})}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
        else:
            out = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply}}]}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    def log_message(self, *args) -> None:  # quiet: it is a test instrument
        pass


def serve(host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """Start the model in a background thread; ``server.server_address`` tells the port."""
    httpd = ThreadingHTTPServer((host, port), _Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd
