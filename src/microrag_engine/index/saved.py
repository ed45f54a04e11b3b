"""What an index derives from its store, saved beside it so opening costs milliseconds.

A store (``store/``) is the source of truth; the keyword matrix, the vectors and a
columnar copy of the chunks are derived from one of its generations. They are saved
once per generation in a folder ``derived-<generation>`` next to the store and
opened memory-mapped: nothing is parsed or copied until a query needs it, so the
cost of opening does not grow with the corpus (the chunk texts stay on disk until
a hit is shown). The folder is written under a temporary name and renamed whole,
so a reader sees a complete folder or none; ``manifest.json`` says what it was
built with, and a folder built with other settings is rebuilt, never trusted.
"""

from __future__ import annotations

import json
import operator
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import SupportsIndex, TextIO, TypeVar, overload

import numpy as np

from ..types import Chunk

SAVED_FORMAT = 1
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

    @classmethod
    def from_chunks(cls, chunks: Sequence[Chunk]) -> ChunkTable:
        if isinstance(chunks, ChunkTable):
            return chunks
        chunks = list(chunks)
        names: dict[str, int] = {}
        doc_of = np.array([names.setdefault(c.doc, len(names)) for c in chunks], dtype=np.int32)
        spans = np.array([(c.index, c.start, c.end, c.page) for c in chunks], dtype=np.int64).reshape(len(chunks), 4)
        return cls(list(names), doc_of, spans, lambda i: chunks[i].text, chunks)

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


def save(folder: Path, manifest: dict[str, object], chunks: ChunkTable, vectors: np.ndarray, labels: Sequence[str],
         keyword: tuple[dict[str, np.ndarray], list[str]] | None, records: Sequence[list] = ()) -> None:
    """Write everything ``open_saved`` reads into ``folder``, atomically (temp folder, rename)."""
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        encoded = [chunks._text(i).encode("utf-8") for i in range(len(chunks))]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        (tmp / "texts.bin").write_bytes(b"".join(encoded))
        np.save(tmp / "text_offsets.npy", offsets)
        np.save(tmp / "doc_of.npy", np.asarray(chunks.doc_of, dtype=np.int32))
        np.save(tmp / "spans.npy", np.asarray(chunks.spans, dtype=np.int64))
        np.save(tmp / "vectors.npy", np.ascontiguousarray(vectors, dtype=np.float32))
        names = sorted(set(labels))
        code = {n: i for i, n in enumerate(names)}
        np.save(tmp / "label_of.npy", np.array([code[x] for x in labels], dtype=np.int32))
        (tmp / "docs.txt").write_text("\n".join(chunks.doc_names), encoding="utf-8")
        (tmp / "documents.json").write_text(json.dumps(list(records), ensure_ascii=False), encoding="utf-8")
        meta = {**manifest, "format": SAVED_FORMAT, "chunks": len(chunks), "documents": len(records), "labels": names,
                "keyword": keyword is not None}
        if keyword is not None:
            arrays, terms = keyword
            for name, arr in arrays.items():
                np.save(tmp / f"bm25_{name}.npy", arr)
            # one term per line: terms come from bm25_tokens, which never yields a newline
            (tmp / "bm25_terms.txt").write_text("\n".join(terms), encoding="utf-8")
        (tmp / MANIFEST).write_text(json.dumps(meta, sort_keys=True), encoding="utf-8")
        if folder.exists():  # built with other settings, or damaged: set it aside, then swap
            aside = folder.with_name(f"{folder.name}.old-{os.getpid()}")
            try:
                folder.rename(aside)
            except OSError:
                pass
            shutil.rmtree(aside, ignore_errors=True)  # a reader that has it open keeps its files
        try:
            tmp.rename(folder)
        except OSError:  # another process saved the same generation just now: theirs is as good
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class Saved:
    """An opened ``derived-<generation>`` folder: memory-mapped columns, nothing parsed yet."""

    def __init__(self, folder: Path, manifest: dict) -> None:
        self.folder, self.manifest = folder, manifest
        self.vectors = np.load(folder / "vectors.npy", mmap_mode="r")
        offsets = np.load(folder / "text_offsets.npy", mmap_mode="r")
        blob = np.memmap(folder / "texts.bin", dtype=np.uint8, mode="r") if offsets[-1] else np.zeros(0, np.uint8)

        def text(i: int) -> str:
            return bytes(blob[offsets[i]:offsets[i + 1]]).decode("utf-8")

        # Files are opened now: a folder removed later (a newer generation) stays readable.
        with open(folder / "docs.txt", encoding="utf-8") as f:
            names = f.read().split("\n")
        self.chunks = ChunkTable(names, np.load(folder / "doc_of.npy", mmap_mode="r"), np.load(folder / "spans.npy", mmap_mode="r"), text)
        self.labels = np.array(manifest["labels"], dtype=object)[np.load(folder / "label_of.npy")]
        self.keyword: tuple[dict[str, np.ndarray], Callable[[], list[str]]] | None = None
        if manifest.get("keyword"):
            arrays = {n: np.load(folder / f"bm25_{n}.npy", mmap_mode="r") for n in ("data", "indices", "indptr", "df")}
            terms_file = open(folder / "bm25_terms.txt", encoding="utf-8")  # noqa: SIM115 - read on first query

            def terms() -> list[str]:
                with terms_file:
                    return terms_file.read().split("\n")

            self.keyword = (arrays, terms)
        self.documents = open(folder / "documents.json", encoding="utf-8")  # noqa: SIM115 - see SavedRecords


R = TypeVar("R")


class SavedRecords(Mapping[str, R]):
    """The documents' records (saved as JSON rows, the first field the id), parsed by
    ``make`` on first use: ranking does not need them, a filter or a listing does.
    ``len`` comes from the manifest."""

    def __init__(self, file: TextIO, count: int, make: Callable[[list], R]) -> None:
        self._file, self._count, self._make = file, count, make
        self._records: dict[str, R] | None = None

    def _all(self) -> dict[str, R]:
        if self._records is None:
            with self._file:
                self._records = {row[0]: self._make(row) for row in json.load(self._file)}
        return self._records

    def __getitem__(self, doc: str) -> R:
        return self._all()[doc]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return self._count if self._records is None else len(self._records)


def open_saved(folder: Path | None, expect: dict[str, object]) -> Saved | None:
    """The saved folder if it is complete and was built as ``expect`` says; else ``None``."""
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
    except (OSError, ValueError, KeyError):
        return None  # damaged: the caller rebuilds from the store
