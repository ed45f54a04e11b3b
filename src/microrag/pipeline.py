"""The five steps wired together: documents -> chunks -> index -> retrieval -> answer.

``Engine`` holds one built index and the settings it was built with. It adds no
behaviour of its own: every decision is made by the step modules, so the CLI,
the library and (later) the server share one pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import numpy as np

from .augment import build_messages
from .chunk import Document, chunk_documents, load_documents
from .config import Settings
from .errors import CorpusError
from .generate import ChatStream, LLMConfig, extractive_answer
from .index import Index, build_index, make_embedder
from .retrieve import Retrieval, retrieve


def demo_corpus() -> Path:
    """The bundled Brightwave Robotics handbook used by ``make demo`` and the docs."""
    return Path(str(files("microrag") / "data" / "demo-corpus"))


@dataclass
class Answer:
    """What ``ask`` returns: the text, who wrote it, and the retrieval behind it."""

    text: str
    mode: str  # "llm" or "extractive"
    retrieval: Retrieval
    truncated: bool = False


class Engine:
    """A queryable index plus its settings."""

    def __init__(self, settings: Settings, index: Index, documents: list[Document] | None = None) -> None:
        self.settings = settings
        self.index = index
        self.documents = documents or []

    @classmethod
    def from_documents(cls, docs: list[Document], settings: Settings, progress: bool = False) -> "Engine":
        """Chunk and index ``docs`` with ``settings``."""
        settings.validate()
        embedder = make_embedder(settings.embedder)
        chunks = chunk_documents(
            docs, settings.chunker, settings.size, settings.overlap, settings.max_tokens, embedder.count_tokens
        )
        index = build_index(chunks, settings.keyword, settings.embedder, settings.k1, settings.b, progress=progress)
        return cls(settings, index, docs)

    @classmethod
    def from_paths(cls, paths: Iterable[str | Path], settings: Settings, progress: bool = False) -> "Engine":
        """Load every readable document under ``paths`` and index it."""
        paths = list(paths)
        docs = load_documents(paths)
        if not docs:
            raise CorpusError(f"no readable documents under {', '.join(map(str, paths))}; supported: .md .txt .html .pdf .jsonl")
        return cls.from_documents(docs, settings, progress=progress)

    def retrieve(self, query: str, safeguards: bool | None = None, allowed: np.ndarray | None = None) -> Retrieval:
        """Step 3. ``safeguards=None`` follows the preset (the seed's bare retriever is off)."""
        if safeguards is None:
            safeguards = self.settings.safeguards_on_retrieve
        return retrieve(self.index, query, self.settings, safeguards=safeguards, allowed=allowed)

    def rank(self, query: str) -> Retrieval:
        """The ranking protocol: always with the gate and the diversity cap."""
        return retrieve(self.index, query, self.settings, safeguards=True)

    def ask(
        self,
        query: str,
        llm: LLMConfig | None = None,
        on_piece: Callable[[str], None] | None = None,
    ) -> Answer:
        """Steps 3-5. With ``llm`` the model answers (streamed to ``on_piece``); else extractive.

        A refusal by the grounding gate never reaches the model: there is nothing
        to ground an answer on, and a model asked anyway tends to guess.
        """
        retrieval = retrieve(self.index, query, self.settings, safeguards=True)
        if llm is None or retrieval.refused:
            text = extractive_answer(query, retrieval, self.index.embedder)
            if on_piece:
                on_piece(text)
            return Answer(text, "extractive", retrieval)
        stream = ChatStream(llm, build_messages(query, retrieval.hits))
        pieces: list[str] = []
        for piece in _tee(stream, on_piece):
            pieces.append(piece)
        return Answer("".join(pieces), "llm", retrieval, truncated=stream.truncated)


def _tee(stream: Iterable[str], on_piece: Callable[[str], None] | None) -> Iterator[str]:
    for piece in stream:
        if on_piece:
            on_piece(piece)
        yield piece
