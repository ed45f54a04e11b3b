"""Step 3, the per-source diversity cap (pure): at most ``max_per_source`` chunks of
one document in the top-K, so one document cannot crowd out the rest."""

from __future__ import annotations

from collections.abc import Sequence

from ..types import Chunk


class ChunkDocs:
    """``docs[i]`` without building the list: the cap only looks at the first few."""

    def __init__(self, chunks: list[Chunk]) -> None:
        self.chunks = chunks

    def __getitem__(self, i: int) -> str:
        return self.chunks[i].doc


def diversity_cap(order: list[int], docs: ChunkDocs | Sequence[str], top_k: int, max_per_source: int) -> tuple[list[int], list[int]]:
    """Walk ``order``; keep at most ``max_per_source`` per doc until ``top_k`` kept.

    Returns (kept, skipped). ``max_per_source=0`` turns the cap off.
    """
    kept: list[int] = []
    skipped: list[int] = []
    per_doc: dict[str, int] = {}
    for i in order:
        if len(kept) == top_k:
            break
        if max_per_source and per_doc.get(docs[i], 0) >= max_per_source:
            skipped.append(i)
            continue
        per_doc[docs[i]] = per_doc.get(docs[i], 0) + 1
        kept.append(i)
    return kept, skipped
