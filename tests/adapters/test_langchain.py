"""The LangChain retriever: LangChain's own standard suite over a local index and over a real
server, then what the suite does not check: metadata, filters, clearance, refusal, errors."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core", reason="langchain extra not installed")
pytest.importorskip("langchain_tests", reason="dev extra not installed")

from langchain_tests.integration_tests import RetrieversIntegrationTests  # noqa: E402

from conftest import needs_models  # noqa: E402
from microrag_engine.adapters.langchain import MicroRAGRetriever  # noqa: E402
from microrag_engine.adapters.search import METADATA_KEYS  # noqa: E402
from microrag_engine.client import Client  # noqa: E402
from microrag_engine.config import preset  # noqa: E402
from microrag_engine.engine import Engine, demo_corpus  # noqa: E402
from microrag_engine.errors import ConfigError  # noqa: E402
from microrag_engine.ingest import ingest_paths  # noqa: E402
from microrag_engine.store import open_store  # noqa: E402

pytestmark = needs_models

VPN = "how do I connect to the VPN?"  # the demo handbook answers it from several documents
OFF_TOPIC = "What is the capital of France?"  # the grounding gate refuses it
SALARY = "what does the L5 salary band pay?"  # only restricted content answers it


@cache
def demo() -> Engine:
    """The bundled handbook indexed once per module (the standard suite's properties take no fixtures)."""
    return Engine.from_paths([demo_corpus()], preset("default"))


# ---------------------------------------------------------------- LangChain's standard suite


# The suite's one async test (test_ainvoke_returns_documents) runs only under the asyncio mark in
# pytest-asyncio's strict mode; the mark cannot go on that inherited test alone without overriding it.
@pytest.mark.asyncio
@pytest.mark.filterwarnings("ignore:The test <Function .*> is marked with '@pytest.mark.asyncio':pytest.PytestWarning")
class TestLocalStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[MicroRAGRetriever]:
        return MicroRAGRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"engine": demo()}

    @property
    def retriever_query_example(self) -> str:
        return VPN


@pytest.fixture(scope="module")
def srv_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("srv")


@pytest.fixture(scope="module")
def srv(srv_dir: Path) -> Iterator[Any]:
    """A real server (tests/helpers/server.py) on a loopback port, its index in ``srv_dir / "ix"``."""
    pytest.importorskip("fastapi", reason="server extra not installed")
    from helpers.server import Running

    # The per-key rate limit would make tests depend on their order and speed (as in tests/server).
    s = Running(srv_dir, rate_per_minute=100_000)
    yield s
    s.stop()


@pytest.mark.asyncio
@pytest.mark.filterwarnings("ignore:The test <Function .*> is marked with '@pytest.mark.asyncio':pytest.PytestWarning")
class TestRemoteStandard(RetrieversIntegrationTests):
    client: Client | None = None

    @pytest.fixture(autouse=True)
    def _server(self, srv: Any) -> Iterator[None]:
        # The suite builds retrievers from properties, not fixtures: hand them the running server here.
        client = type(self).client = Client(srv.url, api_key=srv.key["admin"])
        yield
        client.close()

    @property
    def retriever_constructor(self) -> type[MicroRAGRetriever]:
        return MicroRAGRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"client": self.client}

    @property
    def retriever_query_example(self) -> str:
        return "How many vacation days do employees get?"


# ---------------------------------------------------------------- local index


def test_documents_carry_text_ids_scores_and_citations() -> None:
    engine = demo()
    docs = MicroRAGRetriever(engine=engine, k=3).invoke(VPN)
    hits = engine.retrieve(VPN, safeguards=True, top_k=3).hits
    assert [d.id for d in docs] == [h.chunk.id for h in hits]
    for d, h in zip(docs, hits):
        m = d.metadata
        assert set(m) == set(METADATA_KEYS)
        assert d.page_content == h.chunk.text
        assert (m["source"], m["doc"], m["chunk"], m["id"], m["page"]) == (h.chunk.doc, h.chunk.doc, h.chunk.index, h.chunk.id, 0)
        assert (m["hybrid"], m["kw"], m["em"]) == (h.hybrid, h.kw, h.em)
        assert m["citation"] == f"[source: {h.chunk.doc} · chunk {h.chunk.index}]"
        assert m["label"] == "public"
    assert docs[0].metadata["doc"] == "it/vpn-and-remote-access.md"
    assert [d.metadata["hybrid"] for d in docs] == sorted((d.metadata["hybrid"] for d in docs), reverse=True)


def test_filters_narrow_documents_and_calls_override_them() -> None:
    r = MicroRAGRetriever(engine=demo(), k=4, where={"path": "hr/*"})
    assert {d.metadata["doc"].split("/")[0] for d in r.invoke("how many vacation days do I get?")} == {"hr"}
    # per call: invoke()'s keyword arguments replace the retriever's own
    assert {d.metadata["doc"] for d in r.invoke(VPN, where={"path": "it/*"}, k=1)} == {"it/vpn-and-remote-access.md"}
    unfiltered = MicroRAGRetriever(engine=demo(), k=4, exclude={"path": "it/*"})
    assert not any(d.metadata["doc"].startswith("it/") for d in unfiltered.invoke(VPN))
    assert MicroRAGRetriever(engine=demo(), where={"path": "nothing/*"}).invoke(VPN) == []


def test_a_refused_question_returns_no_documents(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="microrag"):
        assert MicroRAGRetriever(engine=demo()).invoke(OFF_TOPIC) == []
    assert "refused" in caplog.text and "min_em" in caplog.text  # the gate's reason, for whoever debugs a chain


@pytest.mark.asyncio
async def test_ainvoke_matches_invoke() -> None:
    r = MicroRAGRetriever(engine=demo(), k=2)
    assert await r.ainvoke(VPN) == r.invoke(VPN)
    assert await r.ainvoke(VPN, k=1, where={"path": "hr/*"}) == r.invoke(VPN, k=1, where={"path": "hr/*"})
    assert await r.ainvoke(OFF_TOPIC) == []


@pytest.fixture(scope="module")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    """A persistent index with one restricted document (its front matter's label)."""
    tmp = tmp_path_factory.mktemp("labelled")
    corpus = tmp / "corpus"
    corpus.mkdir()
    (corpus / "leave.md").write_text("# Leave\n\nEmployees get 20 vacation days a year. Up to 5 unused days carry over.")
    (corpus / "vpn.md").write_text("# VPN\n\nThe corporate VPN uses WireGuard on UDP port 51820.")
    (corpus / "salaries.md").write_text("---\nlabel: restricted\n---\n# Salary bands\n\nThe L5 salary band pays 180000 to 210000 dollars.")
    store = open_store(tmp / "ix")
    ingest_paths(store, [corpus], preset("default"), collection="")  # ids without the folder name, as the server test has
    engine = Engine.from_store(store, preset("default"))
    store.close()  # from_store loaded everything into memory
    return engine


def test_labels_are_the_local_clearance(labelled: Engine) -> None:
    everyone = MicroRAGRetriever(engine=labelled).invoke(SALARY)
    assert everyone[0].metadata["doc"] == "salaries.md" and everyone[0].metadata["label"] == "restricted"
    public = MicroRAGRetriever(engine=labelled, labels=["public"])
    assert all(d.metadata["doc"] != "salaries.md" for d in public.invoke(SALARY))
    assert all(d.metadata["label"] == "public" for d in public.invoke("vacation days and the VPN port"))
    # a filter naming a document the clearance hides finds nothing, as one naming no document
    assert public.invoke(SALARY, where={"path": "salaries.md"}) == []


def test_exactly_one_source_and_sane_knobs(labelled: Engine) -> None:
    client = Client("http://127.0.0.1:9")  # never contacted
    with pytest.raises(ConfigError, match="exactly one"):
        MicroRAGRetriever()
    with pytest.raises(ConfigError, match="exactly one"):
        MicroRAGRetriever(engine=labelled, client=client)
    with pytest.raises(ConfigError, match="API key decides"):
        MicroRAGRetriever(client=client, labels=["public"])
    with pytest.raises(ConfigError, match="API key decides"):
        MicroRAGRetriever(client=client).invoke(VPN, labels=["restricted"])
    with pytest.raises(ConfigError, match="at least 1"):
        MicroRAGRetriever(engine=labelled, k=0)
    with pytest.raises(ConfigError, match="at least 1"):
        MicroRAGRetriever(engine=labelled).invoke(VPN, k=0)


def test_without_langchain_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules is how Python marks a module it could not find (as tests/test_extras.py does).
    for name in [m for m in sys.modules if m == "langchain_core" or m.startswith("langchain_core.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "microrag_engine.adapters.langchain")
    with pytest.raises(ImportError, match=r"^microrag_engine\.adapters\.langchain needs LangChain: "
                                          r"pip install 'microrag-engine\[langchain\]'$"):
        importlib.import_module("microrag_engine.adapters.langchain")


# ---------------------------------------------------------------- a real server


def test_remote_clearance_comes_from_the_key(srv: Any) -> None:
    with Client(srv.url, api_key=srv.key["admin"]) as admin, Client(srv.url, api_key=srv.key["reader"]) as reader:
        got = MicroRAGRetriever(client=admin).invoke(SALARY)
        assert got[0].metadata["doc"] == "salaries.md" and got[0].metadata["label"] == "restricted"
        assert "180000" in got[0].page_content
        assert got[0].metadata["citation"] == "[source: salaries.md · chunk 0]"
        assert set(got[0].metadata) == set(METADATA_KEYS)
        assert all(d.metadata["doc"] != "salaries.md" for d in MicroRAGRetriever(client=reader).invoke(SALARY))
        assert MicroRAGRetriever(client=reader, where={"path": "salaries.md"}).invoke(SALARY) == []


def test_remote_filters_and_refusal(srv: Any) -> None:
    with Client(srv.url, api_key=srv.key["admin"]) as admin:
        r = MicroRAGRetriever(client=admin, k=2)
        q = "what does the L5 salary band pay and how many vacation days?"
        assert {d.metadata["doc"] for d in r.invoke(q, where={"path": "leave*"})} == {"leave.md"}
        assert "salaries.md" not in {d.metadata["doc"] for d in r.invoke(q, exclude={"title": "*salary*"})}
        assert len(r.invoke(q, k=1)) == 1
        assert r.invoke(OFF_TOPIC) == []


@pytest.mark.asyncio
async def test_remote_ainvoke_matches_invoke(srv: Any) -> None:
    with Client(srv.url, api_key=srv.key["reader"]) as reader:
        r = MicroRAGRetriever(client=reader, k=2)
        assert await r.ainvoke(VPN) == r.invoke(VPN)
        assert await r.ainvoke(OFF_TOPIC) == []


def test_remote_matches_local_on_the_same_index(srv: Any, srv_dir: Path) -> None:
    # The server ranks with the same engine: the same chunks, scores, citations and labels.
    store = open_store(srv_dir / "ix", create=False)
    try:
        local = Engine.from_store(store, preset("default"))
    finally:
        store.close()
    q = "How many vacation days do employees get?"
    with Client(srv.url, api_key=srv.key["admin"]) as admin:
        remote = MicroRAGRetriever(client=admin, k=3).invoke(q)
    here = MicroRAGRetriever(engine=local, k=3).invoke(q)
    assert len(remote) == 3 and remote == here
