"""Step 3, the grounding gate (pure): does the corpus hold an answer at all?

It reads *raw* leg scores (min-max makes any top hit look like 1.0): the best
cosine, the query's keyword coverage, and an exact token found verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Settings
from .fuse import looks_exact


@dataclass(frozen=True)
class GateSignals:
    """What the grounding gate reads, all raw (never min-max normalised)."""

    best_kw: float  # best raw keyword score (TF-IDF cosine or BM25)
    best_em: float  # best raw embedding cosine
    kwcov: float = 0.0  # best BM25 score / the query's BM25 ceiling (sum of IDF), 0..1
    exact: str = ""  # an identifier from the query found verbatim in a top keyword hit


def grounding_gate(sig: GateSignals, settings: Settings) -> str:
    """'' when the corpus plausibly holds the answer; otherwise why we refuse.

    ``kw``: the seed rule, raw TF-IDF cosine below ``min_kw``. ``em``: best cosine
    below ``min_em``. ``either`` (default): refuse only when *both* legs are weak -
    cosine below ``min_em`` and BM25 coverage below ``min_kwcov`` - and no code,
    hostname or id typed in the query occurs verbatim in a top keyword hit
    (embeddings blur ``E-4012``; a verbatim match is strong evidence).
    Thresholds and their measured trade-off: benchmarks/results/gate.md.
    """
    g, s = settings.gate, settings
    if g == "kw" and sig.best_kw < s.min_kw:
        return f"best keyword match {sig.best_kw:.3f} is below min_kw {s.min_kw}"
    if g == "em" and sig.best_em < s.min_em:
        return f"best embedding match {sig.best_em:.3f} is below min_em {s.min_em}"
    if g == "either" and sig.best_em < s.min_em and sig.kwcov < s.min_kwcov and not sig.exact:
        return (f"best embedding match {sig.best_em:.3f} < min_em {s.min_em} and keyword coverage "
                f"{sig.kwcov:.3f} < min_kwcov {s.min_kwcov}")
    return ""


def exact_token_in(query: str, texts: list[str]) -> str:
    """The first exact-looking query token that occurs verbatim (case-insensitive) in ``texts``."""
    lowered = [t.lower() for t in texts]
    for tok in query.split():
        tok = tok.strip(",;?!()'\"`")
        if looks_exact(tok) and any(tok.lower() in t for t in lowered):
            return tok
    return ""
