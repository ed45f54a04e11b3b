"""runtime/llm.py: the OpenAI-compatible SSE client against a real local HTTP server.

Each test scripts a ``ThreadingHTTPServer`` on 127.0.0.1 (OS-assigned port) with a list
of responses, one per successive ``POST /chat/completions``; the server records every
request (path, headers, JSON body). Responses are written as raw bytes so a test can
end a stream without ``data: [DONE]`` and close the connection (a "drop").
"""

from __future__ import annotations

import json
import logging
import socket
import time
from http.server import BaseHTTPRequestHandler

import pytest

from helpers.llm import KEY, Responder, chunked_then_reset, delta, json_reply, sse, status, stream_chat
from microrag_engine.config import LLMConfig
from microrag_engine.errors import LLMError, MicroRAGError
from microrag_engine.runtime.llm import ChatStream, chat, parse_sse_line

MESSAGES = [
    {"role": "system", "content": "Answer from the context."},
    {"role": "user", "content": "What is the refund window?"},
]


def _leaks(text: str, min_len: int = 8) -> bool:
    """True if the key, or any 8+ character piece of it, is in ``text``."""
    return any(KEY[i : i + min_len] in text for i in range(len(KEY) - min_len + 1))


def _assert_no_key(text: str) -> None:
    # pytest.fail with a fixed message so a failure never prints the key itself.
    if _leaks(text):
        pytest.fail("the API key (or a piece of it) leaked into the text", pytrace=False)


def _assert_clean_message(msg: str) -> None:
    assert msg.strip(), "empty error message"
    assert "\n" not in msg, "error message is not one line"
    assert "Traceback" not in msg and 'File "' not in msg
    _assert_no_key(msg)


# ---------------------------------------------------------------- the scripted server


GOOD = sse(
    delta(role="assistant"),
    delta(content="Refunds are "),
    delta(content="accepted for 30 days."),
)


# ---------------------------------------------------------------- 1. a normal, messy stream


def test_normal_stream_joins_content_and_skips_everything_else(llm_server):
    llm_server.script(
        sse(
            delta(role="assistant"),  # role-only first delta
            ": keep-alive",  # SSE comment
            "",  # blank line
            delta(reasoning_content="Let me think about refunds..."),
            delta(content="Refunds "),
            delta(reasoning="internal chain of thought"),
            "data: {not json",
            'data: {"choices": []}',
            "event: message",
            delta(content="are accepted "),
            delta(content=None),
            delta(content="for 30 days", reasoning_content="more thinking"),
            "data:" + json.dumps({"choices": [{"delta": {"content": " [1]."}}]}),  # no space after "data:"
            "",
        )
    )
    cfg = llm_server.cfg()
    text, truncated = chat(cfg, MESSAGES)
    assert text == "Refunds are accepted for 30 days [1]."
    assert truncated is False
    assert "think" not in text and "chain" not in text

    assert len(llm_server.requests) == 1
    req = llm_server.requests[0]
    assert req.path == "/chat/completions"
    if req.headers.get("authorization") != f"Bearer {KEY}":
        pytest.fail("request did not carry 'Authorization: Bearer <key>'", pytrace=False)
    assert "text/event-stream" in req.headers.get("accept", "")
    assert req.headers.get("content-type", "").startswith("application/json")
    assert req.body == {"model": "m", "messages": MESSAGES, "temperature": 0.2, "stream": True}
    assert req.body["stream"] is True  # a real JSON boolean, not "true"


def test_chatstream_yields_pieces_in_order_and_reports_attempts(llm_server):
    llm_server.script(GOOD)
    stream = ChatStream(llm_server.cfg(), MESSAGES)
    assert list(stream) == ["Refunds are ", "accepted for 30 days."]
    assert stream.attempts == 1
    assert stream.truncated is False


def test_custom_temperature_model_and_no_key(llm_server):
    llm_server.script(GOOD)
    cfg = llm_server.cfg(api_key="", temperature=0.0, model="other")
    text, truncated = chat(cfg, MESSAGES)
    assert text == "Refunds are accepted for 30 days."
    req = llm_server.requests[0]
    assert "authorization" not in req.headers  # no key -> no Authorization header at all
    assert req.body["temperature"] == 0.0 and req.body["model"] == "other"


# ---------------------------------------------------------------- 2./3. drops before the first token


def test_drop_before_first_token_is_retried(llm_server):
    llm_server.script(
        sse(delta(role="assistant"), delta(content=""), done=False),  # headers + role/empty delta, then EOF
        GOOD,
    )
    stream = ChatStream(llm_server.cfg(), MESSAGES)
    text = "".join(stream)
    assert text == "Refunds are accepted for 30 days."
    assert stream.truncated is False
    assert stream.attempts == 2
    assert len(llm_server.requests) == 2
    assert llm_server.requests[0].body == llm_server.requests[1].body  # the same request is re-sent


def test_empty_body_drop_is_retried(llm_server):
    llm_server.script(sse(done=False), GOOD)  # 200 + headers, no data at all, then close
    text, truncated = chat(llm_server.cfg(), MESSAGES)
    assert (text, truncated) == ("Refunds are accepted for 30 days.", False)
    assert len(llm_server.requests) == 2


def test_drops_before_first_token_on_every_attempt_raise(llm_server):
    cfg = llm_server.cfg(max_retries=3)
    llm_server.script(*[sse(delta(role="assistant"), ": keep-alive", done=False) for _ in range(6)])
    stream = ChatStream(cfg, MESSAGES)
    with pytest.raises(LLMError) as info:
        list(stream)
    msg = str(info.value)
    _assert_clean_message(msg)
    assert "4 attempt" in msg
    assert "[DONE]" in msg  # says what went wrong
    assert "LLM_BASE_URL" in msg  # and what to do about it
    assert len(llm_server.requests) == cfg.max_retries + 1 == 4
    assert stream.attempts == 4
    assert isinstance(info.value, MicroRAGError) and info.value.exit_code == 3


def test_zero_retries_means_one_request(llm_server):
    llm_server.script(sse(done=False), GOOD)
    with pytest.raises(LLMError, match="1 attempt"):
        chat(llm_server.cfg(max_retries=0), MESSAGES)
    assert len(llm_server.requests) == 1


# ---------------------------------------------------------------- 4. drops mid-stream


def test_drop_mid_stream_keeps_partial_text_and_does_not_retry(llm_server, caplog):
    llm_server.script(
        sse(delta(role="assistant"), delta(content="Refunds are "), delta(content="accepted for"), done=False),
        GOOD,  # must NOT be used
    )
    stream = ChatStream(llm_server.cfg(), MESSAGES)
    with caplog.at_level(logging.WARNING, logger="microrag"):
        text = "".join(stream)
    assert text == "Refunds are accepted for"
    assert stream.truncated is True
    assert stream.attempts == 1
    assert len(llm_server.requests) == 1
    assert "mid-answer" in caplog.text
    _assert_no_key(caplog.text)


def test_chunked_connection_reset_mid_stream_is_truncated(llm_server):
    # A transport error (incomplete chunked body) after content, rather than a clean EOF.
    llm_server.script(chunked_then_reset(delta(content="Partial "), delta(content="answer")), GOOD)
    text, truncated = chat(llm_server.cfg(), MESSAGES)
    assert text == "Partial answer"
    assert truncated is True
    assert len(llm_server.requests) == 1


def test_chunked_connection_reset_before_first_token_is_retried(llm_server):
    llm_server.script(chunked_then_reset(delta(role="assistant")), GOOD)
    stream = ChatStream(llm_server.cfg(), MESSAGES)
    assert "".join(stream) == "Refunds are accepted for 30 days."
    assert stream.attempts == 2 and stream.truncated is False


# ---------------------------------------------------------------- 5. auth failures


@pytest.mark.parametrize("code", [401, 403])
def test_auth_rejection_is_not_retried_and_hides_the_key(llm_server, code):
    echo = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}", "code": "invalid_api_key"}})
    llm_server.script(status(code, echo), GOOD, GOOD)
    with pytest.raises(LLMError) as info:
        chat(llm_server.cfg(), MESSAGES)
    msg = str(info.value)
    _assert_clean_message(msg)
    assert str(code) in msg
    assert "LLM_API_KEY" in msg
    assert len(llm_server.requests) == 1


def test_auth_rejection_with_plain_body(llm_server):
    llm_server.script(status(401, "Unauthorized", ctype="text/plain"))
    with pytest.raises(LLMError, match="401"):
        chat(llm_server.cfg(), MESSAGES)
    assert len(llm_server.requests) == 1


# ---------------------------------------------------------------- 6. server errors


def test_500_on_every_attempt_raises_after_all_retries(llm_server):
    cfg = llm_server.cfg(max_retries=2)
    body = json.dumps({"error": {"message": f"upstream exploded for key {KEY}"}})
    llm_server.script(*[status(500, body) for _ in range(5)])
    with pytest.raises(LLMError) as info:
        chat(cfg, MESSAGES)
    msg = str(info.value)
    _assert_clean_message(msg)
    assert "500" in msg
    assert "3 attempt" in msg
    assert "upstream exploded" in msg  # the server's reason is passed on (key masked)
    assert len(llm_server.requests) == cfg.max_retries + 1 == 3


@pytest.mark.parametrize("code", [500, 502, 503, 429])
def test_retryable_status_then_good_stream_succeeds(llm_server, code):
    llm_server.script(status(code, '{"error": "try again"}'), GOOD)
    stream = ChatStream(llm_server.cfg(), MESSAGES)
    assert "".join(stream) == "Refunds are accepted for 30 days."
    assert stream.attempts == 2 and stream.truncated is False
    assert len(llm_server.requests) == 2


@pytest.mark.parametrize("code", [400, 404, 422])
def test_other_client_errors_are_not_retried(llm_server, code):
    llm_server.script(status(code, f'{{"error": "bad model m for {KEY}"}}'), GOOD)
    with pytest.raises(LLMError) as info:
        chat(llm_server.cfg(), MESSAGES)
    msg = str(info.value)
    _assert_clean_message(msg)
    assert str(code) in msg and "bad model" in msg
    assert len(llm_server.requests) == 1


def test_key_straddling_the_200_char_body_cut_is_not_leaked(llm_server):
    body = "x" * 185 + KEY + " trailing"  # the cut at 200 keeps 'sk-test-SECRET-' and drops '123'
    llm_server.script(*[status(500, body, ctype="text/plain") for _ in range(3)])
    with pytest.raises(LLMError) as info:
        chat(llm_server.cfg(), MESSAGES)
    _assert_no_key(str(info.value))


def test_multiline_error_body_still_gives_a_one_line_message(llm_server):
    body = "<html>\n<head><title>502 Bad Gateway</title></head>\n<body>nginx</body>\n</html>\n"
    llm_server.script(*[status(502, body, ctype="text/html") for _ in range(3)])
    with pytest.raises(LLMError) as info:
        chat(llm_server.cfg(), MESSAGES)
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------- 7. a server that ignores stream=true


def test_plain_json_reply_is_accepted(llm_server):
    llm_server.script(
        json_reply({"id": "x", "object": "chat.completion",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Whole answer [1]."}}]})
    )
    stream = ChatStream(llm_server.cfg(), MESSAGES)
    assert list(stream) == ["Whole answer [1]."]
    assert stream.truncated is False and stream.attempts == 1
    assert len(llm_server.requests) == 1


def test_plain_json_reply_without_content_is_an_error(llm_server):
    llm_server.script(json_reply({"error": {"message": "nope"}}), GOOD)
    with pytest.raises(LLMError, match="choices") as info:
        chat(llm_server.cfg(), MESSAGES)
    _assert_clean_message(str(info.value))
    assert len(llm_server.requests) == 1


# ---------------------------------------------------------------- 8. nothing listening


def test_connection_refused_is_a_clean_llm_error():
    # A socket bound but never listening: connecting to it is refused, deterministically.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    try:
        cfg = LLMConfig(base_url=f"http://127.0.0.1:{port}", api_key=KEY, model="m", backoff=0.0, timeout=2.0, max_retries=1)
        stream = ChatStream(cfg, MESSAGES)
        with pytest.raises(LLMError) as info:
            list(stream)
    finally:
        sock.close()
    msg = str(info.value)
    _assert_clean_message(msg)
    assert "2 attempt" in msg and stream.attempts == 2
    assert "ConnectError" in msg or "refused" in msg.lower()
    assert f"127.0.0.1:{port}" in msg  # says where it tried
    assert info.value.__cause__ is None or not isinstance(info.value.__cause__, LLMError)


# ---------------------------------------------------------------- 9. configuration


def test_from_env_without_url_is_none():
    assert LLMConfig.from_env({}) is None
    assert LLMConfig.from_env({"LLM_BASE_URL": "   ", "LLM_API_KEY": KEY}) is None


def test_from_env_with_url():
    cfg = LLMConfig.from_env({"LLM_BASE_URL": " http://127.0.0.1:9/v1/ ", "LLM_API_KEY": KEY, "LLM_MODEL": "qwen"})
    assert cfg is not None
    assert cfg.base_url == "http://127.0.0.1:9/v1"
    assert cfg.api_key == KEY
    assert cfg.model == "qwen"
    assert cfg.temperature == 0.2 and cfg.max_retries >= 1
    _assert_no_key(repr(cfg))
    _assert_no_key(str(cfg))
    assert "base_url='http://127.0.0.1:9/v1'" in repr(cfg)


def test_from_env_defaults():
    cfg = LLMConfig.from_env({"LLM_BASE_URL": "http://h", "LLM_MODEL": ""})
    assert cfg is not None and cfg.api_key == "" and cfg.model == "default"


def test_from_env_reads_os_environ_by_default(monkeypatch):
    monkeypatch.delenv("LLM_BASE_URL", raising=False)
    assert LLMConfig.from_env() is None
    monkeypatch.setenv("LLM_BASE_URL", "http://h/")
    monkeypatch.setenv("LLM_API_KEY", KEY)
    cfg = LLMConfig.from_env()
    assert cfg is not None and cfg.base_url == "http://h"
    _assert_no_key(repr(cfg))


def test_from_env_url_works_end_to_end(llm_server):
    cfg = LLMConfig.from_env({"LLM_BASE_URL": llm_server.url + "/", "LLM_API_KEY": KEY, "LLM_MODEL": "m"})
    cfg = LLMConfig(**{**cfg.__dict__, "backoff": 0.0, "timeout": 5.0})
    llm_server.script(GOOD)
    assert chat(cfg, MESSAGES) == ("Refunds are accepted for 30 days.", False)
    assert llm_server.requests[0].path == "/chat/completions"  # no double slash


# ---------------------------------------------------------------- 10. parse_sse_line


@pytest.mark.parametrize(
    "line, expected",
    [
        ('data: {"choices":[{"delta":{"content":"hi"}}]}', "hi"),
        ('data:{"choices":[{"delta":{"content":"hi"}}]}', "hi"),
        ('  data: {"choices":[{"delta":{"content":"hi"}}]}  \r\n', "hi"),
        ('data: {"choices":[{"delta":{"content":" leading space"}}]}', " leading space"),
        ('data: {"choices":[{"delta":{"content":"line\\nbreak"}}]}', "line\nbreak"),
        ("data: [DONE]", None),
        ("data:[DONE]", None),
        ("  data: [DONE]  \n", None),
        ('data: {"choices":[{"delta":{"role":"assistant"}}]}', ""),
        ('data: {"choices":[{"delta":{"reasoning_content":"think"}}]}', ""),
        ('data: {"choices":[{"delta":{"reasoning":"think"}}]}', ""),
        ('data: {"choices":[{"delta":{"content":null}}]}', ""),
        ('data: {"choices":[{"delta":{"content":42}}]}', ""),
        ('data: {"choices":[{"delta":null}]}', ""),
        ('data: {"choices":[{"delta":"text"}]}', ""),
        ('data: {"choices":[{}]}', ""),
        ('data: {"choices":[null]}', ""),
        ('data: {"choices":[]}', ""),
        ('data: {"choices":null}', ""),
        ('data: {"error":{"message":"x"}}', ""),
        ("data: {not json", ""),
        ("data: []", ""),
        ('data: "just a string"', ""),
        ("data: 7", ""),
        ("data:", ""),
        ("data: [done]", ""),
        (": keep-alive", ""),
        ("event: message", ""),
        ("id: 5", ""),
        ("retry: 1000", ""),
        ("", ""),
        ("   ", ""),
    ],
)
def test_parse_sse_line(line, expected):
    assert parse_sse_line(line) == expected


# ---------------------------------------------------------------- the request's deadline


def slow_sse(pieces: int, gap_s: float) -> Responder:
    """A stream that sends one piece every ``gap_s`` seconds (a slow or stuck model)."""

    def respond(h: BaseHTTPRequestHandler) -> None:
        stream_chat(h, [f"p{i} " for i in range(pieces)], gap_s)

    return respond


def test_a_slow_stream_is_cut_at_the_deadline_and_keeps_its_text(llm_server):
    """Red team #1: a model that drips tokens cannot hold a request past its budget."""
    llm_server.script(slow_sse(pieces=100, gap_s=0.1))
    t0 = time.monotonic()
    stream = ChatStream(llm_server.cfg(timeout=30.0), [{"role": "user", "content": "hi"}], deadline=t0 + 0.5)
    text = "".join(stream)
    assert time.monotonic() - t0 < 3.0  # not the 10 s the whole stream takes
    assert stream.truncated and text.startswith("p0 ") and "p99" not in text


def test_a_silent_model_is_given_up_at_the_deadline(llm_server):
    llm_server.script(slow_sse(pieces=2, gap_s=20.0))
    t0 = time.monotonic()
    stream = ChatStream(llm_server.cfg(timeout=30.0, max_retries=0), [{"role": "user", "content": "hi"}],
                        deadline=t0 + 0.5)
    text = "".join(stream)
    assert time.monotonic() - t0 < 5.0 and text == "p0 " and stream.truncated
