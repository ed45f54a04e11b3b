"""Real pages from the public-docs zoo's dev corpora (benchmarks/zoo/corpora.py), kept gzipped in
tests/data/zoo (licences in its README): the pages a screening, DLP or loader rule must keep."""

from __future__ import annotations

import gzip
from pathlib import Path

ZOO = Path(__file__).resolve().parents[1] / "data" / "zoo"


def page(name: str) -> str:
    """The page ``corpus/path.html`` as fetched (its markup, not the loaded text)."""
    return gzip.decompress((ZOO / (name.replace("/", "_") + ".gz")).read_bytes()).decode("utf-8")
