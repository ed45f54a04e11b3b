"""A Python client for the microRAG HTTP server: one method per route, typed results.

    with Client("http://127.0.0.1:8000", api_key="mrg_...") as rag:
        for event in rag.stream("how many vacation days do I get?"):
            ...

Handles: the JSON routes (``/search``, ``/query``, ``/v1/chat/completions``, ``/ingest``,
``/documents``, ``/review``, ``/whoami``, ``/health``), their server-sent event streams
(parsed into typed events), and errors: a 4xx/5xx is a :class:`ServerError` carrying
the server's one-line ``{"error": ...}`` message and status, an unreachable server an
:class:`UnreachableError`. Does not: retry (a question is audited once per call),
parse documents (an upload is text; the server parses it as its loader parses files),
or import the engine - it talks HTTP only, so it installs and runs without the models.
The API key goes in the ``Authorization`` header and nowhere else: no error message
and no ``repr`` shows it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypedDict, overload
from urllib.parse import quote, urlsplit, urlunsplit

from .errors import MicroRAGError
from .types import Chunk, Hit, Turn

if TYPE_CHECKING:  # httpx loads with the first Client: the CLI's local commands never need it
    import httpx

# ---------------------------------------------------------------- errors


class ServerError(MicroRAGError):
    """The server answered with an error status (or an in-band error in a stream)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(f"the server says: {message} (HTTP {status})")
        self.message, self.status = message, status
        # A refused request is the user's to fix (exit 2); a failing server is not (exit 3, as LLMError).
        self.exit_code = 3 if status >= 500 else 2


class AuthError(ServerError):
    """401/403: no key, a wrong or revoked key, or a role that may not do this."""


class UnreachableError(MicroRAGError):
    """No HTTP answer at all: refused connection, unknown host, timeout, broken stream."""

    exit_code = 3


# ---------------------------------------------------------------- what the routes return
# Shapes of the server's JSON (server/routes/*.py); TypedDicts are plain dicts at run time.


class Source(TypedDict, total=False):
    """One retrieved chunk as the server shows it (``/search`` hits, ``/query`` sources)."""

    doc: str
    chunk: int
    id: str
    page: int | None
    hybrid: float
    kw: float
    em: float
    raw_kw: float
    raw_em: float
    text: str
    label: str
    principal: str
    ingested_at: str


class SearchResult(TypedDict):
    hits: list[Source]
    refused: bool
    reason: str
    capped: list[str]
    flags: list[str]


class QueryResult(TypedDict, total=False):
    answer: str
    sources: list[Source]
    refused: bool
    reason: str
    mode: str  # "llm" | "extractive"
    capped: list[str]
    flags: list[str]
    tools: list[dict[str, Any]]
    verification: dict[str, Any] | None  # Verification.to_dict(), or None when not verified


class Upload(TypedDict, total=False):
    doc: str  # the id it was stored under: "@<key name>/<source>"
    status: str  # "live" | "quarantined" (waiting for an admin's review)
    label: str
    chunks: int
    findings: dict[str, int]
    flags: list[str]


def to_hit(source: Source) -> Hit:
    """A server source as the library's :class:`Hit`, so remote results print like local ones.
    The server does not send character offsets: ``start``/``end`` are 0."""
    chunk = Chunk(source.get("id", ""), source.get("doc", ""), source.get("chunk", 0), 0, 0, source.get("text", ""),
                  source.get("page") or 0)
    return Hit(chunk, source.get("hybrid", 0.0), source.get("kw", 0.0), source.get("em", 0.0),
               source.get("raw_kw", 0.0), source.get("raw_em", 0.0))


# ---------------------------------------------------------------- stream events


@dataclass(frozen=True)
class Sources:
    """``event: sources``, first: what the answer will be grounded on."""

    sources: list[Source]
    refused: bool
    reason: str
    capped: list[str]
    context: list[Source] = field(default_factory=list)  # the hits' neighbours the answer may quote


@dataclass(frozen=True)
class Delta:
    """A piece of the answer's text, in order."""

    text: str


@dataclass(frozen=True)
class Done:
    """``event: done``, last: how the answer was made, its flags and its verification."""

    mode: str
    flags: list[str]
    verification: dict[str, Any] | None
    refused: bool = False  # the answer is a refusal (gate, answerer, model or verification)
    reason: str = ""


StreamEvent = Sources | Delta | Done


@dataclass(frozen=True)
class ChatChunk:
    """One ``chat.completion.chunk`` of ``/v1/chat/completions``: its text, and on the last
    one (``finish_reason`` set) the ``microrag`` block: sources, verification, refused,
    reason, flags and the retrieval query."""

    delta: str
    finish_reason: str | None = None
    microrag: dict[str, Any] | None = None


def _sse(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """(event name, data) per server-sent event: ``event:``/``data:`` lines up to a blank
    line; several data lines join with newlines (the SSE rules we need, comments skipped)."""
    event, data = "message", list[str]()
    for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:  # a server that closes without the final blank line
        yield event, "\n".join(data)


def _decoded(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        raise ServerError(f"a streamed event is not JSON: {data[:80]!r}", 502) from None


# ---------------------------------------------------------------- the client

Message = Turn | Mapping[str, str]


def _display(url: str) -> str:
    """``url`` without user:password (they are credentials too)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path, "", "")).rstrip("/")


def _filters(top_k: int | None, where: Mapping[str, str] | None, exclude: Mapping[str, str] | None) -> dict[str, Any]:
    """The request fields for retrieval knobs; absent ones are left to the server's defaults."""
    body: dict[str, Any] = {}
    if top_k is not None:
        body["top_k"] = top_k
    if where:
        body["where"] = dict(where)
    if exclude:
        body["exclude"] = dict(exclude)
    return body


class Client:
    """The microRAG server at ``base_url``; ``api_key`` (``mrg_...``) is sent as a bearer token.

    A context manager (or call :meth:`close`): it keeps one connection pool. Every method
    raises :class:`ServerError` (:class:`AuthError` for 401/403) with the server's message,
    or :class:`UnreachableError` when no answer came.
    """

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 60.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise MicroRAGError(f"the server URL must start with http:// or https://, got {_display(base_url)!r}")
        self.base_url = base_url.rstrip("/")
        self.display_url = _display(self.base_url)  # for messages: no user:password@
        self.timeout = timeout
        api_key = (api_key or "").strip()  # a key read from a file keeps its newline
        if api_key and not all(33 <= ord(c) <= 126 for c in api_key):
            # httpx would quote the bad header, key and all, in its error
            raise MicroRAGError("the API key has spaces or characters outside printable ASCII; copy it again (mrg_...)")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        import httpx

        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def __repr__(self) -> str:
        return f"Client({_display(self.base_url)!r}, api_key={'set' if 'authorization' in self._http.headers else 'none'})"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------ asking

    def search(self, query: str, top_k: int | None = None, where: Mapping[str, str] | None = None,
               exclude: Mapping[str, str] | None = None) -> SearchResult:
        """``POST /search``: the ranked chunks the key may read (no answer).

        Args:
            query: the question.
            top_k: chunks to return (the server's setting when None).
            where: document filter, FIELD -> glob (``{"path": "hr/*"}``).
            exclude: documents to leave out, FIELD -> glob.

        Returns:
            ``{"hits": [Source...], "refused", "reason", "capped", "flags"}``.
        """
        return self._json("POST", "/search", {"query": query, **_filters(top_k, where, exclude)})

    def query(self, query: str, top_k: int | None = None, where: Mapping[str, str] | None = None,
              exclude: Mapping[str, str] | None = None, verify: bool | None = None) -> QueryResult:
        """``POST /query``: a cited answer in one JSON object.

        Args:
            verify: check each sentence against the sources (None: the server's default).
        Returns:
            ``{"answer", "sources", "refused", "reason", "mode", "capped", "flags", "tools", "verification"}``.
        """
        body = {"query": query, **_filters(top_k, where, exclude), **({"verify": verify} if verify is not None else {})}
        return self._json("POST", "/query", body)

    def stream(self, query: str, top_k: int | None = None, where: Mapping[str, str] | None = None,
               exclude: Mapping[str, str] | None = None, verify: bool | None = None) -> Iterator[StreamEvent]:
        """``POST /query`` with ``stream: true``: :class:`Sources`, then :class:`Delta` pieces,
        then :class:`Done`.

        An in-band ``event: error`` (the answer step failed after the sources left) raises
        :class:`ServerError` instead of being yielded, so a loop over the events cannot take
        a failed answer for a finished one.
        """
        body = {"query": query, "stream": True, **_filters(top_k, where, exclude),
                **({"verify": verify} if verify is not None else {})}
        for event, data in self._events("/query", body):
            if data == "[DONE]":
                return
            payload = _decoded(data)
            if event == "error":
                raise ServerError(str(payload.get("error", "the answer step failed")), 502)
            if event == "sources":
                yield Sources(payload.get("sources", []), bool(payload.get("refused")), payload.get("reason", ""),
                              payload.get("capped", []), payload.get("context", []))
            elif event == "done":
                yield Done(payload.get("mode", ""), payload.get("flags", []), payload.get("verification"),
                           bool(payload.get("refused")), payload.get("reason", ""))
            elif "delta" in payload:
                yield Delta(payload["delta"])

    @overload
    def chat(self, messages: Sequence[Message], stream: Literal[False] = False, **extensions: Any) -> dict[str, Any]: ...

    @overload
    def chat(self, messages: Sequence[Message], stream: Literal[True], **extensions: Any) -> Iterator[ChatChunk]: ...

    def chat(self, messages: Sequence[Message], stream: bool = False, **extensions: Any) -> dict[str, Any] | Iterator[ChatChunk]:
        """``POST /v1/chat/completions`` (OpenAI's format) with the whole conversation.

        Args:
            messages: the conversation so far, ending with the user's message
                (:class:`~microrag_engine.types.Turn` or ``{"role", "content"}``).
            stream: yield :class:`ChatChunk` pieces instead of returning one object.
            extensions: the request's ``microrag`` block: ``top_k``, ``where``, ``exclude``,
                ``verify``, ``citations`` (None values are left out).
        Returns:
            an OpenAI ``chat.completion`` whose top level also carries ``microrag``
            (sources, verification, refused, reason, flags, retrieval_query);
            streamed: the chunks' text, the last one with ``finish_reason`` and ``microrag``.
        """
        sent = [{"role": m.role, "content": m.content} if isinstance(m, Turn) else {"role": m["role"], "content": m["content"]}
                for m in messages]
        body: dict[str, Any] = {"model": "microrag", "messages": sent, "stream": stream}
        knobs = {k: v for k, v in extensions.items() if v is not None}
        if knobs:
            body["microrag"] = knobs
        if not stream:
            return self._json("POST", "/v1/chat/completions", body)
        return self._chat_chunks(body)

    def _chat_chunks(self, body: dict[str, Any]) -> Iterator[ChatChunk]:
        for _, data in self._events("/v1/chat/completions", body):
            if data == "[DONE]":
                return
            payload = _decoded(data)
            if "error" in payload:  # OpenAI's in-band error object
                error = payload["error"]
                raise ServerError(str(error.get("message", error) if isinstance(error, dict) else error), 502)
            if not payload.get("choices"):  # the usage summary some clients ask for: no text
                continue
            choice = payload["choices"][0]
            yield ChatChunk((choice.get("delta") or {}).get("content") or "", choice.get("finish_reason"),
                            payload.get("microrag"))

    # ------------------------------------------------------------ documents

    def ingest(self, source: str | Path, text: str | None = None, *, label: str | None = None) -> Upload:
        """``POST /ingest``: one document, stored as ``@<key name>/<source>``.

        Args:
            source: with ``text``, the document's name (``"runbooks/vpn.md"``: its suffix
                says how the server parses it); without, a file to upload under its file name.
            text: the document's text.
            label: its sensitivity label (default: public).
        Returns:
            ``{"doc", "status": "live"|"quarantined", "label", "chunks", "findings", "flags"}``.
        """
        if text is None:
            path = Path(source)
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                raise MicroRAGError(f"{path} is not UTF-8 text; the server takes text uploads (Markdown, HTML, text, "
                                    ".jsonl): ingest PDF and Office files where the index lives") from None
            except OSError as exc:
                raise MicroRAGError(f"cannot read {path}: {exc.strerror}") from None
            source = path.name
        return self._json("POST", "/ingest", {"source": str(source), "body": text, **({"label": label} if label else {})})

    def documents(self) -> list[dict[str, Any]]:
        """``GET /documents``: what the key may see: ``doc``, ``label``, ``n_chunks``, ``ingested_at``, ``principal``."""
        return self._json("GET", "/documents")

    def delete(self, doc: str) -> dict[str, Any]:
        """``DELETE /documents/{doc}``: one's own upload (any document for admins)."""
        return self._json("DELETE", f"/documents/{quote(doc, safe='/@')}")

    def review(self) -> list[dict[str, Any]]:
        """``GET /review`` (admin): uploads waiting for approval, each with the ``version`` to approve."""
        return self._json("GET", "/review")

    def approve(self, doc: str, version: str) -> dict[str, Any]:
        """``POST /review/{doc}/approve``: publish exactly the ``version`` the review queue showed."""
        return self._json("POST", f"/review/{quote(doc, safe='/@')}/approve", params={"version": version})

    def reject(self, doc: str) -> dict[str, Any]:
        """``POST /review/{doc}/reject``: drop a queued upload."""
        return self._json("POST", f"/review/{quote(doc, safe='/@')}/reject")

    # ------------------------------------------------------------ who and how

    def whoami(self) -> dict[str, Any]:
        """``GET /whoami``: the key's ``name``, ``role`` and ``clearance``."""
        return self._json("GET", "/whoami")

    def health(self) -> dict[str, Any]:
        """``GET /health``: ``{"status": "ok"}`` (counts for admins)."""
        return self._json("GET", "/health")

    # ------------------------------------------------------------ transport

    def _json(self, method: str, path: str, body: dict[str, Any] | None = None, params: dict[str, str] | None = None) -> Any:
        import httpx

        try:
            response = self._http.request(method, path, json=body, params=params)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        self._raise_for(response)
        try:
            return response.json()
        except ValueError:
            raise ServerError(f"{method} {path} did not answer JSON (is {_display(self.base_url)} a microRAG server?)",
                              response.status_code) from None

    def _events(self, path: str, body: dict[str, Any]) -> Iterator[tuple[str, str]]:
        """The server-sent events of ``POST path``; an error status raises before the first."""
        import httpx

        try:
            with self._http.stream("POST", path, json=body) as response:
                if response.status_code >= 400:
                    response.read()
                    self._raise_for(response)
                yield from _sse(response.iter_lines())
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None

    def _raise_for(self, response: httpx.Response) -> None:
        if response.status_code < 400:
            return
        try:
            error = response.json().get("error") or response.reason_phrase
        except (ValueError, AttributeError):  # not our JSON: a proxy's page, say
            error = response.reason_phrase or "error"
        # {"error": "..."}, or OpenAI's {"error": {"message": ...}} under /v1/
        message = str(error.get("message") or error) if isinstance(error, dict) else str(error)
        raise (AuthError if response.status_code in (401, 403) else ServerError)(message, response.status_code)

    def _unreachable(self, exc: httpx.HTTPError) -> UnreachableError:
        """One line for a failed exchange. httpx's message names the host, never the headers."""
        import httpx

        where = _display(self.base_url)
        if isinstance(exc, httpx.TimeoutException):
            return UnreachableError(f"{where} did not answer within {self.timeout:g} s")
        if isinstance(exc, httpx.ConnectError):
            return UnreachableError(f"cannot reach {where}: {_reason(exc)}")
        if isinstance(exc, httpx.LocalProtocolError):  # its message may quote a header: never the key
            return UnreachableError(f"the request to {where} could not be sent (a malformed header or URL)")
        return UnreachableError(f"the connection to {where} failed: {_reason(exc)}")


def _reason(exc: Exception) -> str:
    """``[Errno 111] Connection refused`` -> ``connection refused``."""
    text = str(exc) or type(exc).__name__
    return text.split("] ", 1)[-1].strip().rstrip(".").lower() if text.startswith("[Errno") else text
