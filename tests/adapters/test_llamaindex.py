"""The LlamaIndex retriever: its retriever API (``retrieve`` with a string or a ``QueryBundle``,
``aretrieve``), a ``RetrieverQueryEngine`` with LlamaIndex's ``MockLLM`` and no network, both
modes (local index, real server), filters, clearance, refusal and the missing extra."""

from __future__ import annotations

import asyncio
import importlib
import socket
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_index.core", reason="llamaindex extra not installed")

# Imported here, before any test cuts the network: import-time probes (urllib3 opens an IPv6
# socket to see whether the host has IPv6) are not downloads.
from llama_index.core.llms import MockLLM  # noqa: E402
from llama_index.core.query_engine import RetrieverQueryEngine  # noqa: E402
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode  # noqa: E402

from conftest import needs_models  # noqa: E402
from microrag_engine.adapters.llamaindex import MicroRAGRetriever  # noqa: E402
from microrag_engine.adapters.search import METADATA_KEYS  # noqa: E402
from microrag_engine.client import Client  # noqa: E402
from microrag_engine.config import preset  # noqa: E402
from microrag_engine.engine import Engine, demo_corpus  # noqa: E402
from microrag_engine.errors import ConfigError  # noqa: E402
from microrag_engine.ingest import ingest_paths  # noqa: E402
from microrag_engine.store import open_store  # noqa: E402

pytestmark = needs_models

VPN = "how do I connect to the VPN?"
OFF_TOPIC = "What is the capital of France?"
SALARY = "what does the L5 salary band pay?"


@cache
def demo() -> Engine:
    return Engine.from_paths([demo_corpus()], preset("default"))


def ids(nodes: list[NodeWithScore]) -> list[tuple[str, float | None]]:
    return [(n.node.node_id, n.score) for n in nodes]


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every attempt to reach a network address fails, and is recorded: a library that swallows
    a failed download (NLTK does) would otherwise pass unseen."""
    tried: list[Any] = []
    real_connect = socket.socket.connect

    def connect(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            tried.append(address)
            raise OSError(f"offline test: no connection to {address}")
        real_connect(sock, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        tried.append(host)
        raise socket.gaierror(f"offline test: no lookup of {host}")

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return tried


# ---------------------------------------------------------------- local index


def test_retrieve_a_string_a_bundle_or_asynchronously() -> None:
    engine = demo()
    r = MicroRAGRetriever(engine=engine, k=3)
    nodes = r.retrieve(VPN)
    hits = engine.retrieve(VPN, safeguards=True, top_k=3).hits
    assert ids(nodes) == [(h.chunk.id, h.hybrid) for h in hits]
    assert ids(r.retrieve(QueryBundle(VPN))) == ids(nodes)
    assert ids(asyncio.run(r.aretrieve(VPN))) == ids(nodes)
    for n, h in zip(nodes, hits):
        assert isinstance(n.node, TextNode) and n.node.text == h.chunk.text
        assert n.node.ref_doc_id == h.chunk.doc
        assert set(n.node.metadata) == set(METADATA_KEYS)
        assert n.node.metadata["citation"] == f"[source: {h.chunk.doc} · chunk {h.chunk.index}]"
        assert n.node.metadata["hybrid"] == n.score and n.node.metadata["label"] == "public"


def test_a_model_reads_the_citation_not_the_scores() -> None:
    node = MicroRAGRetriever(engine=demo(), k=1).retrieve(VPN)[0].node
    llm_view = node.get_content(MetadataMode.LLM)
    assert llm_view.startswith("citation: [source: it/vpn-and-remote-access.md · chunk ")
    assert not any(f"{key}: " in llm_view for key in ("hybrid", "kw", "em", "label", "id"))
    assert node.get_content(MetadataMode.EMBED) == node.get_content(MetadataMode.NONE)


def test_filters_narrow_documents() -> None:
    only_hr = MicroRAGRetriever(engine=demo(), k=4, where={"path": "hr/*"}).retrieve("how many vacation days do I get?")
    assert only_hr and all(n.node.metadata["doc"].startswith("hr/") for n in only_hr)
    no_it = MicroRAGRetriever(engine=demo(), k=4, exclude={"path": "it/*"}).retrieve(VPN)
    assert no_it and not any(n.node.metadata["doc"].startswith("it/") for n in no_it)


def test_a_refused_question_returns_no_nodes() -> None:
    r = MicroRAGRetriever(engine=demo())
    assert r.retrieve(OFF_TOPIC) == [] and asyncio.run(r.aretrieve(OFF_TOPIC)) == []
    answer = RetrieverQueryEngine.from_args(r, llm=MockLLM()).query(OFF_TOPIC)
    assert str(answer) == "Empty Response" and answer.source_nodes == []  # the model is never asked


def test_a_query_engine_with_a_mock_llm_runs_offline(offline: list[Any]) -> None:
    r = MicroRAGRetriever(engine=demo(), k=2)
    engine = RetrieverQueryEngine.from_args(r, llm=MockLLM())  # MockLLM answers with the prompt it was given
    answer = engine.query(VPN)
    assert [n.node.node_id for n in answer.source_nodes] == [n.node.node_id for n in r.retrieve(VPN)]
    assert "citation: [source: it/vpn-and-remote-access.md · chunk" in str(answer)  # what the model was shown
    assert "hybrid: " not in str(answer)
    again = asyncio.run(engine.aquery(VPN))
    assert [n.node.node_id for n in again.source_nodes] == [n.node.node_id for n in answer.source_nodes]
    assert offline == []  # no tokenizer or NLTK download was attempted


@pytest.fixture(scope="module")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    """A persistent index with one restricted document (its front matter's label)."""
    tmp = tmp_path_factory.mktemp("labelled")
    corpus = tmp / "corpus"
    corpus.mkdir()
    (corpus / "leave.md").write_text("# Leave\n\nEmployees get 20 vacation days a year. Up to 5 unused days carry over.")
    (corpus / "salaries.md").write_text("---\nlabel: restricted\n---\n# Salary bands\n\nThe L5 salary band pays 180000 to 210000 dollars.")
    store = open_store(tmp / "ix")
    ingest_paths(store, [corpus], preset("default"), collection="")
    engine = Engine.from_store(store, preset("default"))
    store.close()  # from_store loaded everything into memory
    return engine


def test_labels_are_the_local_clearance(labelled: Engine) -> None:
    top = MicroRAGRetriever(engine=labelled).retrieve(SALARY)[0].node.metadata
    assert (top["doc"], top["label"]) == ("salaries.md", "restricted")
    public = MicroRAGRetriever(engine=labelled, labels=["public"]).retrieve(SALARY)
    assert all(n.node.metadata["doc"] != "salaries.md" for n in public)


def test_exactly_one_source_and_sane_knobs(labelled: Engine) -> None:
    client = Client("http://127.0.0.1:9")  # never contacted
    with pytest.raises(ConfigError, match="exactly one"):
        MicroRAGRetriever()
    with pytest.raises(ConfigError, match="exactly one"):
        MicroRAGRetriever(engine=labelled, client=client)
    with pytest.raises(ConfigError, match="API key decides"):
        MicroRAGRetriever(client=client, labels=["public"])
    with pytest.raises(ConfigError, match="at least 1"):
        MicroRAGRetriever(engine=labelled, k=0)


def test_without_llamaindex_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "llama_index" or m.startswith("llama_index.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "microrag_engine.adapters.llamaindex")
    with pytest.raises(ImportError, match=r"^microrag_engine\.adapters\.llamaindex needs LlamaIndex: "
                                          r"pip install 'microrag-engine\[llamaindex\]'$"):
        importlib.import_module("microrag_engine.adapters.llamaindex")


# ---------------------------------------------------------------- a real server


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real server (tests/helpers/server.py) on a loopback port, one key per role."""
    pytest.importorskip("fastapi", reason="server extra not installed")
    from helpers.server import Running

    # The per-key rate limit would make tests depend on their order and speed (as in tests/server).
    s = Running(Path(tmp_path_factory.mktemp("srv")), rate_per_minute=100_000)
    yield s
    s.stop()


def test_remote_clearance_comes_from_the_key(srv: Any) -> None:
    with Client(srv.url, api_key=srv.key["admin"]) as admin, Client(srv.url, api_key=srv.key["reader"]) as reader:
        top = MicroRAGRetriever(client=admin, k=2).retrieve(SALARY)[0]
        assert (top.node.metadata["doc"], top.node.metadata["label"]) == ("salaries.md", "restricted")
        assert top.node.metadata["citation"] == "[source: salaries.md · chunk 0]" and top.score == top.node.metadata["hybrid"]
        assert all(n.node.metadata["doc"] != "salaries.md" for n in MicroRAGRetriever(client=reader).retrieve(SALARY))
        assert MicroRAGRetriever(client=reader, where={"path": "salaries.md"}).retrieve(SALARY) == []


def test_remote_filters_refusal_and_async(srv: Any) -> None:
    with Client(srv.url, api_key=srv.key["admin"]) as admin:
        q = "what does the L5 salary band pay and how many vacation days?"
        only_leave = MicroRAGRetriever(client=admin, where={"path": "leave*"}).retrieve(q)
        assert {n.node.metadata["doc"] for n in only_leave} == {"leave.md"}
        r = MicroRAGRetriever(client=admin, k=2)
        assert len(r.retrieve(q)) == 2
        assert ids(asyncio.run(r.aretrieve(QueryBundle(q)))) == ids(r.retrieve(q))
        assert r.retrieve(OFF_TOPIC) == []
        answer = RetrieverQueryEngine.from_args(r, llm=MockLLM()).query("How many vacation days do employees get?")
        assert answer.source_nodes[0].node.metadata["doc"] == "leave.md"
        assert "citation: [source: leave.md · chunk 0]" in str(answer)
