"""A LlamaIndex retriever over microRAG: a local index or a remote microRAG server.

In:  a query (``retriever.retrieve("...")`` or a ``QueryBundle``; ``aretrieve`` likewise). microRAG
     embeds the query itself: a bundle's own embedding is ignored.
Out: ``NodeWithScore(TextNode, score=hybrid)`` in rank order: the node's ``text`` is the chunk text,
     ``id_`` the chunk id, its SOURCE relationship the document id, ``metadata`` the keys of
     ``search.METADATA_KEYS`` (as in the LangChain adapter). Of the metadata an LLM sees only
     ``citation``; scores and ids stay out of prompts, and nothing is embedded again.

A question the grounding gate refuses returns ``[]``; a ``RetrieverQueryEngine`` then answers
from no context (LlamaIndex's "Empty Response"), never from the nearest unrelated chunks.

This module imports LlamaIndex: import it only with the extra installed
(``pip install 'microrag-engine[llamaindex]'``). It does not rank, generate or cite by itself
(``adapters.search`` calls the engine or the server).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

try:
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeRelationship, NodeWithScore, QueryBundle, RelatedNodeInfo, TextNode
except ImportError as exc:  # the module is useless without LlamaIndex: say which extra brings it
    raise ImportError("microrag_engine.adapters.llamaindex needs LlamaIndex: pip install 'microrag-engine[llamaindex]'") from exc

from ..client import Client
from ..engine import Engine
from .search import METADATA_KEYS, Found, check_args, search

# What a model reads beside each chunk: where it came from, in the form it is asked to cite.
_LLM_KEYS = ("citation",)


class MicroRAGRetriever(BaseRetriever):
    """Retrieve microRAG chunks as LlamaIndex nodes.

    Give exactly one of ``engine`` (a local index) or ``client`` (a microRAG server)::

        MicroRAGRetriever(engine=Engine.from_paths(["docs/"], preset("default")), k=3)
        MicroRAGRetriever(client=Client("http://127.0.0.1:8000", api_key="..."), where={"path": "hr/*"})

    Args:
        engine: a local index (``microrag_engine.engine.Engine``).
        client: a microRAG server (``microrag_engine.client.Client``); its API key decides the clearance.
        k: how many chunks at most (the spec's ``top_k``; ``None``: the index's or server's setting).
        where: FIELD -> glob every document must match (``path``, ``collection``, ``title``, front matter).
        exclude: FIELD -> glob no document may match.
        labels: local index only: the sensitivity labels a caller may read (``None``: all but reserved ones).
        callback_manager, verbose: as for every LlamaIndex retriever.
    """

    def __init__(self, engine: Engine | None = None, client: Client | None = None, k: int | None = None,
                 where: Mapping[str, str] | None = None, exclude: Mapping[str, str] | None = None,
                 labels: Sequence[str] | None = None, callback_manager: CallbackManager | None = None,
                 verbose: bool = False) -> None:
        check_args(engine, client, labels, k)
        self.engine = engine
        self.client = client
        self.k = k
        self.where = dict(where or {})
        self.exclude = dict(exclude or {})
        self.labels = list(labels) if labels is not None else None
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        found = search(self.engine, self.client, query_bundle.query_str, self.k, self.where, self.exclude, self.labels)
        return [_node(f) for f in found]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        # LlamaIndex's default runs _retrieve on the event loop; the engine (numpy) and the client
        # (one blocking HTTP call) are synchronous, so a worker thread keeps the loop free.
        return await asyncio.to_thread(self._retrieve, query_bundle)


def _node(found: Found) -> NodeWithScore:
    c = found.hit.chunk
    hidden = [key for key in METADATA_KEYS if key not in _LLM_KEYS]
    node = TextNode(id_=c.id, text=c.text, metadata=found.metadata(), excluded_llm_metadata_keys=hidden,
                    excluded_embed_metadata_keys=list(METADATA_KEYS),
                    relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=c.doc)})
    return NodeWithScore(node=node, score=found.hit.hybrid)
