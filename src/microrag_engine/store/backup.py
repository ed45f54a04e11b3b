"""Backup and restore of a folder index: every SQLite database in it, copied while it is live.

A folder index holds SQLite databases (the store ``index.sqlite``; a server's ``keys.sqlite``
and ``server.sqlite``: keys, review queue, audit trail) and caches derived from the store
(``index.derived-<generation>/``, ``index.hnsw-<generation>.faiss``). ``backup`` copies each
database with SQLite's online backup API, which reads one consistent snapshot while writers go
on, and writes a manifest (``microrag-backup.json``: version, time, the store's generation and
counts, each file's SHA-256). ``restore`` checks all of that before it installs anything.

What it does not do: derived caches are never copied (the first open after a restore derives
them again, so no cache can disagree with the restored store); the databases are each consistent
but copied one after another, not at one instant across files (a server's audit row written
between two copies may be in one and not the other); a PostgreSQL index is pg_dump's job.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ..errors import MicroRAGError
from .base import FORMAT_VERSION
from .sqlite import SQLiteStore

MANIFEST = "microrag-backup.json"
BACKUP_FORMAT = 1  # the manifest's own layout; bumped when it changes
STORE_FILE = "index.sqlite"
SQLITE_HEADER = b"SQLite format 3\x00"
# A database's companions: the backup API reads through them, so they are never copied.
COMPANIONS = ("-wal", "-shm", "-journal")
# Caches derived from the store (store/sqlite.py ``cache_path``), with their temp/old variants.
DERIVED = re.compile(r"^(?:[^.]+\.)?(?:derived|hnsw)-\d+")
PG_STEPS = ("a PostgreSQL index is backed up with pg_dump and restored with pg_restore, not with microrag: "
            "see docs/operating/backup.md")


@dataclass
class BackupReport:
    """What a backup copied (``files``: name -> sha256) and left out (``skipped``: name -> why)."""

    dest: Path
    generation: int
    documents: int
    chunks: int
    files: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass
class RestoreReport:
    """What a restore installed, and where the index it replaced was kept (``None``: there was none)."""

    index: Path
    generation: int
    documents: int
    chunks: int
    files: list[str] = field(default_factory=list)
    replaced: Path | None = None


# ---------------------------------------------------------------- backup


def backup(index: str | Path, dest: str | Path, microrag_version: str) -> BackupReport:
    """Copy the folder index ``index`` into ``dest`` (absent or an empty folder), consistently
    while a server or an ingest may be writing it.

    Args:
        index: the index folder (it must hold ``index.sqlite``).
        dest: where the backup goes; written beside it first and renamed into place at the end,
            so a failed backup leaves no half-written ``dest``.
        microrag_version: recorded in the manifest (the caller's ``microrag_engine.__version__``:
            this layer may not import the package root, which reaches the engine).

    Returns:
        A ``BackupReport``. Raises ``MicroRAGError`` for anything a user can fix.
    """
    src = _index_folder(index)
    out = Path(dest)
    _check_free(out, what="backup destination")
    if out.resolve().is_relative_to(src.resolve()):
        raise MicroRAGError(f"the backup destination {out} is inside the index {src}; put it elsewhere")
    stage = _stage_beside(out, "partial")
    try:
        report = _copy_into(src, stage, microrag_version)
        _install(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    report.dest = out
    return report


def _copy_into(src: Path, stage: Path, microrag_version: str) -> BackupReport:
    """Every database of ``src`` into ``stage`` (store first), then the manifest."""
    databases, skipped = _classify(src)
    store = _copy_database(src / STORE_FILE, stage / STORE_FILE)
    for name in databases:
        if name != STORE_FILE:
            _copy_database(src / name, stage / name)
    files = {name: sha256(stage / name) for name in sorted(databases)}
    report = BackupReport(stage, store["generation"], store["documents"], store["chunks"], files, skipped)
    manifest = {"kind": "microrag-backup", "format": BACKUP_FORMAT, "microrag": microrag_version, "store_format": FORMAT_VERSION,
                "created": datetime.now(UTC).isoformat(timespec="seconds"), "source": str(src.resolve()),
                "store": {"file": STORE_FILE, **store}, "databases": sorted(databases),
                "files": files, "skipped": skipped}
    (stage / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    _fsync_tree(stage)
    return report


def _classify(src: Path) -> tuple[list[str], dict[str, str]]:
    """The index folder's databases, and what is left out with the reason."""
    databases, skipped = [], {}
    for entry in sorted(src.iterdir()):
        name = entry.name
        if name.endswith(COMPANIONS):
            continue  # read through by the backup API
        if DERIVED.match(name):
            skipped[name] = "derived cache: rebuilt on the first open"
        elif entry.is_file() and (name.endswith(".sqlite") or _is_sqlite(entry)):
            databases.append(name)
        else:
            skipped[name] = "not a SQLite database of the index"
    return databases, skipped


def _copy_database(src: Path, dst: Path) -> dict:
    """``src`` -> ``dst`` with SQLite's online backup API: one read transaction on ``src``, so the
    copy is one committed state while writers go on (WAL). The copy is left in rollback-journal
    mode, one self-contained file whose checksum stays put; the store itself switches back to WAL
    when it is opened. Returns the store's generation and counts when ``src`` is a store."""
    # A plain connection that only reads: a read-only one cannot open a WAL database whose -shm
    # file is absent (no other connection open), and this one never writes.
    source = sqlite3.connect(src, timeout=30)
    try:
        target = sqlite3.connect(dst, isolation_level=None)
        try:
            source.backup(target)  # pages=-1: the whole database in one step, one snapshot
            target.execute("PRAGMA journal_mode=DELETE")
            return _store_counts(target) if dst.name == STORE_FILE else {}
        finally:
            target.close()
    except sqlite3.Error as exc:
        raise MicroRAGError(f"cannot back up {src}: {exc}") from None
    finally:
        source.close()


def _store_counts(db: sqlite3.Connection) -> dict:
    """The copied store's generation, identity and counts, read from the copy itself."""
    meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    docs = db.execute("SELECT count(*) FROM documents").fetchone()[0]
    chunks = db.execute("SELECT count(*) FROM chunks").fetchone()[0]
    return {"generation": int(meta.get("generation", 0)), "store_id": meta.get("store_id", ""),
            "documents": int(docs), "chunks": int(chunks)}


# ---------------------------------------------------------------- restore


def restore(src: str | Path, index: str | Path, force: bool = False) -> RestoreReport:
    """Check the backup ``src`` and install it as the folder index ``index``.

    Args:
        src: a folder ``backup`` wrote.
        index: the index folder to install into; absent or empty, or (with ``force``) an index
            that is replaced: kept beside it as ``<index>.replaced-<time>``.
        force: replace an existing non-empty ``index``.

    Returns:
        A ``RestoreReport``. Raises ``MicroRAGError`` when the backup fails a check (checksums,
        ``PRAGMA integrity_check``, the store's counts) or ``index`` is in the way; ``index``
        is untouched then.
    """
    if is_postgres(index):
        raise MicroRAGError(PG_STEPS)
    folder, target = Path(src), Path(index)
    if target.resolve() == folder.resolve():
        raise MicroRAGError(f"{folder} is the backup itself; restore it into another folder with --index DIR")
    manifest = read_manifest(folder)
    occupied = target.exists() and not _is_empty_dir(target)
    if target.exists() and not target.is_dir():
        raise MicroRAGError(f"{target} is a file, not an index folder; pass a folder to --index")
    if occupied and not force:
        raise MicroRAGError(f"{target} already holds {_describe(target)}; pass --force to replace it "
                            f"(the old one is kept as {target.name}.replaced-<time>)")
    if not target.parent.resolve().is_dir():
        raise MicroRAGError(f"the index's folder {target.parent} does not exist")
    stage = _stage_beside(target, "restoring")
    try:
        for name in manifest["files"]:  # a plain copy: nothing writes a backup
            shutil.copyfile(folder / name, stage / name)
        counts = verify_staged(stage, manifest)  # what is installed is exactly what was checked
        _fsync_tree(stage)
        replaced = None
        if occupied:
            replaced = _swap(stage, target)
        else:
            _install(stage, target)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return RestoreReport(target, counts["generation"], counts["documents"], counts["chunks"], sorted(manifest["files"]), replaced)


def read_manifest(folder: Path) -> dict:
    """The backup's manifest, its file names checked to be plain names inside ``folder``."""
    path = folder / MANIFEST
    if not path.is_file():
        raise MicroRAGError(f"{folder} is not a microrag backup (no {MANIFEST}); make one with: microrag backup DEST")
    try:
        manifest = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise MicroRAGError(f"{path} is not a readable manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != "microrag-backup":
        raise MicroRAGError(f"{path} is not a microrag backup manifest")
    if manifest.get("format") != BACKUP_FORMAT:
        raise MicroRAGError(f"{path} is backup format {manifest.get('format')}; this microrag reads {BACKUP_FORMAT}")
    files, store = manifest.get("files"), manifest.get("store")
    if not isinstance(files, dict) or not isinstance(store, dict) or STORE_FILE not in files:
        raise MicroRAGError(f"{path} lists no {STORE_FILE}: the backup is incomplete")
    for name in files:  # a crafted manifest must not reach outside the folder
        if not isinstance(name, str) or name != Path(name).name or name.startswith(".") or name == MANIFEST:
            raise MicroRAGError(f"{path} names {name!r}, which is not a file of a backup")
    if not set(manifest.get("databases", [])) <= set(files):
        raise MicroRAGError(f"{path} lists databases that are not among its files")
    extra = sorted(p.name for p in folder.iterdir() if p.name not in files and p.name != MANIFEST)
    if extra:
        raise MicroRAGError(f"{folder} holds {', '.join(extra)}, which its manifest does not list: not restored")
    return manifest


def verify_staged(stage: Path, manifest: dict) -> dict:
    """Checksums, ``PRAGMA integrity_check`` of each database, then the store opened and its
    counts compared with the manifest's. Returns the store's generation and counts."""
    for name, digest in manifest["files"].items():
        if not (stage / name).is_file():
            raise MicroRAGError(f"the backup lacks {name}, which its manifest lists")
        if sha256(stage / name) != digest:
            raise MicroRAGError(f"{name} in the backup does not match its checksum: the backup is damaged; not restored")
    for name in manifest.get("databases", [STORE_FILE]):
        _integrity(stage / name)
    store = SQLiteStore(stage, create=False)  # format version checked here
    try:
        problems = store.check()
        docs, generation = store.documents(), store.generation()
        chunks = int(store.db.execute("SELECT count(*) FROM chunks").fetchone()[0])
    finally:
        store.close()
    if problems:
        raise MicroRAGError(f"the backup's store fails its check ({problems[0]}); not restored")
    got = {"generation": generation, "documents": len(docs), "chunks": chunks}
    want = {k: manifest["store"].get(k) for k in got}
    if got != want:
        raise MicroRAGError(f"the backup's store holds {got}, its manifest says {want}; not restored")
    return got


def _integrity(path: Path) -> None:
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = [r[0] for r in db.execute("PRAGMA integrity_check")]
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        raise MicroRAGError(f"{path.name} in the backup is not a sound SQLite database ({exc}); not restored") from None
    if rows != ["ok"]:
        raise MicroRAGError(f"{path.name} in the backup fails PRAGMA integrity_check ({rows[0]}); not restored")


def _swap(stage: Path, target: Path) -> Path:
    """Move ``target`` aside and ``stage`` into its place: two renames on one filesystem. If the
    second fails, the first is undone, so ``target`` is never left missing."""
    kept = _free_name(target, "replaced-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"))
    os.rename(target, kept)
    try:
        os.rename(stage, target)
    except BaseException:
        os.rename(kept, target)
        raise
    _fsync_dir(target.parent)
    return kept


# ---------------------------------------------------------------- helpers


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_postgres(location: str | Path) -> bool:
    return str(location).startswith(("postgresql://", "postgres://"))


def _index_folder(index: str | Path) -> Path:
    if is_postgres(index):
        raise MicroRAGError(PG_STEPS)
    src = Path(index)
    if src.suffix == ".sqlite" and src.is_file():
        raise MicroRAGError(f"{src} is a lone store file; backup takes an index folder (a lone file: sqlite3 {src} '.backup FILE')")
    if not (src / STORE_FILE).is_file():
        raise MicroRAGError(f"no index at {src}; build one with: microrag ingest PATH --index {src}")
    return src


def _check_free(path: Path, what: str) -> None:
    if path.exists() and not _is_empty_dir(path):
        raise MicroRAGError(f"the {what} {path} already exists; name a new folder (or an empty one)")
    if not path.parent.resolve().is_dir():
        raise MicroRAGError(f"the {what}'s folder {path.parent} does not exist")


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def _is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(16) == SQLITE_HEADER
    except OSError:
        return False


def _stage_beside(path: Path, kind: str) -> Path:
    """A new folder beside ``path`` (same filesystem, so the final rename is atomic), named with
    our pid so a crashed run's leftover is recognisable."""
    stage = path.parent / f".{path.name}.{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        stage.mkdir()
    except OSError as exc:
        raise MicroRAGError(f"cannot write beside {path}: {exc.strerror}") from None
    return stage


def _install(stage: Path, target: Path) -> None:
    """Rename ``stage`` to ``target`` (absent, or an empty folder removed first)."""
    if _is_empty_dir(target):
        target.rmdir()
    try:
        os.rename(stage, target)
    except OSError as exc:  # someone created it meanwhile
        raise MicroRAGError(f"cannot move the result into {target}: {exc.strerror}") from None
    _fsync_dir(target.parent)  # the rename itself survives a power cut


def _free_name(path: Path, suffix: str) -> Path:
    candidate = path.with_name(f"{path.name}.{suffix}")
    n = 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.{suffix}-{n}")
    return candidate


def _describe(folder: Path) -> str:
    """A few words on what is in ``folder``, without opening anything in it (even a read-only
    connection to a WAL database leaves -wal/-shm files behind)."""
    if (folder / STORE_FILE).is_file():
        return "an index"
    return f"{sum(1 for _ in folder.iterdir())} entries"


def _fsync_tree(folder: Path) -> None:
    """Flush the staged files and the folder itself before the rename makes them the result."""
    for entry in folder.iterdir():
        with entry.open("rb") as f:
            os.fsync(f.fileno())
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
