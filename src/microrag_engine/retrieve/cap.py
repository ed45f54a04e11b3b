"""Step 3, the per-source safeguards (pure): at most ``max_per_source`` chunks of one
document in the top-K, and a length prior so a very long document (a changelog,
release notes) cannot win unrelated queries by the sheer number of its chunks."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from ..types import Chunk


class ChunkDocs:
    """``docs[i]`` without building the list: the cap only looks at the first few."""

    def __init__(self, chunks: Sequence[Chunk]) -> None:
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


def long_doc_penalty(sizes: Iterable[tuple[str, int]], w: float, ref: int) -> dict[str, float]:
    """``w * ln(chunks / ref)`` for each document longer than ``ref`` chunks, subtracted
    from its chunks' fused scores.

    Each chunk of a 1,000-chunk changelog is one more ticket in every query's lottery;
    a cap alone still leaves it half the top-K. The prior depends on the document's own
    size only (no corpus statistic), so what one caller cannot see never moves it.
    Measured on the QA dev sets (benchmarks/results/qa.md).
    """
    if w <= 0:
        return {}
    return {doc: w * math.log(n / ref) for doc, n in sizes if n > ref}
