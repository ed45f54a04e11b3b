"""What both framework adapters share: one search over a local index or a remote server.

In:  a query, ``top_k``, ``where``/``exclude`` filters (FIELD -> glob) and, locally, a clearance.
Out: ``Found`` records (the hit, its label and citation) and the metadata dict each
adapter attaches to the document or node it returns. A refusal of the grounding gate is
an empty list, its reason logged on the ``microrag`` logger.

This module imports no framework: ``langchain.py`` and ``llamaindex.py`` wrap it in
their own retriever classes. It does not rank, cite or filter by itself: ranking is
``Engine.retrieve`` (locally) or the server's ``POST /search`` (remotely), citations are
``augment.citation``, filters are ``store.base.DocFilter``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..augment import citation
from ..client import Client, to_hit
from ..engine import Engine
from ..errors import ConfigError
from ..store.base import DocFilter
from ..types import Hit

log = logging.getLogger("microrag")

# Metadata keys the adapters attach (one vocabulary for both frameworks, the server's
# field names); "source" repeats "doc" because LangChain and LlamaIndex tools read it.
METADATA_KEYS = ("source", "doc", "chunk", "id", "page", "hybrid", "kw", "em", "citation", "label")


@dataclass(frozen=True)
class Found:
    """One retrieved chunk with what the caller needs to cite and trust it."""

    hit: Hit
    label: str  # the document's sensitivity label ("" when the server did not say)

    @property
    def citation(self) -> str:
        return citation(self.hit)

    def metadata(self) -> dict[str, Any]:
        """The metadata both adapters attach: ids, scores, citation and label (keys: ``METADATA_KEYS``)."""
        c = self.hit.chunk
        return {"source": c.doc, "doc": c.doc, "chunk": c.index, "id": c.id, "page": c.page, "hybrid": self.hit.hybrid,
                "kw": self.hit.kw, "em": self.hit.em, "citation": self.citation, "label": self.label}


def check_args(engine: Engine | None, client: Client | None, labels: Sequence[str] | None = None,
               top_k: int | None = None) -> None:
    """Exactly one of ``engine``/``client``; ``labels`` only with an engine; ``top_k`` >= 1. Raises ``ConfigError``."""
    if (engine is None) == (client is None):
        raise ConfigError("give exactly one of engine= (a local index) or client= (a microRAG server)")
    if client is not None and labels is not None:
        # A server reads the caller's clearance from their API key; a client cannot widen or narrow it.
        raise ConfigError("labels= applies to a local index only; on a server the API key decides the clearance")
    if top_k is not None and top_k < 1:
        raise ConfigError(f"k (top_k) must be at least 1, got {top_k}")


def search(engine: Engine | None, client: Client | None, query: str, top_k: int | None = None,
           where: Mapping[str, str] | None = None, exclude: Mapping[str, str] | None = None,
           labels: Sequence[str] | None = None) -> list[Found]:
    """:func:`search_local` over ``engine`` or :func:`search_remote` over ``client`` (exactly one given),
    after :func:`check_args`. ``[]`` when the grounding gate refused."""
    check_args(engine, client, labels, top_k)
    if engine is not None:
        return search_local(engine, query, top_k, where, exclude, labels)
    assert client is not None  # check_args: exactly one of the two
    return search_remote(client, query, top_k, where, exclude)


def search_local(engine: Engine, query: str, top_k: int | None = None, where: Mapping[str, str] | None = None,
                 exclude: Mapping[str, str] | None = None, labels: Sequence[str] | None = None) -> list[Found]:
    """``Engine.retrieve`` with the gate and the diversity cap on, as the server's ``/search`` runs it.

    Args:
        engine: the local index.
        query: what to search for.
        top_k: how many chunks at most (``None``: the engine's settings).
        where: FIELD -> glob every document must match (path, collection, title, front matter).
        exclude: FIELD -> glob no document may match.
        labels: the clearance: only chunks with these sensitivity labels (``None``: all but reserved ones).

    Returns:
        The hits in rank order, or ``[]`` when the grounding gate refused.
    """
    found = DocFilter(tuple((where or {}).items()), tuple((exclude or {}).items()))
    r = engine.retrieve(query, safeguards=True, labels=labels, top_k=top_k, where=found or None)
    if r.refused:
        log.info("retrieval refused for %r: %s", query, r.reason)
        return []
    # In-memory corpora have no records and every chunk is public (Engine.labels' default).
    return [Found(h, engine.records[h.chunk.doc].label if h.chunk.doc in engine.records else "public") for h in r.hits]


def search_remote(client: Client, query: str, top_k: int | None = None, where: Mapping[str, str] | None = None,
                  exclude: Mapping[str, str] | None = None) -> list[Found]:
    """The server's ``POST /search``: its gate, cap, clearance (the client's key), guards and audit.

    Args:
        client: the server.
        query: what to search for.
        top_k: how many chunks at most (``None``: the server's settings).
        where: FIELD -> glob every document must match.
        exclude: FIELD -> glob no document may match.

    Returns:
        The hits in rank order, or ``[]`` when the grounding gate refused.
    """
    out = client.search(query, top_k=top_k, where=where, exclude=exclude)
    if out["refused"]:
        log.info("retrieval refused for %r: %s", query, out["reason"])
        return []
    return [Found(to_hit(h), h.get("label", "")) for h in out["hits"]]

