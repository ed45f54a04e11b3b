"""client.Client against a real server on a real socket: every route it maps, streams, and errors."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="server extra not installed")

from conftest import needs_models  # noqa: E402
from helpers.llm import status  # noqa: E402
from helpers.net import free_port  # noqa: E402
from helpers.server import Running  # noqa: E402
from microrag_engine.client import (  # noqa: E402
    AuthError,
    ChatChunk,
    Client,
    Delta,
    Done,
    ServerError,
    Sources,
    UnreachableError,
    to_hit,
)
from microrag_engine.errors import MicroRAGError  # noqa: E402
from microrag_engine.types import Turn  # noqa: E402

pytestmark = needs_models

VACATION = "How many vacation days do employees get?"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Running(tmp_path_factory.mktemp("client"), rate_per_minute=100_000)
    yield s
    s.stop()


@pytest.fixture
def reader(srv):
    with Client(srv.url, api_key=srv.key["reader"]) as c:
        yield c


# ---------------------------------------------------------------- asking


def test_search_returns_ranked_hits_within_the_key_clearance(srv, reader):
    found = reader.search(VACATION, top_k=2)
    assert set(found) == {"hits", "refused", "reason", "capped", "flags"}
    assert not found["refused"] and len(found["hits"]) <= 2 and found["hits"][0]["doc"] == "leave.md"
    hit = to_hit(found["hits"][0])  # prints like a local hit
    assert hit.chunk.id == "leave.md#0" and hit.hybrid == found["hits"][0]["hybrid"]
    assert reader.search("What is the capital of France?")["refused"]
    salary = "what does the L5 salary band pay?"
    assert all(h["doc"] != "salaries.md" for h in reader.search(salary)["hits"])
    with Client(srv.url, api_key=srv.key["admin"]) as admin:
        assert any(h["doc"] == "salaries.md" for h in admin.search(salary)["hits"])
        narrowed = admin.search(salary + " and vacation days?", where={"path": "leave*"})
        assert {h["doc"] for h in narrowed["hits"]} == {"leave.md"}
        assert "salaries.md" not in {h["doc"] for h in admin.search(salary, exclude={"title": "*salary*"})["hits"]}


def test_query_answers_with_sources_and_optional_verification(reader):
    out = reader.query(VACATION)
    assert "[source: leave.md · chunk 0]" in out["answer"] and out["mode"] == "extractive"
    assert out["sources"][0]["doc"] == "leave.md" and out["verification"]["supported"]
    assert reader.query(VACATION, verify=False)["verification"] is None


def test_stream_yields_sources_then_pieces_then_done(reader):
    events = list(reader.stream(VACATION, verify=True))
    assert isinstance(events[0], Sources) and events[0].sources[0]["doc"] == "leave.md" and not events[0].refused
    assert isinstance(events[-1], Done) and events[-1].mode == "extractive" and events[-1].verification["sentences"]
    pieces = [e.text for e in events if isinstance(e, Delta)]
    assert len(pieces) > 3 and "".join(pieces) == reader.query(VACATION)["answer"]
    refused = list(reader.stream("What is the capital of France?"))
    assert refused[0].refused and isinstance(refused[-1], Done)


def test_an_answer_step_failing_mid_stream_raises(tmp_path, llm_server):
    """The sources left with a 200; the model then failed: an in-band error, raised, never a silent end."""
    llm_server.script(status(500, '{"error": "boom"}'))
    s = Running(tmp_path, llm=llm_server.cfg(max_retries=0))
    try:
        with Client(s.url) as c:
            seen = []
            with pytest.raises(ServerError, match="language model is unavailable") as err:
                seen.extend(c.stream(VACATION))
            assert [type(e) for e in seen] == [Sources] and err.value.status == 502 and err.value.exit_code == 3
    finally:
        s.stop()


# ---------------------------------------------------------------- the OpenAI route


def test_chat_answers_a_conversation_with_the_microrag_block(reader):
    turns = [Turn("user", VACATION)]
    first = reader.chat(turns, citations=False)
    assert first["object"] == "chat.completion" and first["choices"][0]["finish_reason"] == "stop"
    text = first["choices"][0]["message"]["content"]
    assert "leave.md" in text and "Sources:" not in text
    ext = first["microrag"]
    assert ext["sources"][0]["doc"] == "leave.md" and not ext["refused"] and ext["retrieval_query"] == VACATION
    follow = [*turns, Turn("assistant", text), {"role": "user", "content": "and can they carry them over?"}]
    second = reader.chat(follow, top_k=2)
    assert "Sources:\n\n1. Leave — `leave.md · chunk 0`" in second["choices"][0]["message"]["content"]
    assert second["microrag"]["retrieval_query"].startswith(VACATION)  # the follow-up was condensed
    assert any(f.startswith("conversation: retrieval query") for f in second["microrag"]["flags"])


def test_chat_streams_chunks_ending_with_the_microrag_block(reader):
    chunks = list(reader.chat([Turn("user", VACATION)], stream=True, verify=True))
    assert all(isinstance(c, ChatChunk) for c in chunks)
    text = "".join(c.delta for c in chunks)
    assert "20 vacation days" in text and "\n\nSources:\n\n1. Leave — `leave.md · chunk 0`" in text  # the citations block
    last = chunks[-1]
    assert last.finish_reason == "stop" and last.microrag is not None
    assert last.microrag["sources"][0]["doc"] == "leave.md" and last.microrag["verification"]["supported"]
    assert all(c.microrag is None for c in chunks[:-1])


def test_chat_errors_in_openai_shape_become_one_line(reader):
    with pytest.raises(ServerError, match=r"invalid request: .*top_k.* \(HTTP 400\)"):
        reader.chat([Turn("user", VACATION)], top_k=0)
    with pytest.raises(ServerError, match="last message must have role 'user'"):
        list(reader.chat([Turn("assistant", "hello")], stream=True))


# ---------------------------------------------------------------- documents


def test_an_upload_waits_for_review_then_goes_live_and_is_deleted(srv):
    contrib, admin = Client(srv.url, api_key=srv.key["contrib"]), Client(srv.url, api_key=srv.key["admin"])
    with contrib, admin:
        up = contrib.ingest("notes/canteen.md", "# Canteen\n\nThe canteen serves lunch from noon until 2pm.")
        assert up["status"] == "quarantined" and up["doc"] == f"@{srv.names['contrib']}/notes/canteen.md"
        question = "when does the canteen serve lunch?"
        assert all(h["doc"] != up["doc"] for h in admin.search(question)["hits"])  # not before review
        queued = next(q for q in admin.review() if q["doc"] == up["doc"])
        assert "noon" in queued["preview"]
        assert admin.approve(up["doc"], queued["version"]) == {"doc": up["doc"], "decision": "approve"}
        assert admin.search(question)["hits"][0]["doc"] == up["doc"]
        assert up["doc"] in {d["doc"] for d in contrib.documents()}
        assert contrib.delete(up["doc"]) == {"deleted": up["doc"]}
        assert up["doc"] not in {d["doc"] for d in admin.documents()}
        rejected = contrib.ingest("notes/spam.md", "# Spam\n\nBuy now.")
        assert admin.reject(rejected["doc"])["decision"] == "reject"


def test_a_file_uploads_under_its_name_and_binary_files_are_refused(srv, tmp_path):
    note = tmp_path / "parking.md"
    note.write_text("# Parking\n\nVisitor parking is on level -2 of the garage.")
    pdf = tmp_path / "scan.pdf"
    pdf.write_bytes(b"%PDF-1.7\n\xff\xfe\x00binary")
    with Client(srv.url, api_key=srv.key["trusted"]) as trusted:
        up = trusted.ingest(note, label="public")
        assert up["status"] == "live" and up["doc"] == f"@{srv.names['trusted']}/parking.md"
        with pytest.raises(MicroRAGError, match="not UTF-8 text"):
            trusted.ingest(pdf)
        with pytest.raises(MicroRAGError, match="cannot read"):
            trusted.ingest(tmp_path / "absent.md")
        trusted.delete(up["doc"])


# ---------------------------------------------------------------- errors


def test_http_errors_carry_the_servers_message_and_status(srv, reader):
    with pytest.raises(AuthError) as err:
        reader.ingest("x.md", "hello")
    assert err.value.status == 403 and err.value.message == "this needs the contributor role"
    assert str(err.value) == "the server says: this needs the contributor role (HTTP 403)" and err.value.exit_code == 2
    with pytest.raises(ServerError, match=r"top_k.*\(HTTP 422\)"):
        reader.search("x", top_k=0)
    with Client(srv.url) as anonymous, pytest.raises(AuthError, match="needs an API key"):
        anonymous.review()


def test_the_key_never_shows_in_errors_or_repr(srv):
    secret = "mrg_deadbeef_not-a-real-key-SECRET"
    client = Client(srv.url, api_key=secret)
    assert secret not in repr(client) and "api_key=set" in repr(client)
    with client, pytest.raises(AuthError) as err:
        client.whoami()
    assert err.value.status == 401 and secret not in str(err.value) and "invalid or revoked" in str(err.value)
    assert "api_key=none" in repr(Client(srv.url))
    with Client(srv.url, api_key=srv.key["reader"] + "\n") as padded:  # a key read from a file: its newline goes
        assert padded.whoami()["role"] == "reader"
    for bad in (secret + "\nX", secret + " x", secret + "é"):
        with pytest.raises(MicroRAGError) as err:
            Client(srv.url, api_key=bad)
        assert secret not in str(err.value) and "printable ASCII" in str(err.value)


def test_an_unreachable_server_is_one_clear_line():
    url = f"http://127.0.0.1:{free_port()}"
    with Client(url, api_key="mrg_x_SECRET") as c:
        with pytest.raises(UnreachableError) as err:
            c.health()
        with pytest.raises(UnreachableError):
            list(c.stream("q"))
    assert str(err.value) == f"cannot reach {url}: connection refused" and err.value.exit_code == 3
    assert "SECRET" not in str(err.value)
    with pytest.raises(MicroRAGError, match="must start with http"):
        Client("localhost:8000")
    with pytest.raises(UnreachableError) as err, Client("http://user:pw@127.0.0.1:" + str(free_port())) as c:
        c.health()
    assert "pw" not in str(err.value)  # credentials in a URL are credentials too
