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
import threading
import uuid
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .embed import cosines

log = logging.getLogger("microrag")

CACHE_FORMAT = 3  # 3: each graph with its slot table (2: graphs in row order; 1: one hnsw-<generation>.faiss file)
MANIFEST = "manifest.json"


def faiss_available() -> bool:
    try:
        import faiss  # noqa: F401

        return True
    except ImportError:
        return False


class _Graph:
    """A faiss HNSW graph shared by successive engines: each write's engine adds its new
    vectors to the same graph instead of building another (ids are slots, in insertion
    order). An older engine keeps its own slot table, so slots added after it are not its
    own and it never returns them. Searches run together; an ``add`` runs alone, since
    faiss may reallocate the graph's storage while a search walks it."""

    def __init__(self, index: Any, owned: bool) -> None:
        self.index, self.owned = index, owned  # owned: not a read-only memory map of a file
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False

    @contextmanager
    def reading(self) -> Iterator[Any]:
        with self._cond:
            while self._writing:
                self._cond.wait()
            self._readers += 1
        try:
            yield self.index
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    def add(self, vectors: np.ndarray) -> int:
        """Append ``vectors``; returns the slot of the first one."""
        with self._cond:
            while self._writing or self._readers:
                self._cond.wait()
            self._writing = True
        try:
            if not self.owned:  # a mapped file's storage cannot grow: take an owned copy once
                import faiss

                self.index = faiss.deserialize_index(faiss.serialize_index(self.index))
                self.owned = True
            first = int(self.index.ntotal)
            self.index.add(np.ascontiguousarray(vectors, dtype=np.float32))
            return first
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


class _Part:
    """One label's vectors: ``ids``, their global row ids (ascending), and either ``block``,
    those rows contiguous (a partition small enough to score exactly), or a ``graph``.

    For a graph, ``slots[s]`` is the global id of the vector at graph slot ``s`` (-1: a
    tombstone, a vector deleted or relabelled since it was added) and ``local[j]`` the slot
    of ``ids[j]``."""

    def __init__(self, label: str, ids: np.ndarray, block: np.ndarray | None = None, graph: _Graph | None = None,
                 slots: np.ndarray | None = None, local: np.ndarray | None = None) -> None:
        self.label, self.ids, self.block, self.graph = label, ids, block, graph
        self.slots = slots if slots is not None else ids
        self.live: np.ndarray | None = None
        if graph is None or slots is None:
            self.local = np.arange(ids.size)
            return
        if local is None:  # (a write passes it in, merged in linear time: no sort at 1M rows)
            live = np.flatnonzero(slots >= 0)
            local = live[np.argsort(slots[live], kind="stable")]
        self.local = local
        # Packed live-slot bits when some slots are not this engine's (tombstones); the
        # graph may also hold slots added after it: a bitmap stops at its own length.
        if slots.size != ids.size:
            self.live = np.packbits(slots >= 0, bitorder="little")

    @property
    def dead(self) -> int:
        """Tombstones: slots of this partition's graph that are not its live rows."""
        return int(self.slots.size - self.ids.size)


def _layout(labels: Sequence[str] | np.ndarray | None, n: int) -> tuple[list[str], np.ndarray, list[np.ndarray]]:
    """(label names sorted, each row's label number, each label's row ids ascending)."""
    names = ["*"] if labels is None else sorted(set(np.asarray(labels, dtype=object).tolist()))
    # 16-bit label numbers where they fit: numpy sorts those by radix, so splitting a
    # document filter's mask by partition stays linear (1 ms, not 4, for 100k rows).
    dtype = np.int16 if len(names) < 2**15 else np.int32
    if labels is None:
        codes = np.zeros(n, dtype=dtype)
    else:
        code = {x: i for i, x in enumerate(names)}
        codes = np.fromiter((code[x] for x in labels), dtype=dtype, count=n)
    groups = np.argsort(codes, kind="stable")  # row ids grouped by label, ascending within each
    bounds = np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=len(names)))])
    return names, codes, [groups[bounds[i]:bounds[i + 1]] for i in range(len(names))]


class HNSW:
    """The dense first pass over unit vectors (inner product = cosine), partitioned by label.

    ``labels`` names each vector's label (None: one partition). ``top(q, n, allowed)``
    returns global row ids, best first. ``updated`` follows a write: partitions keep their
    graphs, new vectors are added to them and removed ones become tombstones.
    """

    # At most this many vectors are scored exactly rather than through a graph: 30k x 384
    # takes 0.9 ms here, as long as a top-100 HNSW search with ef 256 (and 1.2 vs 0.7 ms
    # at 40k); a graph that small also loses recall sooner (ef 128: 0.989 at 20k, 0.999 at 30k).
    exact_max = 30_000
    # ef_search 256: recall@10 >= 0.99 at 1M chunks needs it for the 400k-500k partitions
    # (ef 128: 0.988 unfiltered, 0.997 at 50% visible; ef 256: 1.000, p50 2.5 ms unfiltered).
    # A graph is rebuilt once this share of its slots are tombstones: searching past them
    # widens the beam by as much, and a rebuild after a quarter of a partition was rewritten
    # costs each write a quarter of its rebuild at most, amortised.
    compact_at = 0.25

    def __init__(self, vectors: np.ndarray, labels: Sequence[str] | np.ndarray | None = None, m: int = 16,
                 ef_construction: int = 100, ef_search: int = 256, cache: Path | None = None,
                 exact_max: int | None = None) -> None:
        self.m, self.ef_construction, self.ef_search = m, ef_construction, ef_search
        self.exact_max = self.exact_max if exact_max is None else exact_max
        self.vectors = vectors if vectors.dtype == np.float32 else np.asarray(vectors, dtype=np.float32)
        names, self.codes, id_sets = _layout(labels, len(self.vectors))
        manifest = self._manifest(names)
        loaded = _load(cache, manifest, names, id_sets, self.exact_max)
        if loaded is None:
            parts = [self._fresh(name, ids) for name, ids in zip(names, id_sets)]
            if cache is not None:
                _save(cache, manifest, parts)
        else:
            parts = [p or self._fresh(name, ids) for p, name, ids in zip(loaded, names, id_sets)]
        self._init(parts)

    def _manifest(self, names: list[str]) -> dict[str, Any]:
        return {"format": CACHE_FORMAT, "n": len(self.vectors), "dim": int(self.vectors.shape[1]) if len(self.vectors) else 0,
                "m": self.m, "ef_construction": self.ef_construction, "exact_max": self.exact_max, "labels": names,
                "layout": hashlib.sha256(self.codes.tobytes()).hexdigest(), "vectors": _fingerprint(self.vectors)}

    def _init(self, parts: list[_Part]) -> None:
        self.parts = parts
        # Search plans of read-only masks (Engine.mask caches one per clearance), by identity:
        # splitting a 1M mask by partition costs milliseconds, looking it up does not.
        self._plans: dict[int, tuple[weakref.ref[np.ndarray], list[tuple[_Part, np.ndarray | None]]]] = {}

    def _fresh(self, name: str, ids: np.ndarray) -> _Part:
        """A partition derived from its vectors alone: a block, or a graph built for it."""
        if len(ids) <= self.exact_max:
            return _Part(name, ids, block=_rows(self.vectors, ids))
        return _Part(name, ids, graph=_Graph(_build(_rows(self.vectors, ids), self.m, self.ef_construction), owned=True))

    def updated(self, vectors: np.ndarray, remap: np.ndarray, labels: Sequence[str] | np.ndarray | None) -> HNSW:
        """The first pass over ``vectors`` after a write, reusing this one's graphs.

        ``remap[r]`` is the new row of this index's row ``r`` (-1: removed); such a row's
        vector must be unchanged. Rows of a label whose partition has a graph keep their
        slot in it (ids remapped); rows removed or moved to another label become tombstones;
        new rows are added to their label's graph. Only a partition that crosses
        ``exact_max`` or ``compact_at`` is built again. ``self`` keeps answering as before.
        """
        new = HNSW.__new__(HNSW)
        new.m, new.ef_construction, new.ef_search, new.exact_max = self.m, self.ef_construction, self.ef_search, self.exact_max
        new.vectors = vectors if vectors.dtype == np.float32 else np.asarray(vectors, dtype=np.float32)
        names, new.codes, id_sets = _layout(labels, len(new.vectors))
        old = {p.label: p for p in self.parts}
        remap = np.asarray(remap, dtype=np.int64)
        parts = []
        for i, (name, ids) in enumerate(zip(names, id_sets)):
            was = old.get(name)
            if was is None or was.graph is None or len(ids) <= self.exact_max:
                parts.append(new._fresh(name, ids))
                continue
            # Every step is linear: ``remap`` keeps the kept rows' order, so the survivors stay
            # sorted by (new) global id, and survivors and additions partition ``ids``.
            moved_to = remap[was.ids]  # each old live row's new row (-1: gone), in old row order
            survive = moved_to >= 0
            survive[survive] = new.codes[moved_to[survive]] == i  # still this label's
            kept_rows, kept_slots = moved_to[survive], was.local[survive]
            slots = np.full(was.slots.size, -1, dtype=np.int64)
            slots[kept_slots] = kept_rows
            mark = np.zeros(len(new.vectors), dtype=bool)
            mark[kept_rows] = True
            is_new = ~mark[ids]
            added = ids[is_new]
            if slots.size - kept_rows.size > self.compact_at * (slots.size + added.size):
                parts.append(new._fresh(name, ids))
                continue
            local = np.empty(ids.size, dtype=np.int64)
            local[~is_new] = kept_slots
            if added.size:
                first = was.graph.add(new.vectors[added])
                # slots another engine added after ``was`` (a branch of history) are not ours
                gap = np.full(first - slots.size, -1, dtype=np.int64)
                local[is_new] = np.arange(first, first + added.size)
                slots = np.concatenate([slots, gap, added])
            parts.append(_Part(name, ids, graph=was.graph, slots=slots, local=local))
        new._init(parts)
        return new

    def save(self, cache: Path) -> None:
        """Cache the graphs in ``cache`` (as ``HNSW(..., cache=)`` reads them), from any thread."""
        _save(cache, self._manifest([p.label for p in self.parts]), self.parts)

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
        if part.block is not None or part.graph is None:  # a block scored exactly, as a 1-row GEMM
            return _best(part.ids, cosines(self.vectors[part.ids] if part.block is None else part.block, q), n)
        import faiss

        params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]  # (faiss ships partial stubs)
        ef = max(self.ef_search, n)
        visible = part.ids.size if pos is None else pos.size
        bits = part.live
        if pos is not None:  # many visible rows, but not all: filter inside the walk
            mine = np.zeros(part.slots.size, dtype=bool)
            mine[part.local[pos]] = True
            bits = np.packbits(mine, bitorder="little")
        with part.graph.reading() as graph:
            if bits is None and graph.ntotal > part.slots.size:  # slots added after this engine
                bits = np.packbits(np.ones(part.slots.size, dtype=bool), bitorder="little")
            if bits is not None:
                # IDSelectorBitmap's n counts bytes: a slot past them is never returned.
                sel = faiss.IDSelectorBitmap(bits.size, faiss.swig_ptr(bits))
                params.sel = sel  # the locals bits/sel keep the bitmap alive until search returns
                # a beam widened by the hidden share, so that ``n`` visible ones are still met
                ef = min(int(ef * part.slots.size / max(visible, 1)), max(part.slots.size, ef))
            params.efSearch = ef
            scores, local = graph.search(q[None, :], min(n, visible), params=params)
        ok = (local[0] >= 0) & (local[0] < part.slots.size)
        got = part.slots[local[0][ok]]
        live = got >= 0
        return got[live], scores[0][ok][live]


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


def _load(cache: Path | None, manifest: dict[str, Any], names: list[str], id_sets: list[np.ndarray],
          exact_max: int) -> list[_Part | None] | None:
    """The cached partitions if the folder was built from exactly these vectors, labels and
    settings, and every graph reads back whole with a slot table naming exactly its label's
    rows (None in place of a block: those are not cached); else None: rebuild."""
    if cache is None or not cache.is_dir():
        return None
    try:
        if json.loads((cache / MANIFEST).read_text(encoding="utf-8")) != manifest:
            return None
        parts: list[_Part | None] = []
        for i, (name, ids) in enumerate(zip(names, id_sets)):
            if len(ids) <= exact_max:
                parts.append(None)
                continue
            graph = _read(cache / f"part-{i}.faiss")
            slots = np.load(cache / f"part-{i}.slots.npy", allow_pickle=False)
            if graph.ntotal != slots.size or graph.d != manifest["dim"] or \
                    not np.array_equal(np.sort(slots[slots >= 0]), ids):
                return None
            parts.append(_Part(name, ids, graph=_Graph(graph, owned=False), slots=slots.astype(np.int64)))
        return parts
    except Exception as exc:  # truncated, unreadable, from another faiss: derived data, so rebuild
        log.info("rebuilding the HNSW cache %s (%s)", cache, type(exc).__name__)
    return None


def _save(cache: Path, manifest: dict[str, Any], parts: list[_Part]) -> None:
    """Write the graphs with their slot tables and then the manifest into a temporary folder,
    each synced, and rename it into place: a reader sees a whole folder or none. A failure
    leaves the index working."""
    import faiss

    tmp = cache.with_name(f"{cache.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        tmp.mkdir(parents=True)
        for i, part in enumerate(parts):
            if part.graph is None:
                continue
            with part.graph.reading() as graph:  # (a later engine may add to it meanwhile)
                faiss.write_index(graph, str(tmp / f"part-{i}.faiss"))
                # slots added since this engine are tombstones in its saved table
                slots = np.concatenate([part.slots, np.full(graph.ntotal - part.slots.size, -1, dtype=np.int64)])
            np.save(tmp / f"part-{i}.slots.npy", slots, allow_pickle=False)
            _fsync(tmp / f"part-{i}.faiss")
            _fsync(tmp / f"part-{i}.slots.npy")
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
