"""The MCP server (server/mcp.py, cli/mcp.py) through the official SDK's own client, over both
transports: streamable HTTP at /mcp of a real server on a real socket, and stdio to a
`microrag mcp` subprocess. Every call is scoped by the caller's key as /query is."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

pytest.importorskip("fastapi", reason="server extra not installed")
pytest.importorskip("mcp", reason="mcp extra not installed")

import httpx2  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402
from mcp.types import CallToolResult  # noqa: E402

from conftest import ROOT, needs_models, run_cli  # noqa: E402
from helpers.server import Running  # noqa: E402
from microrag_engine.config import preset  # noqa: E402
from microrag_engine.server.app import ServerConfig, create_app  # noqa: E402
from microrag_engine.server.auth import KeyStore  # noqa: E402
from microrag_engine.server.state import ServerState  # noqa: E402
from microrag_engine.store import open_store  # noqa: E402

pytestmark = needs_models

SALARY = "what does the L5 salary band pay?"
VACATION = "How many vacation days do employees get?"
REFUSED = "no chunk or document with that id that this API key may read"
LOCAL = "http://127.0.0.1"  # a Host the server allows
TOOLS = {"search", "fetch", "answer", "list_collections"}


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mcp")


@pytest.fixture(scope="module")
def srv(home):
    # Many calls share this server inside one minute: its per-key limit is the limiter's tests' business.
    s = Running(home, rate_per_minute=100_000)
    yield s
    s.stop()


@asynccontextmanager
async def over_http(srv: Running, who: str | None = None, key: str | None = None, x_api_key: bool = False) -> AsyncIterator[Client]:
    """The SDK's client on /mcp, sending ``who``'s key (or ``key``) as a bearer token (or as X-API-Key)."""
    key = key or (srv.key[who] if who else None)
    headers = ({"X-API-Key": key} if x_api_key else {"Authorization": f"Bearer {key}"}) if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
            Client(streamable_http_client(srv.url + "/mcp", http_client=http)) as client:
        yield client


def http(srv: Running, who: str | None, session: Callable[[Client], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with over_http(srv, who) as client:
            return await session(client)
    return anyio.run(main)


async def call(client: Client, tool: str, **arguments: Any) -> dict:
    """A tool call that must succeed: its structured result (the text content says the same)."""
    r = await client.call_tool(tool, arguments)
    assert not r.is_error, r.content
    assert r.structured_content is not None and json.loads(r.content[0].text) == r.structured_content
    return r.structured_content


def error_of(r: CallToolResult) -> str:
    assert r.is_error and r.structured_content is None
    return r.content[0].text


def docs(hits: list[dict]) -> set[str]:
    return {h["doc"] for h in hits}


# ---------------------------------------------------------------- streamable HTTP


def test_tools_are_listed_with_their_schemas(srv):
    tools = {t.name: t for t in http(srv, "reader", lambda c: c.list_tools()).tools}
    assert set(tools) == TOOLS
    search = tools["search"].input_schema
    assert search["required"] == ["query"] and {"query", "top_k", "where", "exclude"} == set(search["properties"])
    assert "verify" in tools["answer"].input_schema["properties"]
    assert tools["fetch"].input_schema["required"] == ["id"]
    assert tools["list_collections"].input_schema["properties"] == {}
    for t in tools.values():
        assert t.description and t.output_schema and t.annotations and t.annotations.read_only_hint
    assert {"hits", "refused"} <= set(tools["search"].output_schema["properties"])


def test_search_cites_and_keeps_to_the_keys_clearance(srv):
    async def session(client: Client) -> tuple[dict, dict]:
        return await call(client, "search", query=SALARY), await call(client, "search", query=VACATION, top_k=1)

    reader, vacation = http(srv, "reader", session)
    admin, _ = http(srv, "admin", session)
    assert "salaries.md" not in docs(reader["hits"]) and "salaries.md" in docs(admin["hits"])
    assert "180000" not in json.dumps(reader)
    top = vacation["hits"]
    assert len(top) == 1 and top[0]["id"] == "leave.md#0" and top[0]["citation"] == "[source: leave.md · chunk 0]"
    assert {"hybrid", "kw", "em", "raw_kw", "raw_em", "label", "text"} <= set(top[0]) and not vacation["refused"]
    anonymous = http(srv, None, lambda c: call(c, "search", query=SALARY))
    assert "salaries.md" not in docs(anonymous["hits"])


def test_where_and_exclude_narrow_the_search(srv):
    q = "what does the L5 salary band pay and how many vacation days?"

    async def session(client: Client) -> list[dict]:
        return [await call(client, "search", query=q, where={"path": "leave*"}),
                await call(client, "search", query=q, exclude={"title": "*salary*"}),
                await call(client, "search", query=q, where={"path": "salaries.md"}),
                await call(client, "search", query=q, where={"path": "nope.md"})]

    only_leave, no_salaries, _, _ = http(srv, "admin", session)
    assert docs(only_leave["hits"]) == {"leave.md"}
    assert no_salaries["hits"] and "salaries.md" not in docs(no_salaries["hits"])
    _, _, hidden, absent = http(srv, "reader", session)  # a filter on a hidden document says what one on nothing says
    assert hidden == absent and hidden["hits"] == [] and hidden["refused"]
    bad = http(srv, "admin", lambda c: c.call_tool("search", {"query": q, "where": {"bad field!": "x"}}))
    assert "where" in error_of(bad)


def test_fetch_reads_within_clearance_only(srv):
    async def session(client: Client) -> dict[str, CallToolResult]:
        return {i: await client.call_tool("fetch", {"id": i}) for i in ("leave.md#0", "leave.md", "salaries.md#0",
                                                                         "salaries.md", "nope.md#0", "leave.md#9")}

    reader = http(srv, "reader", session)
    chunk = reader["leave.md#0"].structured_content
    assert chunk["doc"] == "leave.md" and chunk["chunk"] == 0 and "20 vacation days" in chunk["text"]
    assert chunk["citation"] == "[source: leave.md · chunk 0]" and chunk["label"] == "public"
    whole = reader["leave.md"].structured_content
    assert whole["chunk"] is None and whole["chunks"] == 1 and "carry over" in whole["text"] and not whole["truncated"]
    # A restricted chunk is refused in the words an id that does not exist gets: fetch is no existence oracle.
    refusals = {i: error_of(reader[i]) for i in ("salaries.md#0", "salaries.md", "nope.md#0", "leave.md#9")}
    assert len(set(refusals.values())) == 1 and REFUSED in refusals["salaries.md#0"]
    assert "180000" not in json.dumps([r.model_dump() for r in reader.values()])
    admin = http(srv, "admin", session)
    assert "180000" in admin["salaries.md#0"].structured_content["text"]
    assert admin["salaries.md"].structured_content["label"] == "restricted"


def test_answer_is_cited_and_verified(srv):
    out = http(srv, "reader", lambda c: call(c, "answer", query=VACATION))
    assert not out["refused"] and out["mode"] == "extractive"
    assert out["reason"] == ""
    odd = http(srv, "reader", lambda c: call(c, "answer", query="How many vacation days does the kubernetes operator rotate?"))
    assert odd["refused"] and odd["reason"] and odd["answer"].startswith("The indexed documents don't cover that.")
    # Numbered for whoever reads it, the list naming what [1] is; every hit stays in "sources".
    assert "[1]" in out["answer"] and "[source:" not in out["answer"] and "\nSources:\n\n1. Leave — `leave.md · chunk 0`" in out["answer"]
    assert out["cited"][0] == {"n": 1, "doc": "leave.md", "chunk": 0, "page": 0, "title": "Leave", "section": ""}
    assert out["sources"][0]["doc"] == "leave.md"
    v = out["verification"]
    assert "[source: leave.md · chunk 0]" in v["text"] and v["sentences"] and v["sentences"][0]["verdict"] == "entailed"
    unverified = http(srv, "reader", lambda c: call(c, "answer", query=VACATION, verify=False))
    assert unverified["verification"] is None
    refused = http(srv, "reader", lambda c: call(c, "answer", query=SALARY))
    assert "180000" not in json.dumps(refused) and "salaries.md" not in docs(refused["sources"])


def test_list_collections_counts_what_the_key_may_read(srv):
    async def as_admin() -> dict:
        async with over_http(srv, "admin", x_api_key=True) as client:
            return await call(client, "list_collections")

    reader = http(srv, "reader", lambda c: call(c, "list_collections"))
    admin = anyio.run(as_admin)
    assert reader == {"collections": [{"name": "", "documents": 3, "chunks": 3}], "documents": 3, "chunks": 3}
    assert admin["documents"] == 4 and admin["collections"][0]["documents"] == 4


def test_the_stateless_endpoint_answers_get_with_405_and_holds_nothing_open(srv):
    """#33: GET /mcp was a 200 event stream that never closed, for anyone; stateless JSON has no stream."""
    for who in (None, "reader"):
        headers = {"Authorization": f"Bearer {srv.key[who]}"} if who else {}
        with httpx.stream("GET", srv.url + "/mcp", headers={**headers, "Accept": "text/event-stream"}, timeout=10) as r:
            body = r.read()
        assert r.status_code == 405 and r.headers["allow"] == "POST" and b"POST" in body
    assert httpx.delete(srv.url + "/mcp", timeout=10).status_code == 405


def test_a_wrong_key_is_refused(srv):
    async def main() -> None:
        async with over_http(srv, key="mrg_deadbeef_wrong") as client:
            await client.list_tools()

    with pytest.raises(BaseExceptionGroup) as caught:  # the client's task group carries the server's refusal
        anyio.run(main)
    assert caught.group_contains(MCPError, match="invalid or revoked API key")
    r = httpx.post(srv.url + "/mcp", headers={"Authorization": "Bearer mrg_deadbeef_wrong", "Accept": "application/json"},
                   json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert r.json()["error"]["message"] == "invalid or revoked API key"  # a JSON-RPC error: what MCP clients show
    # a page of another origin may not call it either (the MCP spec: servers check Origin)
    r = httpx.post(srv.url + "/mcp", headers={"Origin": "http://evil.example", "Accept": "application/json"},
                   json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30)
    assert r.status_code == 403


def test_every_call_leaves_an_audit_row(srv):
    async def session(client: Client) -> None:
        await call(client, "search", query="which port does the VPN use?")
        await call(client, "answer", query="who approves production deploys?")
        await call(client, "fetch", id="vpn.md#0")
        await client.call_tool("fetch", {"id": "salaries.md"})
        await call(client, "list_collections")

    http(srv, "contrib", session)
    rows = srv.call("GET", "/audit", "admin", params={"principal_name": srv.names["contrib"]}).json()
    seen = {(r["action"], r["query"], r["decision"]) for r in rows}
    assert ("search", "which port does the VPN use?", "retrieved") in seen
    assert ("answer", "who approves production deploys?", "answered") in seen
    assert {("fetch", "vpn.md#0", "fetched"), ("fetch", "salaries.md", "refused"), ("list_collections", "", "listed")} <= seen
    fetched = next(r for r in rows if r["action"] == "fetch" and r["decision"] == "fetched")
    assert fetched["hits"] == [{"id": "vpn.md#0", "chunks": 1}]


# ---------------------------------------------------------------- stdio


def microrag_mcp(index: Path, *args: str, key: str | None = None) -> StdioServerParameters:
    """`microrag mcp` as an MCP client launches it; the key in its environment, as a client config passes it."""
    exe = Path(sys.executable).with_name("microrag")
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "microrag_engine.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "MICRORAG_API_KEY"))}
    env.update({"MICRORAG_API_KEY": key} if key else {})
    return StdioServerParameters(command=command[0], args=[*command[1:], "mcp", "--index", str(index), *args], env=env, cwd=ROOT)


def test_stdio_serves_each_key_its_own_clearance(srv, home):
    index = home / "ix"  # the HTTP server's index (SQLite: both processes read it)
    keys = KeyStore(index / "keys.sqlite")  # `microrag mcp` keeps keys and audit beside the index, as serve does
    reader, admin = keys.add("mcp-rita", "reader", ["public"]), keys.add("mcp-root", "admin", ["public", "restricted"])
    results: dict[str, dict] = {}

    async def session(name: str, params: StdioServerParameters) -> None:
        async with Client(params) as client:
            out: dict[str, Any] = {"tools": {t.name for t in (await client.list_tools()).tools}}
            out["search"] = await call(client, "search", query=SALARY)
            out["fetch"] = await client.call_tool("fetch", {"id": "salaries.md#0"})
            out["answer"] = await call(client, "answer", query=VACATION)
            out["collections"] = await call(client, "list_collections")
            results[name] = out

    async def main() -> None:
        async with anyio.create_task_group() as tg:  # three processes at once: each loads the model
            tg.start_soon(session, "reader", microrag_mcp(index, key=reader))
            tg.start_soon(session, "admin", microrag_mcp(index, "--key", admin))
            tg.start_soon(session, "anonymous", microrag_mcp(index))

    anyio.run(main)
    for name in ("reader", "anonymous"):
        out = results[name]
        assert out["tools"] == TOOLS and "salaries.md" not in docs(out["search"]["hits"])
        assert REFUSED in error_of(out["fetch"]) and out["collections"]["documents"] == 3
        said = out["answer"]
        assert "[1]" in said["answer"] and said["cited"][0]["doc"] == "leave.md" and said["verification"]["sentences"]
    admin_out = results["admin"]
    assert "salaries.md" in docs(admin_out["search"]["hits"]) and "180000" in admin_out["fetch"].structured_content["text"]
    trail = ServerState(index / "server.sqlite").trail(200)
    rita = {(r["action"], r["decision"]) for r in trail if r["principal"] == "mcp-rita"}
    assert {a for a, _ in rita} == TOOLS and ("fetch", "refused") in rita and ("answer", "answered") in rita
    assert any(r["principal"] == "anonymous" and r["action"] == "search" for r in trail)


def test_stdio_refuses_a_bad_start_in_one_line(srv, home):
    index = str(home / "ix")
    wrong = run_cli("mcp", "--index", index, "--key", "mrg_deadbeef_wrong")
    assert wrong.returncode != 0 and "Traceback" not in wrong.stderr
    assert wrong.stderr.strip() == "microrag: error: invalid or revoked API key (--key or $MICRORAG_API_KEY); see: microrag keys list"
    nobody = run_cli("mcp", "--index", index, "--no-anonymous")
    assert nobody.returncode != 0 and "--key" in nobody.stderr and "Traceback" not in nobody.stderr
    nowhere = run_cli("mcp", "--index", str(home / "no-such-index"))
    assert nowhere.returncode != 0 and "no index at" in nowhere.stderr and not (home / "no-such-index").exists()


def test_without_the_mcp_extra(tmp_path, home, monkeypatch):
    """The command says which extra in one line (no SDK, or the 1.x one); the server runs, without /mcp."""
    boot = tmp_path / "sitecustomize.py"
    for hidden in ("mcp", "mcp.server.mcpserver"):
        boot.write_text(f"import sys\nsys.modules[{hidden!r}] = None\n")
        proc = run_cli("mcp", "--index", str(home / "ix"), env={"PYTHONPATH": str(tmp_path)})
        assert proc.returncode != 0 and "Traceback" not in proc.stderr
        assert "pip install -U 'microrag-engine[mcp,server]'" in proc.stderr
    script = ("import sys; sys.modules['mcp'] = None\n"
              "from microrag_engine.server.app import create_app\n"
              "from microrag_engine.server.mcp import build\n")
    blocked = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert blocked.returncode != 0 and "server.mcp" in blocked.stderr  # only this module needs the SDK
    cfg = ServerConfig(store=open_store(home / "ix"), settings=preset("default"), keys=KeyStore(tmp_path / "keys.sqlite"),
                       state=ServerState(tmp_path / "server.sqlite"))
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    # With the extra, /mcp is there (and says so until the app's lifespan has started it) ...
    assert TestClient(create_app(cfg), base_url=LOCAL).post("/mcp", json=body).status_code == 503
    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mcp" else find(name, *a))
    bare = TestClient(create_app(cfg), base_url=LOCAL)  # ... without it, not: the rest of the server is unchanged
    assert bare.post("/mcp", json=body).status_code == 404 and bare.post("/search", json={"query": "vpn"}).status_code == 200


def test_mcp_requests_spend_the_keys_rate_limit(tmp_path):
    s = Running(tmp_path, rate_per_minute=3)
    try:
        def post(key: str) -> httpx.Response:
            return httpx.post(s.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30,
                              headers={"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"})

        codes = [post(s.key["reader"]).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        assert post(s.key["reader"]).json()["error"]["message"] == "rate limit exceeded; slow down"
        assert [post(f"mrg_deadbeef_guess{i}").status_code for i in range(11)][-1] == 429  # wrong keys: throttled
    finally:
        s.stop()


@pytest.mark.skipif(not os.environ.get("MICRORAG_TEST_PG"), reason="set MICRORAG_TEST_PG (make test starts a server)")
def test_mcp_on_postgres_fetches_from_the_database(tmp_path):
    """Retrieval runs in the database there and this process holds no chunks: fetch reads the store."""
    import random

    loc = f"{os.environ['MICRORAG_TEST_PG']}?schema=mcp_{os.getpid()}_{random.randrange(10**9)}"
    s = Running(tmp_path, location=loc)
    try:
        async def session(client: Client) -> tuple[dict, dict, CallToolResult]:
            return (await call(client, "search", query=VACATION), await call(client, "fetch", id="leave.md"),
                    await client.call_tool("fetch", {"id": "salaries.md#0"}))

        found, leave, hidden = http(s, "reader", session)
        assert found["hits"][0]["doc"] == "leave.md" and "20 vacation days" in leave["text"]
        assert REFUSED in error_of(hidden)
    finally:
        s.stop()
        store = open_store(loc)
        store.drop()
        store.close()
