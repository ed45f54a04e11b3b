"""``microrag chat`` through a real pseudo-terminal (pexpect): a local index, then a server."""

from __future__ import annotations

import os
import re
import sys

import pytest

pexpect = pytest.importorskip("pexpect", reason="pexpect drives the terminal (dev extra)")

from conftest import ROOT, needs_models  # noqa: E402
from helpers.net import free_port  # noqa: E402
from microrag_engine.cli.chat import Backend, Reply, Session  # noqa: E402
from microrag_engine.errors import MicroRAGError  # noqa: E402
from microrag_engine.types import Hit, Turn  # noqa: E402

PROMPT = "you> "
LEAVE = "hr/leave-and-holidays.md"


def _plain(text: str) -> str:
    """What a reader sees: no colour or terminal-mode sequences, Unix newlines."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r\n", "\n")


def _spawn(*args: str, **env: str) -> pexpect.spawn:
    full = {k: v for k, v in os.environ.items() if k not in ("LLM_BASE_URL", "MICRORAG_API_KEY")}
    full.update(MICRORAG_INDEX=str(ROOT / ".no-such-index"), **env)  # hermetic: the bundled demo handbook
    return pexpect.spawn(sys.executable, ["-m", "microrag_engine.cli", "chat", *args], env=full, cwd=str(ROOT),
                         encoding="utf-8", timeout=60, dimensions=(50, 300))


def _say(child: pexpect.spawn, line: str) -> str:
    """Type ``line``, wait for the next prompt, return what was printed in between."""
    child.sendline(line)
    child.expect_exact(PROMPT)
    return _plain(child.before)


def _sources(printed: str) -> list[str]:
    """The /sources rows: each retrieved chunk, its citation number when the answer cites it."""
    return [line for line in printed.splitlines() if re.match(r"(\[\d+\]|   ) \[\d\.\d{3} kw=", line)]


@needs_models
def test_a_local_chat_keeps_the_conversation():
    child = _spawn()
    try:
        child.expect_exact(PROMPT)
        assert "extractive answerer" in _plain(child.before) and "/help" in child.before
        first = _say(child, "how many vacation days do I get?")
        # citations numbered as they stream in, the cited sources listed under the answer
        assert "[1]" in first and "[source:" not in first and "20 paid vacation days" in first
        assert re.search(rf"^  1\. .*{re.escape(LEAVE)} · chunk \d+$", first, re.M), first
        assert "retrieval query" not in first  # a first question stands alone
        follow = _say(child, "and can I carry them over?")
        assert "carry over up to 5 unused vacation days" in follow
        # the follow-up was searched for together with the question it continues, and says so
        assert 'retrieval query (history) = "how many vacation days do I get? and can I carry them over?"' in follow
        listed = _sources(_say(child, "/sources"))
        assert listed and listed[0].endswith(f"] {LEAVE} · chunk 0")  # citation `doc · chunk k` with its scores
        assert [row for row in listed if row.startswith("[1] ")]  # what the answer's [1] stands for
        checked = _say(child, "/verify")
        assert re.search(r"Verification: (\d+)/\1 sentences supported", checked) and "✓ supported" in checked
        assert "forgotten" in _say(child, "/reset")
        assert "no answer yet" in _say(child, "/sources")
        assert "/verify" in _say(child, "/help") and "unknown command /nope" in _say(child, "/nope")
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0


@needs_models
def test_a_chat_with_a_server_streams_and_keeps_the_conversation(tmp_path):
    pytest.importorskip("fastapi", reason="server extra not installed")
    from helpers.server import Running

    srv = Running(tmp_path, rate_per_minute=100_000)
    child = _spawn("--target", srv.url, MICRORAG_API_KEY=srv.key["reader"])
    try:
        child.expect_exact(PROMPT)
        assert f"chatting with {srv.url} as rita" in _plain(child.before)
        first = _say(child, "How many vacation days do employees get?")
        assert "20 vacation days" in first and "[1]" in first and "[source:" not in first
        assert "  1. Leave — leave.md · chunk 0" in first and "Sources:" not in first  # the terminal's own list
        follow = _say(child, "and can they carry them over?")
        assert "carry over" in follow and "retrieval query" in follow
        listed = _sources(_say(child, "/sources"))
        assert listed and listed[0].endswith("] leave.md · chunk 0")
        assert re.search(r"Verification: (\d+)/\1 sentences supported", _say(child, "/verify"))
        child.sendeof()  # Ctrl-D leaves
        child.expect(pexpect.EOF)
    finally:
        child.close()
        srv.stop()
    assert child.exitstatus == 0


def test_an_unreachable_server_ends_the_chat_before_the_first_question():
    child = _spawn("--target", f"http://127.0.0.1:{free_port()}", MICRORAG_API_KEY="mrg_x_SECRET")
    child.expect(pexpect.EOF)
    child.close()
    printed = _plain(child.before)
    assert child.exitstatus == 3 and "microrag: error: cannot reach" in printed and "SECRET" not in printed
    assert "Traceback" not in printed


# ---------------------------------------------------------------- the session, in process


class _Scripted(Backend):
    """Answers from a list; an exception in the list is raised instead."""

    def __init__(self, *replies: Reply | Exception) -> None:
        self.replies, self.seen = list(replies), []

    def answer(self, turns: list[Turn], on_piece) -> Reply:
        self.seen.append(list(turns))
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        on_piece(reply.text)
        return reply

    def verify(self, turns: list[Turn], last: Reply) -> dict:
        return {"summary": "1/1 sentences supported", "text": "Checked.", "sentences": []}


def test_a_failed_turn_is_reported_and_forgotten(capsys):
    backend = _Scripted(MicroRAGError("the server says: rate limit exceeded; slow down (HTTP 429)"),
                        Reply("Twenty days.", [], refused=False))
    lines = iter(["first?", "second?", "/verify", "/quit", "never read"])
    Session(backend).run(lambda prompt: next(lines))
    out, err = capsys.readouterr()
    assert err == "microrag: error: the server says: rate limit exceeded; slow down (HTTP 429)\n"
    assert backend.seen[1] == [Turn("user", "second?")]  # the failed question is not in the history
    assert "Twenty days.\n" in out and "Verification: 1/1 sentences supported" in out
    assert "Answer as verified:\nChecked." in out  # the text the check left differs from what was shown


def test_sources_list_citations_with_pages_and_scores(capsys):
    from microrag_engine.types import Chunk

    hit = Hit(Chunk("manual.pdf#3", "manual.pdf", 3, 0, 10, "Torque the bolts to 40 Nm.", page=7), 0.91, 0.8, 0.95, 3.2, 0.71)
    session = Session(_Scripted(Reply("Use 40 Nm. [source: manual.pdf · chunk 3 · p. 7]", [hit], refused=False)))
    lines = iter(["how tight?", "/sources", "/quit"])
    session.run(lambda prompt: next(lines))
    out = capsys.readouterr().out
    assert "Use 40 Nm. [1]\n" in out and "  1. manual.pdf · chunk 3 · p. 7\n" in out
    assert "[1] [0.910 kw=0.80 em=0.95] manual.pdf · chunk 3 · p. 7\n  Torque the bolts to 40 Nm." in out
    assert "(1 source retrieved: /sources" in out


def test_a_long_remote_chat_sends_its_recent_end():
    from microrag_engine.cli.chat import SENT_CHARS, SENT_MESSAGES, RemoteChat
    from microrag_engine.client import ChatChunk

    class Recording:
        def chat(self, messages, stream=False, **knobs):
            self.sent, self.knobs = messages, knobs
            return iter([ChatChunk("ok"), ChatChunk("", "stop", {"sources": [], "flags": [], "refused": False})])

    client = Recording()
    turns = [Turn("user" if i % 2 == 0 else "assistant", "x" * (SENT_CHARS + 5)) for i in range(120)] + [Turn("user", "last?")]
    reply = RemoteChat(client, {"top_k": 3}).answer(turns, lambda piece: None)  # type: ignore[arg-type]
    assert reply.text == "ok" and len(client.sent) == SENT_MESSAGES and client.sent[-1] == Turn("user", "last?")
    assert max(len(t.content) for t in client.sent) == SENT_CHARS  # the server's limits, kept
    assert client.knobs == {"top_k": 3, "citations": False}  # the terminal lists sources itself


def test_an_answer_and_its_sources_reach_the_terminal_without_control_sequences(capsys):
    from microrag_engine.types import Chunk

    hit = Hit(Chunk("x\x1b[2J.md#0", "x\x1b[2J.md", 0, 0, 10, "# T\x1b]0;owned\x07\n\nbody"), 0.9, 0.8, 0.9, 3.0, 0.7)
    reply = Reply("Clear \x1b[2Jthe screen\x9b. [source: x\x1b[2J.md · chunk 0]", [hit], refused=False)
    lines = iter(["q?", "/sources", "/quit"])
    Session(_Scripted(reply)).run(lambda prompt: next(lines))
    out = capsys.readouterr().out
    assert "Clear [2Jthe screen. [1]" in out and not [c for c in out if ord(c) < 32 and c not in "\n\t" or 0x7F <= ord(c) < 0xA0]
