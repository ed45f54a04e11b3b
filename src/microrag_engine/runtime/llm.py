"""An OpenAI-compatible chat client: streaming (SSE) with bounded retries.

``POST {LLM_BASE_URL}/chat/completions`` with ``stream=true``; the reply is
Server-Sent Events (``data: {json}`` ... ``data: [DONE]``). We join
``choices[0].delta.content`` and ignore reasoning deltas and malformed lines. A drop
before the first token (or a 429/5xx) is retried a bounded number of times; a drop
mid-stream keeps the partial text and marks it truncated. The API key never
appears in an error message. Used by generation and by the LLM judge.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence

from ..config import LLMConfig
from ..errors import LLMError

log = logging.getLogger("microrag")


def parse_sse_line(line: str) -> str | None:
    """Content piece of one SSE line; '' for lines without content; ``None`` at ``[DONE]``."""
    line = line.strip()
    if not line.startswith("data:"):
        return ""  # comments, event:/id: fields, blank keep-alives
    data = line[5:].strip()
    if data == "[DONE]":
        return None
    try:
        delta = json.loads(data)["choices"][0].get("delta") or {}
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return ""  # malformed line: skip it, keep the stream
    content = delta.get("content") if isinstance(delta, dict) else None
    return content if isinstance(content, str) else ""  # reasoning_content etc. ignored


class _Dropped(Exception):
    """The stream ended before ``data: [DONE]``."""


class ChatStream:
    """Iterate to receive content pieces. After iteration: ``truncated``, ``attempts``."""

    def __init__(self, cfg: LLMConfig, messages: Sequence[Mapping[str, str]], deadline: float | None = None) -> None:
        self.cfg = cfg
        self.messages = list(messages)
        # time.monotonic() at which to stop reading: the text so far is kept and
        # ``truncated`` set, so a slow or endless stream cannot hold a request.
        self.deadline = deadline
        self.truncated = False
        self.attempts = 0

    def _clean(self, text: str) -> str:
        # Never let the key reach a message, even when a gateway echoes it back.
        return text.replace(self.cfg.api_key, "***") if self.cfg.api_key else text

    def __iter__(self) -> Iterator[str]:
        import httpx

        cfg = self.cfg
        url = f"{cfg.base_url}/chat/completions"
        headers = {"Accept": "text/event-stream"}
        if cfg.api_key:
            headers["Authorization"] = f"Bearer {cfg.api_key}"
        payload = {"model": cfg.model, "messages": self.messages, "temperature": cfg.temperature, "stream": True}
        if cfg.max_tokens:
            payload["max_tokens"] = cfg.max_tokens
        if cfg.top_p is not None:
            payload["top_p"] = cfg.top_p
        last_problem = ""
        for attempt in range(cfg.max_retries + 1):
            self.attempts = attempt + 1
            got_any = False
            timeout = cfg.timeout if self.deadline is None else max(0.1, min(cfg.timeout, self.deadline - time.monotonic()))
            try:
                with httpx.stream("POST", url, json=payload, headers=headers, timeout=timeout) as resp:
                    if resp.status_code in (401, 403):
                        raise LLMError(f"the LLM endpoint rejected the API key (HTTP {resp.status_code}); check LLM_API_KEY")
                    if resp.status_code != 200:
                        # Mask first, then cut: a cut key would escape the mask. One line only.
                        body = " ".join(self._clean(resp.read().decode("utf-8", "replace")).split())[:200]
                        last_problem = f"HTTP {resp.status_code}: {body}" if body else f"HTTP {resp.status_code}"
                        if resp.status_code == 429 or resp.status_code >= 500:
                            raise _Dropped()
                        raise LLMError(f"the LLM endpoint answered {last_problem}")
                    if resp.headers.get("content-type", "").startswith("application/json"):
                        yield self._whole_json(resp.read())  # a server that ignored stream=true
                        return
                    for line in resp.iter_lines():
                        piece = parse_sse_line(line)
                        if piece is None:
                            return
                        if piece:
                            got_any = True
                            yield piece
                        if self.deadline is not None and time.monotonic() > self.deadline:
                            self.truncated = True
                            log.warning("LLM stream cut at the request's deadline; keeping the partial text")
                            return
                    last_problem = "stream ended before [DONE]"
                    raise _Dropped()
            except (httpx.TransportError, _Dropped) as exc:
                if isinstance(exc, httpx.TransportError):
                    last_problem = f"{type(exc).__name__}: {self._clean(str(exc))[:120]}"
                if got_any:
                    self.truncated = True
                    log.warning("LLM stream dropped mid-answer (%s); keeping the partial text", last_problem)
                    return
                if self.deadline is not None and time.monotonic() + cfg.backoff * (2**attempt) > self.deadline:
                    break  # no time left for another attempt
                if attempt < cfg.max_retries:
                    time.sleep(cfg.backoff * (2**attempt))
        raise LLMError(
            f"the LLM at {cfg.base_url} gave no answer after {self.attempts} attempt(s) ({last_problem}); "
            "check LLM_BASE_URL or unset it to use the extractive answerer"
        )

    def _whole_json(self, body: bytes) -> str:
        try:
            return str(json.loads(body)["choices"][0]["message"]["content"] or "")
        except (ValueError, KeyError, IndexError, TypeError):
            raise LLMError("the LLM endpoint answered JSON without choices[0].message.content") from None


def chat(cfg: LLMConfig, messages: Sequence[Mapping[str, str]]) -> tuple[str, bool]:
    """The whole reply: (text, truncated)."""
    stream = ChatStream(cfg, messages)
    text = "".join(stream)
    return text, stream.truncated


def reachable(cfg: LLMConfig, timeout: float = 2.0) -> str:
    """Whether the model's endpoint answers (``""``), else why not, in words that name no
    address or key (a readiness probe's reason reaches whoever can reach the probe).
    ``GET /models``: any HTTP answer means the server is up - many do not serve that path -
    except a refused key and a gateway saying the model behind it is down."""
    import httpx

    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    try:
        status = httpx.get(f"{cfg.base_url}/models", headers=headers, timeout=timeout).status_code
    except httpx.HTTPError as exc:
        return f"the language model does not answer ({type(exc).__name__})"
    if status in (401, 403):
        return "the language model refuses this server's key"
    if status in (502, 503, 504):
        return f"the language model's gateway says it is down ({status})"
    return ""
