"""Dense first pass for large indexes: per-label partitions instead of scoring every vector.

Below ``ann_threshold`` chunks the exact matrix product is fast enough (100k x
384 is ~20 ms here) and retrieval scores every chunk. Above it, retrieval takes
the union of the BM25 top-``first_pass`` and this module's top-``first_pass`` and
scores only those exactly - the production request path of the spec.

Label filters are the common case (a caller's clearance; ``_quarantine`` is hidden
from everyone), so the vectors are partitioned by label and a query searches only
the partitions of the labels it may see, merging their top-n by exact score. A
hidden label's vectors are never visited, and no filtered search has to gather the
visible vectors (142 ms at 1M chunks / 10% visible) or walk a graph most of which it
may not return. A partition of at most ``exact_max`` vectors is scored exactly on a
contiguous block; a larger one has its own faiss HNSW graph. A mask that is not a
union of labels (a document filter) is split by partition: whole partitions are
searched as above, partly visible ones exactly over the visible rows when few, else
through the graph with an ID selector and a beam widened by the hidden share.

The graphs are derived data: built from the stored vectors and cached in a folder
next to the index (keyed by generation by the caller, and by the label layout, the
vectors and the build settings in its manifest: anything else is rebuilt). faiss is
optional (extra ``ann``); without it large indexes stay exact.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .embed import cosines

log = logging.getLogger("microrag")

CACHE_FORMAT = 2  # 2: a folder of per-label graphs (1 was one hnsw-<generation>.faiss file)
MANIFEST = "manifest.json"


def faiss_available() -> bool:
    try:
        import faiss  # noqa: F401

        return True
    except ImportError:
        return False


class _Part:
    """One label's vectors: their global row ids (ascending) and a graph, or None when
    the partition is small enough to score exactly (``block``: its rows, contiguous)."""

    def __init__(self, label: str, ids: np.ndarray, block: np.ndarray | None, graph: Any) -> None:
        self.label, self.ids, self.block, self.graph = label, ids, block, graph


class HNSW:
    """The dense first pass over unit vectors (inner product = cosine), partitioned by label.

    ``labels`` names each vector's label (None: one partition). ``top(q, n, allowed)``
    returns global row ids, best first.
    """

    # At most this many vectors are scored exactly rather than through a graph: 30k x 384
    # takes 0.9 ms here, as long as a top-100 HNSW search with ef 256 (and 1.2 vs 0.7 ms
    # at 40k); a graph that small also loses recall sooner (ef 128: 0.989 at 20k, 0.999 at 30k).
    exact_max = 30_000
    # ef_search 256: recall@10 >= 0.99 at 1M chunks needs it for the 400k-500k partitions
    # (ef 128: 0.988 unfiltered, 0.997 at 50% visible; ef 256: 1.000, p50 2.5 ms unfiltered).

    def __init__(self, vectors: np.ndarray, labels: Sequence[str] | np.ndarray | None = None, m: int = 16,
                 ef_construction: int = 100, ef_search: int = 256, cache: Path | None = None,
                 exact_max: int | None = None) -> None:
        self.ef_search = ef_search
        self.exact_max = self.exact_max if exact_max is None else exact_max
        self.vectors = vectors if vectors.dtype == np.float32 else np.asarray(vectors, dtype=np.float32)
        n = len(self.vectors)
        names = ["*"] if labels is None else sorted(set(np.asarray(labels, dtype=object).tolist()))
        # 16-bit label numbers where they fit: numpy sorts those by radix, so splitting a
        # document filter's mask by partition stays linear (1 ms, not 4, for 100k rows).
        dtype = np.int16 if len(names) < 2**15 else np.int32
        if labels is None:
            codes = np.zeros(n, dtype=dtype)
        else:
            code = {x: i for i, x in enumerate(names)}
            codes = np.fromiter((code[x] for x in labels), dtype=dtype, count=n)
        self.codes = codes
        groups = np.argsort(codes, kind="stable")  # row ids grouped by label, ascending within each
        bounds = np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=len(names)))])
        id_sets = [groups[bounds[i]:bounds[i + 1]] for i in range(len(names))]
        manifest = {"format": CACHE_FORMAT, "n": n, "dim": int(self.vectors.shape[1]) if n else 0, "m": m,
                    "ef_construction": ef_construction, "exact_max": self.exact_max, "labels": names,
                    "layout": hashlib.sha256(codes.tobytes()).hexdigest(), "vectors": _fingerprint(self.vectors)}
        graphs = _load(cache, manifest, [len(ids) for ids in id_sets], self.exact_max)
        if graphs is None:
            graphs = [_build(_rows(self.vectors, ids), m, ef_construction) if len(ids) > self.exact_max else None
                      for ids in id_sets]
            if cache is not None:
                _save(cache, manifest, graphs)
        self.parts = [_Part(name, ids, _rows(self.vectors, ids) if g is None else None, g)
                      for name, ids, g in zip(names, id_sets, graphs)]
        # Search plans of read-only masks (Engine.mask caches one per clearance), by identity:
        # splitting a 1M mask by partition costs milliseconds, looking it up does not.
        self._plans: dict[int, tuple[weakref.ref[np.ndarray], list[tuple[_Part, np.ndarray | None]]]] = {}

    def top(self, q: np.ndarray, n: int, allowed: np.ndarray | None = None) -> np.ndarray:
        """Global ids of (approximately) the ``n`` best vectors for ``q`` among ``allowed``, best first."""
        q = np.ascontiguousarray(q, dtype=np.float32)
        found = [self._search(part, q, n, pos) for part, pos in self._plan(allowed)]
        if not found:
            return np.zeros(0, dtype=np.int64)
        ids = np.concatenate([i for i, _ in found])
        scores = np.concatenate([s for _, s in found])
        if ids.size > n:  # every score is exact (flat storage), so partitions merge by it
            keep = np.argpartition(-scores, n - 1)[:n]
            ids, scores = ids[keep], scores[keep]
        return ids[np.argsort(-scores, kind="stable")]

    def _plan(self, allowed: np.ndarray | None) -> list[tuple[_Part, np.ndarray | None]]:
        """The partitions to search, each with None (all of it) or the local positions visible."""
        if allowed is None:
            return [(p, None) for p in self.parts if p.ids.size]
        key = id(allowed)
        hit = self._plans.get(key)
        if hit is not None and not allowed.flags.writeable and hit[0]() is allowed:
            return hit[1]
        rows = np.flatnonzero(allowed)
        of = self.codes[rows]
        order = np.argsort(of, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(of, minlength=len(self.parts)))])
        plan: list[tuple[_Part, np.ndarray | None]] = []
        for i, part in enumerate(self.parts):
            mine = rows[order[bounds[i]:bounds[i + 1]]]
            if mine.size:
                plan.append((part, None if mine.size == part.ids.size else np.searchsorted(part.ids, mine)))
        if not allowed.flags.writeable:  # a writable mask could change under the same identity
            if len(self._plans) >= 64:  # a handful of clearances in practice; bound it anyway
                self._plans.clear()
            self._plans[key] = (weakref.ref(allowed), plan)
        return plan

    def _search(self, part: _Part, q: np.ndarray, n: int, pos: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """(global ids, exact scores) of the best ``n`` in ``part`` (at ``pos`` only, if given)."""
        if pos is not None and (part.graph is None or pos.size <= self.exact_max):
            ids = part.ids[pos]  # few visible rows: score them exactly
            return _best(ids, cosines(part.block[pos] if part.block is not None else self.vectors[ids], q), n)
        if part.block is not None:  # (no graph: the partition is a block scored exactly, as a 1-row GEMM)
            return _best(part.ids, cosines(part.block, q), n)
        import faiss

        params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]  # (faiss ships partial stubs)
        ef = max(self.ef_search, n)
        if pos is not None:
            # Many visible rows, but not all: filter inside the walk, with a beam widened by the
            # hidden share so that ``n`` visible ones are still met (never wider than the graph).
            bits = np.zeros(part.ids.size, dtype=bool)
            bits[pos] = True
            packed = np.packbits(bits, bitorder="little")
            sel = faiss.IDSelectorBitmap(part.ids.size, faiss.swig_ptr(packed))
            params.sel = sel  # the locals packed/sel keep the bitmap alive until search returns
            ef = min(int(ef * part.ids.size / pos.size), part.ids.size)
        params.efSearch = ef
        scores, local = part.graph.search(q[None, :], min(n, part.ids.size), params=params)
        ok = local[0] >= 0
        return part.ids[local[0][ok]], scores[0][ok]


def _best(ids: np.ndarray, scores: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    if ids.size > n:
        keep = np.argpartition(-scores, n - 1)[:n]
        return ids[keep], scores[keep]
    return ids, scores


def _rows(vectors: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The rows ``ids`` as one contiguous block: a view when they are a run (no copy)."""
    if ids.size and ids[-1] - ids[0] + 1 == ids.size:
        return vectors[int(ids[0]):int(ids[-1]) + 1]
    return np.ascontiguousarray(vectors[ids])


def _fingerprint(vectors: np.ndarray) -> str:
    """A digest of 64 rows spread over the matrix: other vectors under the same name are
    caught without reading 1.5 GB (the generation in the cache's name catches the rest)."""
    if not len(vectors):
        return ""
    rows = np.unique(np.linspace(0, len(vectors) - 1, 64).astype(np.int64))
    return hashlib.sha256(np.ascontiguousarray(vectors[rows], dtype=np.float32).tobytes()).hexdigest()


def _build(vectors: np.ndarray, m: int, ef_construction: int):
    import faiss

    graph = faiss.IndexHNSWFlat(vectors.shape[1], m, faiss.METRIC_INNER_PRODUCT)
    graph.hnsw.efConstruction = ef_construction
    graph.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return graph


def _load(cache: Path | None, manifest: dict[str, Any], sizes: list[int], exact_max: int) -> list | None:
    """The cached graphs (None per exact partition) if the folder was built from exactly these
    vectors, labels and settings and every graph reads back whole; else None: rebuild."""
    if cache is None or not cache.is_dir():
        return None
    try:
        if json.loads((cache / MANIFEST).read_text(encoding="utf-8")) != manifest:
            return None
        graphs = [_read(cache / f"part-{i}.faiss") if size > exact_max else None for i, size in enumerate(sizes)]
        if all(g is None or (g.ntotal == size and g.d == manifest["dim"]) for g, size in zip(graphs, sizes)):
            return graphs
    except Exception as exc:  # truncated, unreadable, from another faiss: derived data, so rebuild
        log.info("rebuilding the HNSW cache %s (%s)", cache, type(exc).__name__)
    return None


def _save(cache: Path, manifest: dict[str, Any], graphs: list) -> None:
    """Write the graphs and then the manifest into a temporary folder, each synced, and rename
    it into place: a reader sees a whole folder or none. A failure leaves the index working."""
    import faiss

    tmp = cache.with_name(f"{cache.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        tmp.mkdir(parents=True)
        for i, g in enumerate(graphs):
            if g is not None:
                faiss.write_index(g, str(tmp / f"part-{i}.faiss"))
                _fsync(tmp / f"part-{i}.faiss")
        (tmp / MANIFEST).write_text(json.dumps(manifest, sort_keys=True), encoding="utf-8")
        _fsync(tmp / MANIFEST)
        if cache.exists() or cache.is_symlink():  # stale (another layout, an older release's file): set aside
            aside = cache.with_name(f"{cache.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}")
            cache.rename(aside)
            if aside.is_dir():
                shutil.rmtree(aside, ignore_errors=True)
            else:
                aside.unlink(missing_ok=True)
        tmp.rename(cache)  # fails if another process renamed its own in just now: theirs is as good
    except OSError as exc:
        log.info("could not cache the HNSW graphs in %s (%s)", cache, exc.strerror)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _read(path: Path):
    """A saved graph, its vectors memory-mapped where faiss can (``IO_FLAG_MMAP_IFC``, faiss
    1.10+): 12 ms instead of 116 ms to open 100k vectors here; pages load as searches touch them."""
    import faiss

    flag = getattr(faiss, "IO_FLAG_MMAP_IFC", None)
    if flag is not None:
        try:
            return faiss.read_index(str(path), flag)
        except RuntimeError:  # an older file layout or a faiss built without it: read it whole
            pass
    return faiss.read_index(str(path))


def top_n(scores: np.ndarray, n: int, allowed: np.ndarray | None = None) -> np.ndarray:
    """Indices of the ``n`` highest positive scores among ``allowed`` (unordered)."""
    mask = scores > 0 if allowed is None else (scores > 0) & allowed
    idx = np.flatnonzero(mask)
    if idx.size <= n:
        return idx
    return idx[np.argpartition(-scores[idx], n - 1)[:n]]
