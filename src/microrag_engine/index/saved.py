"""What an index derives from its store, saved beside it so opening costs milliseconds.

A store (``store/``) is the source of truth; the keyword postings, the vectors and a
columnar copy of the chunks are derived from one of its generations. They are saved
once per generation in a folder ``derived-<generation>`` next to the store and
opened memory-mapped: nothing is parsed or copied until a query needs it, so the
cost of opening does not grow with the corpus (the chunk texts stay on disk until
a hit is shown). The folder is written under a temporary name and renamed whole,
so a reader sees a complete folder or none; ``manifest.json`` says what it was
built with, and a folder built with other settings is rebuilt, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import operator
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, SupportsIndex, TypeVar, overload

import numpy as np

from ..types import Chunk

SAVED_FORMAT = 3  # 2: names and terms as JSON, counts checked; 3: BM25 as postings (tf, lengths), not weights
MANIFEST = "manifest.json"


class ChunkTable(Sequence[Chunk]):
    """The chunks of an index as columns: ``table[i]`` builds one ``Chunk`` on demand.

    Columns: a document number per chunk (names in ``doc_names``), ``spans`` (index,
    start, end, page) and the texts. Built from a list (a fresh index) or opened from
    saved arrays (texts as one UTF-8 buffer with offsets, memory-mapped)."""

    def __init__(self, doc_names: list[str], doc_of: np.ndarray, spans: np.ndarray, text: Callable[[int], str],
                 chunks: list[Chunk] | None = None) -> None:
        self.doc_names, self.doc_of, self.spans = doc_names, doc_of, spans
        self._text = text
        self._chunks = chunks
        self._codes: dict[str, int] | None = None  # document name -> its number, made on first use

    @classmethod
    def from_chunks(cls, chunks: Sequence[Chunk]) -> ChunkTable:
        if isinstance(chunks, ChunkTable):
            return chunks
        chunks = list(chunks)
        names: dict[str, int] = {}
        doc_of = np.array([names.setdefault(c.doc, len(names)) for c in chunks], dtype=np.int32)
        spans = np.array([(c.index, c.start, c.end, c.page) for c in chunks], dtype=np.int64).reshape(len(chunks), 4)
        return cls(list(names), doc_of, spans, lambda i: chunks[i].text, chunks)

    def updated(self, keep: np.ndarray, new: Sequence[Chunk], at: np.ndarray | None = None) -> ChunkTable:
        """A new table: this one's chunks where ``keep`` is true, in order, with ``new`` at
        positions ``at`` (``interleave``) - an index after a write, without copying texts (a
        saved table's stay on disk) or building a ``Chunk`` per kept row. This table is left
        as it was: queries may be reading it."""
        fresh = ChunkTable.from_chunks(list(new))
        used, doc_of = np.unique(np.asarray(self.doc_of)[keep], return_inverse=True)
        names = {self.doc_names[int(c)]: i for i, c in enumerate(used)}  # a removed document's name goes
        codes = np.array([names.setdefault(d, len(names)) for d in fresh.doc_names], dtype=np.int32)
        doc_of = interleave(doc_of.astype(np.int32), None, codes[fresh.doc_of], at).astype(np.int32)
        spans = interleave(self.spans, keep, fresh.spans, at)
        if self._chunks is not None:
            chunks: list[Chunk] = interleave(_objects(self._chunks), keep, _objects(list(fresh)), at).tolist()
            return ChunkTable(list(names), doc_of, spans, lambda i: chunks[i].text, chunks)
        return ChunkTable(list(names), doc_of, spans, _Stitched.of(self._text, keep, [c.text for c in fresh], at))

    def __len__(self) -> int:
        return len(self.doc_of)

    @overload
    def __getitem__(self, i: SupportsIndex) -> Chunk: ...

    @overload
    def __getitem__(self, i: slice) -> list[Chunk]: ...

    def __getitem__(self, i: SupportsIndex | slice) -> Chunk | list[Chunk]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = operator.index(i)
        if self._chunks is not None:
            return self._chunks[i]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("chunk index out of range")
        doc = self.doc_names[int(self.doc_of[i])]
        index, start, end, page = (int(x) for x in self.spans[i])
        return Chunk(f"{doc}#{index}", doc, index, start, end, self._text(i), page)

    def __iter__(self) -> Iterator[Chunk]:
        if self._chunks is not None:
            return iter(self._chunks)
        return (self[i] for i in range(len(self)))

    def doc(self, i: int) -> str:
        """The document of chunk ``i``, without building the chunk."""
        return self.doc_names[int(self.doc_of[i])]

    def docs(self) -> np.ndarray:
        """The document of every chunk (an object array), without building any chunk."""
        return np.array(self.doc_names, dtype=object)[self.doc_of] if len(self) else np.array([], dtype=object)

    def texts(self) -> list[str]:
        return [self._text(i) for i in range(len(self))]

    def codes(self) -> dict[str, int]:
        """Document name -> its number in ``doc_names`` (``doc_of``'s values)."""
        if self._codes is None:  # the table never changes (``updated`` makes another): name once
            self._codes = {n: c for c, n in enumerate(self.doc_names)}
        return self._codes

    def rows_at(self, places: Sequence[tuple[str, int]]) -> list[int]:
        """The rows of the chunks at ``(document, chunk index)`` places, those that exist; one
        pass over the document column (an answer's context: the neighbours of its hits)."""
        codes = self.codes()
        wanted = {(codes[d], i) for d, i in places if d in codes}
        if not wanted:
            return []
        rows = np.flatnonzero(np.isin(self.doc_of, np.array(sorted({c for c, _ in wanted}), dtype=np.int32)))
        return [int(r) for r in rows if (int(self.doc_of[r]), int(self.spans[r, 0])) in wanted]

    def texts_by_doc(self, docs: Sequence[str]) -> dict[str, str]:
        """The chunks of each of ``docs`` joined by blank lines, in chunk order."""
        names = set(docs)
        wanted = {d: k for k, d in enumerate(self.doc_names) if d in names}
        out: dict[str, list[str]] = {d: [] for d in wanted}
        for i in np.flatnonzero(np.isin(self.doc_of, list(wanted.values()))):
            out[self.doc_names[int(self.doc_of[i])]].append(self._text(int(i)))
        return {d: "\n\n".join(parts) for d, parts in out.items()}


def interleave(rows: np.ndarray, keep: np.ndarray | None, new: np.ndarray, at: np.ndarray | None) -> np.ndarray:
    """``rows`` where ``keep`` is true (all when ``None``), in order, with rows ``new`` at
    positions ``at`` of the result (ascending; ``None``: after them): an index after a write.
    The kept rows are copied run by run (a write leaves a few long runs: one memcpy each,
    from memory-mapped columns too), not gathered one by one."""
    kept = np.arange(len(rows)) if keep is None else np.flatnonzero(keep)
    out = np.empty((len(kept) + len(new), *rows.shape[1:]), dtype=np.result_type(rows, new))
    if at is None:
        at = np.arange(len(kept), len(out))
    free = np.ones(len(out), dtype=bool)
    free[at] = False
    dst = np.flatnonzero(free)
    breaks = np.flatnonzero((np.diff(kept) != 1) | (np.diff(dst) != 1)) + 1
    if len(breaks) >= 4096:  # scattered removals: one gather is cheaper than many small copies
        out[dst] = rows[kept]
    elif len(kept):
        for lo, hi in zip([0, *breaks.tolist()], [*breaks.tolist(), len(kept)]):
            out[dst[lo]:dst[lo] + hi - lo] = rows[kept[lo]:kept[lo] + hi - lo]
    out[at] = new
    return out


def _objects(items: Sequence[object]) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


class _Stitched:
    """The texts of an updated table: chunk ``i``'s text is text ``pos[i]`` of source
    ``src[i]`` (the saved columns, or a write's new texts). Flat, however many writes
    came before: each update re-points rows and drops sources no row reads any more."""

    def __init__(self, sources: list[Callable[[int], str]], src: np.ndarray, pos: np.ndarray) -> None:
        self.sources, self.src, self.pos = sources, src, pos

    def __call__(self, i: int) -> str:
        return self.sources[int(self.src[i])](int(self.pos[i]))

    @classmethod
    def of(cls, text: Callable[[int], str], keep: np.ndarray, new: list[str], at: np.ndarray | None) -> _Stitched:
        if isinstance(text, _Stitched):
            sources, src, pos = text.sources, text.src[keep], text.pos
        else:
            sources, src, pos = [text], np.zeros(int(np.count_nonzero(keep)), dtype=np.int32), np.arange(len(keep))
        used, src = np.unique(src, return_inverse=True)
        sources = [sources[int(s)] for s in used] + [new.__getitem__]
        return cls(sources, interleave(src.astype(np.int32), None, np.full(len(new), len(sources) - 1, dtype=np.int32), at),
                   interleave(pos, keep, np.arange(len(new), dtype=np.int64), at))


def save(folder: Path, manifest: dict[str, object], chunks: ChunkTable, vectors: np.ndarray, labels: Sequence[str],
         keyword: tuple[dict[str, np.ndarray], list[str]] | None, records: Sequence[list] = ()) -> None:
    """Write everything ``open_saved`` reads into ``folder``: every file synced, then the
    whole folder renamed into place (a reader, or a power cut, sees all of it or none)."""
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tmp.mkdir(parents=True)
    sums: dict[str, str] = {}
    try:
        encoded = [chunks._text(i).encode("utf-8") for i in range(len(chunks))]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        _write(tmp / "texts.bin", b"".join(encoded), sums)
        _save(tmp / "text_offsets.npy", offsets, sums)
        _save(tmp / "doc_of.npy", np.asarray(chunks.doc_of, dtype=np.int32), sums)
        _save(tmp / "spans.npy", np.asarray(chunks.spans, dtype=np.int64), sums)
        _save(tmp / "vectors.npy", np.ascontiguousarray(vectors, dtype=np.float32), sums)
        names = sorted(set(labels))
        code = {n: i for i, n in enumerate(names)}
        _save(tmp / "label_of.npy", np.array([code[x] for x in labels], dtype=np.int32), sums)
        # JSON, not lines: a document id may hold any character, newlines included.
        _write(tmp / "docs.json", json.dumps(chunks.doc_names, ensure_ascii=False).encode("utf-8"), sums)
        _write(tmp / "documents.json", json.dumps(list(records), ensure_ascii=False).encode("utf-8"), sums)
        meta = {**manifest, "format": SAVED_FORMAT, "chunks": len(chunks), "documents": len(records), "labels": names,
                "keyword": keyword is not None}
        if keyword is not None:
            arrays, terms = keyword
            for name, arr in arrays.items():
                _save(tmp / f"bm25_{name}.npy", arr, sums)
            _write(tmp / "bm25_terms.json", json.dumps(terms, ensure_ascii=False).encode("utf-8"), sums)
            meta["terms"] = len(terms)
        meta["sha256"] = sums
        _write(tmp / MANIFEST, json.dumps(meta, sort_keys=True).encode("utf-8"))
        _sync_dir(tmp)
        if folder.exists():  # built with other settings, or damaged: set it aside, then swap
            aside = folder.with_name(f"{folder.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}")
            try:
                folder.rename(aside)
            except OSError:
                pass
            shutil.rmtree(aside, ignore_errors=True)  # a reader that has it open keeps its files
        try:
            tmp.rename(folder)
            _sync_dir(folder.parent)
        except OSError:  # another process saved the same generation just now: theirs is as good
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class _Hashing:
    """A file that hashes what is written to it: each saved file's sha256 goes in the
    manifest, and ``verify`` (``microrag check``) compares."""

    def __init__(self, f: BinaryIO) -> None:
        self.f, self.sha = f, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        return self.f.write(data)


def _write(path: Path, data: bytes, sums: dict[str, str] | None = None) -> None:
    with open(path, "wb") as f:
        out = _Hashing(f)
        out.write(data)
        f.flush()
        os.fsync(f.fileno())
    if sums is not None:
        sums[path.name] = out.sha.hexdigest()


def _save(path: Path, array: np.ndarray, sums: dict[str, str] | None = None) -> None:
    with open(path, "wb") as f:
        out = _Hashing(f)
        np.save(out, array)  # np.save needs only .write
        f.flush()
        os.fsync(f.fileno())
    if sums is not None:
        sums[path.name] = out.sha.hexdigest()


def verify(folder: Path) -> list[str]:
    """Problems of a saved folder: files whose bytes no longer match the checksum saved with
    them (opening checks only sizes and counts: hashing every file would cost what mapping saves)."""
    try:
        sums = json.loads((folder / MANIFEST).read_text(encoding="utf-8")).get("sha256", {})
    except (OSError, ValueError):
        return [f"{folder.name}: no readable manifest"]
    problems = []
    for name, want in sorted(sums.items()):
        sha = hashlib.sha256()
        try:
            with open(folder / name, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    sha.update(block)
        except OSError as exc:
            problems.append(f"{folder.name}/{name}: {exc.strerror}")
            continue
        if sha.hexdigest() != want:
            problems.append(f"{folder.name}/{name} does not match its checksum")
    return problems


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Later:
    """A JSON file opened now and parsed on first use, once, whichever thread asks first
    (the server's request threads may race to it). The open descriptor keeps the file
    readable after a newer generation's cleanup removes its folder."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDONLY)
        self._size = os.fstat(self._fd).st_size
        self._value: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        with self._lock:
            if self._fd >= 0:
                try:
                    self._value = json.loads(os.pread(self._fd, self._size, 0))
                finally:
                    os.close(self._fd)
                    self._fd = -1
            return self._value


class Saved:
    """An opened ``derived-<generation>`` folder: memory-mapped columns, nothing parsed yet."""

    def __init__(self, folder: Path, manifest: dict[str, Any]) -> None:
        self.folder, self.manifest = folder, manifest
        n = int(manifest["chunks"])
        self.n_documents = int(manifest["documents"])
        self.vectors = np.load(folder / "vectors.npy", mmap_mode="r")
        offsets = np.load(folder / "text_offsets.npy", mmap_mode="r")
        blob = np.memmap(folder / "texts.bin", dtype=np.uint8, mode="r") if offsets[-1] else np.zeros(0, np.uint8)

        def text(i: int) -> str:
            return bytes(blob[offsets[i]:offsets[i + 1]]).decode("utf-8")

        names = json.loads((folder / "docs.json").read_bytes())
        doc_of, spans = np.load(folder / "doc_of.npy", mmap_mode="r"), np.load(folder / "spans.npy", mmap_mode="r")
        label_of = np.load(folder / "label_of.npy")
        label_names = list(manifest["labels"])
        # A folder that disagrees with itself (truncated by a crash, edited by hand) is never used.
        if not (len(self.vectors) == len(offsets) - 1 == len(doc_of) == len(spans) == len(label_of) == n
                and int(offsets[-1]) == len(blob) and (n == 0 or int(doc_of.max()) < len(names))
                and (n == 0 or int(label_of.max()) < len(label_names))):
            raise ValueError(f"{folder} is inconsistent")
        self.chunks = ChunkTable(names, doc_of, spans, text)
        self.labels = np.array(label_names, dtype=object)[label_of]
        self.keyword: tuple[dict[str, np.ndarray], Callable[[], list[str]]] | None = None
        if manifest.get("keyword"):
            arrays = {k: np.load(folder / f"bm25_{k}.npy", mmap_mode="r") for k in ("indptr", "indices", "tf", "dl")}
            terms = int(manifest["terms"])
            if (len(arrays["indptr"]) != terms + 1 or len(arrays["dl"]) != n or len(arrays["tf"]) != len(arrays["indices"])
                    or int(arrays["indptr"][-1]) != len(arrays["indices"])):
                raise ValueError(f"{folder} has inconsistent keyword postings")
            later = _Later(folder / "bm25_terms.json")
            self.keyword = (arrays, lambda: list(later.get()))
        self.documents = _Later(folder / "documents.json")


R = TypeVar("R")


class SavedRecords(Mapping[str, R]):
    """The documents' records (saved as JSON rows, the first field the id), parsed by
    ``make`` on first use: ranking does not need them, a filter or a listing does.
    ``len`` comes from the manifest."""

    def __init__(self, rows: _Later, count: int, make: Callable[[list], R]) -> None:
        self._rows, self._count, self._make = rows, count, make
        self._records: dict[str, R] | None = None
        self._lock = threading.Lock()

    def _all(self) -> dict[str, R]:
        with self._lock:
            if self._records is None:
                self._records = {row[0]: self._make(row) for row in self._rows.get()}
            return self._records

    def __getitem__(self, doc: str) -> R:
        return self._all()[doc]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return self._count if self._records is None else len(self._records)


def open_saved(folder: Path | None, expect: dict[str, object]) -> Saved | None:
    """The saved folder if it is complete, consistent and was built as ``expect`` says; else
    ``None`` (the caller derives the index from its store again)."""
    if folder is None:
        return None
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if manifest.get("format") != SAVED_FORMAT or any(manifest.get(k) != v for k, v in expect.items()):
        return None
    try:
        return Saved(folder, manifest)
    except Exception:  # damaged in any way (numpy raises EOFError, ValueError, OSError...): rebuild
        return None
