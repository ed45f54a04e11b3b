"""A LangChain retriever over microRAG: a local index or a remote microRAG server.

In:  a query string (``retriever.invoke(query)``, or ``ainvoke``; ``k``, ``where``, ``exclude``
     and ``labels`` may be passed per call to override the retriever's own).
Out: ``langchain_core.documents.Document``s in rank order: ``page_content`` is the chunk text,
     ``id`` the chunk id, ``metadata`` the keys of ``search.METADATA_KEYS``: ``source``/``doc``
     (document id), ``chunk`` (index in its document), ``id``, ``page`` (0: not paged),
     ``hybrid``/``kw``/``em`` (scores), ``citation`` (``[source: doc · chunk k]``) and ``label``.

A question the grounding gate refuses (nothing in the documents answers it) returns ``[]``,
not the nearest chunks: a chain then has nothing to ground an answer on, as microRAG's own
answerer has. The reason is logged on the ``microrag`` logger (INFO).

This module imports LangChain: import it only with the extra installed
(``pip install 'microrag-engine[langchain]'``). It does not rank, generate or cite by itself
(``adapters.search`` calls the engine or the server).
"""

from __future__ import annotations

import asyncio

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError as exc:  # the module is useless without LangChain: say which extra brings it
    raise ImportError("microrag_engine.adapters.langchain needs LangChain: pip install 'microrag-engine[langchain]'") from exc
from pydantic import Field, model_validator

from ..client import Client
from ..engine import Engine
from .search import Found, check_args, search


class MicroRAGRetriever(BaseRetriever):
    """Retrieve microRAG chunks as LangChain documents.

    Give exactly one of ``engine`` (a local index) or ``client`` (a microRAG server)::

        MicroRAGRetriever(engine=Engine.from_paths(["docs/"], preset("default")), k=3)
        MicroRAGRetriever(engine=Engine.from_store(open_store(".microrag"), preset("default")))
        MicroRAGRetriever(client=Client("http://127.0.0.1:8000", api_key="..."), where={"path": "hr/*"})

    Args:
        engine: a local index (``microrag_engine.engine.Engine``).
        client: a microRAG server (``microrag_engine.client.Client``); its API key decides the clearance.
        k: how many chunks at most (the spec's ``top_k``; ``None``: the index's or server's setting).
        where: FIELD -> glob every document must match (``path``, ``collection``, ``title``, front matter).
        exclude: FIELD -> glob no document may match.
        labels: local index only: the clearance, the sensitivity labels a caller may read
            (``None``: every label but the reserved ``_quarantine``).
    """

    engine: Engine | None = None
    client: Client | None = None
    k: int | None = None
    where: dict[str, str] = Field(default_factory=dict)
    exclude: dict[str, str] = Field(default_factory=dict)
    labels: list[str] | None = None

    @model_validator(mode="after")
    def _checked(self) -> MicroRAGRetriever:
        check_args(self.engine, self.client, self.labels, self.k)
        return self

    def _search(self, query: str, k: int | None, where: dict[str, str] | None, exclude: dict[str, str] | None,
                labels: list[str] | None) -> list[Document]:
        # Per-call values replace the retriever's (LangChain passes invoke()'s keyword arguments here).
        top_k = self.k if k is None else k
        where = self.where if where is None else where
        exclude = self.exclude if exclude is None else exclude
        labels = self.labels if labels is None else labels
        return [_document(f) for f in search(self.engine, self.client, query, top_k, where, exclude, labels)]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None,
                                where: dict[str, str] | None = None, exclude: dict[str, str] | None = None,
                                labels: list[str] | None = None) -> list[Document]:
        return self._search(query, k, where, exclude, labels)

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       k: int | None = None, where: dict[str, str] | None = None,
                                       exclude: dict[str, str] | None = None,
                                       labels: list[str] | None = None) -> list[Document]:
        # The engine and the client are synchronous (numpy scoring; one blocking HTTP call): a
        # worker thread keeps the event loop free, as the server runs them in its thread pool.
        return await asyncio.to_thread(self._search, query, k, where, exclude, labels)


def _document(found: Found) -> Document:
    return Document(page_content=found.hit.chunk.text, id=found.hit.chunk.id, metadata=found.metadata())
