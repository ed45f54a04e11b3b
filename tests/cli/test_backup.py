"""``microrag backup`` / ``restore`` (store/backup.py): real processes, real SQLite files.

A backup of a live folder index restores to the same index (hits, keys, review queue, audit
trail); one taken while another process writes restores to a committed state that passes
``microrag check``; a damaged backup, an occupied target and a PostgreSQL index are refused
in one line, leaving the target as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from microrag_engine import __version__
from microrag_engine.engine import demo_corpus
from microrag_engine.errors import MicroRAGError
from microrag_engine.server.auth import KeyStore
from microrag_engine.server.state import ServerState
from microrag_engine.store import backup as backup_module
from microrag_engine.store.backup import MANIFEST, backup, restore

QUERY = "how many vacation days do I get?"


def hashes(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` -> its SHA-256: what "untouched" means."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def one_line_error(proc: subprocess.CompletedProcess, needle: str) -> None:
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("microrag: error: ") and needle in proc.stderr, proc.stderr


def hits(index: Path | str) -> list[tuple[str, float]]:
    proc = run_cli("retrieve", "--index", str(index), "--json", "--top-k", "4", QUERY)
    assert proc.returncode == 0, proc.stderr
    return [(h["id"], round(h["hybrid"], 6)) for h in json.loads(proc.stdout)]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, str]:
    """The demo handbook (seed preset: fast) with a key, a held upload and audit rows beside it,
    and its derived cache saved by a first query. Tests copy it; none writes this one."""
    ix = tmp_path_factory.mktemp("built") / "ix"
    assert run_cli("ingest", str(demo_corpus()), "--index", str(ix), "--preset", "seed").returncode == 0
    key = run_cli("keys", "add", "alice", "--role", "contributor", "--index", str(ix), "-q").stdout.strip()
    assert key.startswith("mrg_")
    state = ServerState(ix / "server.sqlite")
    state.queue("@alice/runbooks/vpn.md", "public", "alice", {"why": "test"}, ["held for review"], version="v1")
    for n in range(3):
        state.audit("alice", "query", f"question {n}", [{"id": "x#0"}], "answered", [])
    state.tables.db.close()
    hits(ix)  # saves index.derived-<generation>/ beside the store
    assert any(p.name.startswith("index.derived-") for p in ix.iterdir())
    return ix, key


@pytest.fixture
def index(built, tmp_path) -> Path:
    copy = tmp_path / "ix"
    shutil.copytree(built[0], copy)
    return copy


# ---------------------------------------------------------------- (1) a backup restores the index


def test_a_restored_backup_answers_as_the_original_with_its_keys_queue_and_audit_trail(built, index, tmp_path):
    key = built[1]
    bk, restored = tmp_path / "bk", tmp_path / "restored"
    made = run_cli("backup", str(bk), "--index", str(index), "--json")
    assert made.returncode == 0, made.stderr
    report = json.loads(made.stdout)
    assert sorted(report["files"]) == ["index.sqlite", "keys.sqlite", "server.sqlite"]
    assert any(name.startswith("index.derived-") for name in report["skipped"])  # caches are rebuilt, never copied
    manifest = json.loads((bk / MANIFEST).read_text())
    assert manifest["store"]["documents"] == 14 and manifest["store"]["chunks"] == report["chunks"] > 0
    assert manifest["microrag"] == __version__ and manifest["created"] and set(manifest["files"]) == set(report["files"])
    assert sorted(p.name for p in bk.iterdir()) == sorted([*report["files"], MANIFEST])

    done = run_cli("restore", str(bk), "--index", str(restored))
    assert done.returncode == 0 and "14 documents" in done.stdout, done.stderr
    check = run_cli("check", "--index", str(restored))
    assert check.returncode == 0 and check.stdout.startswith("OK: 14 documents"), check.stdout
    assert hits(restored) == hits(index)
    assert KeyStore(restored / "keys.sqlite").resolve(key).name == "alice"  # the same key works
    before, after = ServerState(index / "server.sqlite"), ServerState(restored / "server.sqlite")
    assert after.pending() == before.pending() and [e["doc"] for e in after.pending()] == ["@alice/runbooks/vpn.md"]
    assert after.trail(50) == before.trail(50) and len(after.trail(50)) == 3
    assert after.fingerprint("q") == before.fingerprint("q")  # the audit key came along: old fingerprints still match
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left behind


# ---------------------------------------------------------------- (2) a backup while another process writes

WRITER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from microrag_engine.config import preset
    from microrag_engine.ingest import delete_documents, ingest_paths
    from microrag_engine.server.state import ServerState
    from microrag_engine.store import open_store

    index, docs, log = Path(sys.argv[1]), Path(sys.argv[2]), open(sys.argv[3], "a")
    store, state, seed = open_store(index), ServerState(index / "server.sqlite"), preset("seed")
    for i in range(10**6):
        if i % 3 == 2 and store.documents():
            delete_documents(store, [sorted(store.documents())[i % len(store.documents())]])
        else:
            (docs / f"note{i % 7}.md").write_text(f"# Note {i}\\n\\n" + f"Revision {i} of the rota. " * (20 + i % 30))
            ingest_paths(store, [docs], seed, collection="live")
        state.audit("writer", "query", f"write {i}", [], "answered", [])
        log.write(json.dumps([store.generation(), sorted(store.documents())]) + "\\n")
        log.flush()
""")


def test_a_backup_taken_while_another_process_writes_restores_a_committed_state(index, tmp_path):
    docs, log = tmp_path / "live", tmp_path / "writes.jsonl"
    docs.mkdir()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(index), str(docs), str(log)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while (not log.exists() or len(log.read_text().splitlines()) < 3) and time.monotonic() < deadline:
            assert writer.poll() is None, "the writer died"
            time.sleep(0.05)
        backups = []
        for n in range(3):  # each while the writer is mid-loop
            made = run_cli("backup", str(tmp_path / f"bk{n}"), "--index", str(index), "-q")
            assert made.returncode == 0, made.stderr
            backups.append(tmp_path / f"bk{n}")
        assert writer.poll() is None, "the writer stopped before the backups were done"
    finally:
        writer.kill()
        writer.wait()
    # What the writer committed, by generation: the store after each of its writes.
    committed = {gen: docs_ for gen, docs_ in map(json.loads, log.read_text().splitlines())}
    generations = set()
    for n, bk in enumerate(backups):
        restored = tmp_path / f"restored{n}"
        assert run_cli("restore", str(bk), "--index", str(restored)).returncode == 0
        check = run_cli("check", "--index", str(restored), "--json")
        assert check.returncode == 0 and json.loads(check.stdout)["problems"] == [], check.stdout
        gen = json.loads(check.stdout)["generation"]
        generations.add(gen)
        listed = json.loads(run_cli("documents", "--index", str(restored), "--json").stdout)
        live = sorted(d["doc"] for d in listed if d["doc"].startswith("live/"))
        # the documents of exactly one committed write, never a mix (the writer's first
        # generations may predate its log's first line only if the backup came before it: it did not)
        assert gen in committed and live == [d for d in committed[gen] if d.startswith("live/")], gen
        trail = ServerState(restored / "server.sqlite").trail(10**6)
        assert 3 <= len(trail) and len({r["ts"] + r["query"] for r in trail}) == len(trail)
    assert len(generations) > 1  # the writer really moved between backups


# ---------------------------------------------------------------- (3) a damaged backup is refused


@pytest.mark.parametrize("damage", ["index.sqlite", "server.sqlite", "manifest-counts", "no-manifest"])
def test_a_damaged_backup_is_refused_and_the_target_is_untouched(index, tmp_path, damage):
    bk, target = tmp_path / "bk", tmp_path / "target"
    backup(index, bk, __version__)
    shutil.copytree(index, target)
    if damage.endswith(".sqlite"):
        raw = bytearray((bk / damage).read_bytes())
        raw[len(raw) // 2] ^= 0x01  # one bit, in the middle of the database
        (bk / damage).write_bytes(bytes(raw))
        needle = "does not match its checksum"
    elif damage == "manifest-counts":  # checksums agree with the files, the counts do not: caught by opening the store
        manifest = json.loads((bk / MANIFEST).read_text())
        manifest["store"]["documents"] += 1
        (bk / MANIFEST).write_text(json.dumps(manifest))
        needle = "its manifest says"
    else:
        (bk / MANIFEST).unlink()
        needle = "is not a microrag backup"
    before = hashes(target)
    one_line_error(run_cli("restore", str(bk), "--index", str(target), "--force"), needle)
    assert hashes(target) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bk", "ix", "target"]  # no staging folder, nothing replaced


def test_a_database_that_fails_its_integrity_check_is_refused(index, tmp_path):
    """Damage the checksums cannot see (the manifest rewritten to match): PRAGMA integrity_check does."""
    bk, target = tmp_path / "bk", tmp_path / "target"
    backup(index, bk, __version__)
    raw = bytearray((bk / "index.sqlite").read_bytes())
    page = 4096
    raw[page * 3: page * 3 + 64] = bytes(64)  # a b-tree page's header zeroed
    (bk / "index.sqlite").write_bytes(bytes(raw))
    manifest = json.loads((bk / MANIFEST).read_text())
    manifest["files"]["index.sqlite"] = hashlib.sha256(bytes(raw)).hexdigest()
    (bk / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(MicroRAGError, match="not a sound SQLite database|fails PRAGMA integrity_check"):
        restore(bk, target)
    assert not target.exists()


# ---------------------------------------------------------------- (4) an existing index is not overwritten


def test_restore_onto_an_existing_index_needs_force_and_keeps_the_old_one(index, tmp_path):
    bk, other = tmp_path / "bk", tmp_path / "other"
    backup(index, bk, __version__)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "only.md").write_text("# Only\n\nThe one document of another index, about the canteen menu.")
    assert run_cli("ingest", str(docs), "--index", str(other), "--preset", "seed").returncode == 0
    before = hashes(other)
    one_line_error(run_cli("restore", str(bk), "--index", str(other)), "pass --force")
    assert hashes(other) == before

    forced = run_cli("restore", str(bk), "--index", str(other), "--force")
    assert forced.returncode == 0 and "14 documents" in forced.stdout, forced.stderr
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("other.replaced-")]
    assert len(kept) == 1 and str(kept[0]) in forced.stdout  # said where the old one went
    assert hashes(kept[0]) == before
    assert run_cli("check", "--index", str(other)).returncode == 0


def test_restore_into_an_empty_folder_needs_no_force(index, tmp_path):
    bk, empty = tmp_path / "bk", tmp_path / "empty"
    backup(index, bk, __version__)
    empty.mkdir()
    assert restore(bk, empty).documents == 14
    assert (empty / "index.sqlite").is_file()


# ---------------------------------------------------------------- bad input, and a failed backup


def test_backup_mistakes_are_one_line_errors(index, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    one_line_error(run_cli("backup", str(tmp_path / "full"), "--index", str(index)), "already exists")
    one_line_error(run_cli("backup", str(tmp_path / "bk"), "--index", str(tmp_path / "nothing")), "no index at")
    one_line_error(run_cli("backup", str(index / "inside"), "--index", str(index)), "inside the index")
    one_line_error(run_cli("restore", str(tmp_path / "full"), "--index", str(tmp_path / "new")), "not a microrag backup")
    one_line_error(run_cli("restore", str(tmp_path / "full"), "--index", str(tmp_path / "full"), "--force"), "the backup itself")
    assert not (tmp_path / "bk").exists() and not (tmp_path / "new").exists()


def test_a_failed_backup_leaves_no_destination(index, tmp_path, monkeypatch):
    real = backup_module._copy_database

    def fail_on_keys(src: Path, dst: Path) -> dict:
        if src.name == "keys.sqlite":
            raise MicroRAGError("disk full (simulated)")
        return real(src, dst)

    monkeypatch.setattr(backup_module, "_copy_database", fail_on_keys)
    with pytest.raises(MicroRAGError, match="simulated"):
        backup(index, tmp_path / "bk", __version__)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ix"]  # neither DEST nor its staging folder


# ---------------------------------------------------------------- (5) PostgreSQL: pg_dump's job


@pytest.mark.parametrize("command", [["backup", "bk"], ["restore", "bk"]])
def test_a_postgresql_index_points_to_pg_dump(tmp_path, command):
    proc = run_cli(*command, "--index", "postgresql://rag@db.invalid/rag?schema=handbook")
    one_line_error(proc, "pg_dump")
    assert "docs/operating/backup.md" in proc.stderr and not (ROOT / "bk").exists()


PG = os.environ.get("MICRORAG_TEST_PG", "")
PG_BIN = Path("/usr/lib/postgresql/15/bin")


@pytest.mark.skipif(not PG, reason="set MICRORAG_TEST_PG (make test starts a server)")
@pytest.mark.skipif(not (PG_BIN / "pg_dump").exists(), reason=f"no pg_dump at {PG_BIN} (scripts/install-postgres.sh)")
def test_the_documented_pg_dump_steps_restore_a_postgresql_index_that_answers_the_same(tmp_path):
    """The documented steps (docs/operating/backup.md), run as written: pg_dump of the schema, the vector extension, pg_restore into
    another database of the test server; the restored index passes check, answers the same, keeps its keys."""
    schema = f"bk_{os.getpid()}_{random.randrange(10**9)}"
    source = f"{PG}?schema={schema}"
    assert run_cli("ingest", str(demo_corpus()), "--index", source, "--preset", "seed").returncode == 0
    assert run_cli("keys", "add", "alice", "--role", "contributor", "--index", source, "-q").returncode == 0
    dump = tmp_path / "handbook.dump"
    subprocess.run([PG_BIN / "pg_dump", "--format=custom", f"--schema={schema}", f"--file={dump}", PG], check=True)
    database = f"restored_{random.randrange(10**9)}"
    target = PG.rsplit("/", 1)[0] + "/" + database
    subprocess.run([PG_BIN / "psql", "-q", PG, "-c", f"CREATE DATABASE {database}"], check=True)
    try:
        subprocess.run([PG_BIN / "psql", "-q", target, "-c", "CREATE EXTENSION IF NOT EXISTS vector"], check=True)
        subprocess.run([PG_BIN / "pg_restore", f"--dbname={target}", "--clean", "--if-exists", "--single-transaction", dump],
                       check=True)
        restored = f"{target}?schema={schema}"
        check = run_cli("check", "--index", restored)
        assert check.returncode == 0, check.stderr
        assert hits(restored) == hits(source) and hits(source)
        keys = [json.loads(run_cli("keys", "list", "--json", "--index", ix).stdout) for ix in (source, restored)]
        assert [k["name"] for k in keys[1]] == ["alice"] and keys[0] == keys[1]
    finally:
        subprocess.run([PG_BIN / "psql", "-q", PG, "-c", f"DROP DATABASE IF EXISTS {database} WITH (FORCE)"], check=False)
        subprocess.run([PG_BIN / "psql", "-q", PG, "-c", f"DROP SCHEMA IF EXISTS {schema} CASCADE"], check=False)
