"""The persistent index: backends, incremental ingest, labels, integrity, crash safety."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from conftest import ROOT, run_cli
from microrag_engine.config import override, preset
from microrag_engine.engine import Engine
from microrag_engine.errors import ConfigError, CorpusError, MicroRAGError
from microrag_engine.ingest import delete_documents
from microrag_engine.ingest import ingest_paths as ingest_named
from microrag_engine.store import open_store

SEED = preset("seed")
BACKENDS = ["sqlite"]
if os.environ.get("MICRORAG_TEST_PG"):
    BACKENDS.append("postgres")


def ingest_paths(store, paths, settings, **kw):
    """Ids as paths within the folder: these tests are about the store; collection naming
    has its own (tests/test_ingest.py)."""
    return ingest_named(store, paths, settings, collection="", **kw)


def new_location(backend: str, tmp: Path, name: str = "ix") -> str:
    """A fresh index location: a folder, or a Postgres URI with a schema of its own."""
    if backend == "sqlite":
        return str(tmp / name)
    return f"{os.environ['MICRORAG_TEST_PG']}?schema={name}_{os.getpid()}_{random.randrange(10**9)}"


def drop(location: str) -> None:
    if location.startswith("postgresql://"):
        s = open_store(location)
        s.drop()
        s.close()


@pytest.fixture(params=BACKENDS)
def location(request, tmp_path):
    loc = new_location(request.param, tmp_path)
    yield loc
    drop(loc)


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "sqlite":
        s = open_store(tmp_path / "ix")
    else:
        from microrag_engine.store.postgres import PostgresStore

        s = PostgresStore(os.environ["MICRORAG_TEST_PG"], schema=f"t_{os.getpid()}_{random.randrange(10**9)}")
    yield s
    if request.param == "postgres":
        s.drop()
    s.close()


def write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


CORPUS = {
    "password.md": "Password reset policy. Use the portal to reset your password. " * 8,
    "vpn.md": "VPN access uses GlobalProtect. Connect before internal services. " * 8,
    "db.md": "---\nlabel: restricted\n---\nThe production database hostname is db-prod. " * 1 + "Backups nightly. " * 30,
}


def test_ingest_twice_reports_zero_changes(store, tmp_path):
    corpus = write(tmp_path / "docs", CORPUS)
    first = ingest_paths(store, [corpus], SEED)
    assert sorted(first.added) == sorted(CORPUS) and first.chunks_written > 3
    second = ingest_paths(store, [corpus], SEED)
    assert second.changes == 0 and sorted(second.unchanged) == sorted(CORPUS)
    assert second.generation == first.generation  # nothing written, nothing bumped
    assert store.check() == []


def test_change_prune_and_delete(store, tmp_path):
    corpus = write(tmp_path / "docs", CORPUS)
    ingest_paths(store, [corpus], SEED)
    (corpus / "vpn.md").write_text("VPN now uses WireGuard on UDP port 51820.")
    (corpus / "password.md").unlink()
    r = ingest_paths(store, [corpus], SEED)
    assert r.changed == ["vpn.md"] and r.removed == []  # no --prune: the vanished file stays
    r = ingest_paths(store, [corpus], SEED, prune=True)
    assert r.removed == ["password.md"] and not r.changed
    assert set(store.documents()) == {"vpn.md", "db.md"}
    delete_documents(store, ["vpn.md"])
    assert set(store.documents()) == {"db.md"}
    with pytest.raises(CorpusError, match="no such document"):
        delete_documents(store, ["nope.md"])
    assert store.check() == []


def test_metadata_labels_and_provenance(store, tmp_path):
    corpus = write(tmp_path / "docs", CORPUS)
    ingest_paths(store, [corpus], SEED, principal="operator:alice")
    docs = store.documents()
    assert docs["db.md"].label == "restricted" and docs["vpn.md"].label == "public"
    assert docs["vpn.md"].principal == "operator:alice" and docs["vpn.md"].ingested_at
    assert docs["vpn.md"].origin.endswith("vpn.md")
    snap = store.snapshot()
    c = next(c for c in snap.chunks if c.doc == "db.md")
    assert "label:" not in c.text  # front-matter is metadata, not content
    # a flag relabels; relabelling alone counts as a change
    r = ingest_paths(store, [corpus / "vpn.md"], SEED, label="internal")
    assert r.changed == ["vpn.md"] and store.documents()["vpn.md"].label == "internal"


def test_filtered_retrieval_happens_before_top_k(store, tmp_path):
    files = {f"pub{i}.md": f"Shared topic kiwi fruit note {i}. " * 3 + "kiwi " * i for i in range(5)}
    files.update({f"sec{i}.md": f"---\nlabel: restricted\n---\nKiwi fruit kiwi fruit secret {i}. " * 3 for i in range(5)})
    ingest_paths(store, [write(tmp_path / "docs", files)], SEED)
    eng = Engine.from_store(store, override(SEED, top_k=4, max_per_source=1))
    everything = eng.retrieve("kiwi fruit", safeguards=True)
    assert any(h.chunk.doc.startswith("sec") for h in everything.hits)
    public = eng.retrieve("kiwi fruit", safeguards=True, labels=["public"])
    assert len(public.hits) == 4  # still top_k hits: filtered before ranking, not after
    assert all(h.chunk.doc.startswith("pub") for h in public.hits)
    # Normalisation saw only allowed chunks: the best allowed hit is exactly 1.0 on its leg.
    assert max(h.kw for h in public.hits) == 1.0
    assert eng.retrieve("kiwi fruit", safeguards=True, labels=[]).refused


def test_reserved_labels_are_never_retrieved_by_default(store, tmp_path):
    corpus = write(tmp_path / "docs", {"ok.md": "Kiwi fruit facts for everyone.", "held.md": "Kiwi fruit secret plan."})
    ingest_paths(store, [corpus / "ok.md"], override(SEED, keyword="bm25"))
    ingest_paths(store, [corpus / "held.md"], override(SEED, keyword="bm25"), label="_quarantine")
    for remote in ([False, True] if hasattr(store, "search") else [False]):
        eng = Engine.from_store(store, override(SEED, keyword="bm25"), remote=remote)
        docs = {h.chunk.doc for h in eng.retrieve("kiwi fruit", safeguards=False).hits}
        assert docs == {"ok.md"}, remote
        # asking for the reserved label explicitly does not reveal it either
        asked = {h.chunk.doc for h in eng.retrieve("kiwi fruit", safeguards=False, labels=["_quarantine", "public"]).hits}
        assert asked <= {"ok.md"}, remote


def test_index_refuses_incompatible_settings(store, tmp_path):
    ingest_paths(store, [write(tmp_path / "docs", CORPUS)], SEED)
    with pytest.raises(ConfigError, match="built with"):
        ingest_paths(store, [tmp_path / "docs"], override(SEED, size=500, overlap=50))
    with pytest.raises(ConfigError, match="built with"):
        Engine.from_store(store, override(SEED, embedder="minilm", chunker="sentences"))


def test_stored_engine_equals_in_memory_engine(store, tmp_path):
    corpus = write(tmp_path / "docs", CORPUS)
    ingest_paths(store, [corpus], SEED)
    stored = Engine.from_store(store, SEED)
    fresh = Engine.from_paths([corpus], SEED)
    for q in ("reset password", "database hostname", "vpn"):
        a, b = stored.retrieve(q), fresh.retrieve(q)
        assert [h.chunk.id for h in a.hits] == [h.chunk.id for h in b.hits]
        # vectors are stored as float32: equal to ~1e-7, not bit for bit
        assert np.allclose([h.hybrid for h in a.hits], [h.hybrid for h in b.hits], atol=1e-6)


def test_the_answer_context_is_the_same_neighbours_from_every_store(store, tmp_path):
    """``Engine.with_context``: the chunks next to each hit in its document, fetched from the
    database for a remote engine (``chunks_at``) and from memory otherwise; never a hit twice,
    never a chunk held back for restating the question, none with ``context_chunks`` 0."""
    from dataclasses import replace

    settings = override(SEED, keyword="bm25", context_chunks=1)
    long = " ".join(f"Step {i}: rotate the key ring and check the vault log {i}." for i in range(60))
    corpus = write(tmp_path / "docs", {**CORPUS, "vault.md": long})
    ingest_paths(store, [corpus], settings)
    stored, fresh = Engine.from_store(store, settings), Engine.from_paths([corpus], settings)
    for q in ("rotate the key ring", "vault log 42", "vpn"):
        a, b = (e.with_context(e.retrieve(q)) for e in (stored, fresh))
        assert [h.chunk.id for h in a.context] == [h.chunk.id for h in b.context]
        assert [h.chunk.text for h in a.context] == [h.chunk.text for h in b.context]
        hits = {(h.chunk.doc, h.chunk.index) for h in a.hits}
        for h in a.context:
            assert (h.chunk.doc, h.chunk.index) not in hits
            assert any(d == h.chunk.doc and abs(i - h.chunk.index) == 1 for d, i in hits)
    r = fresh.retrieve("rotate the key ring")
    near = fresh.with_context(r).context
    assert near, "a hit inside a 60-sentence page has neighbours"
    held = replace(r, held=[(near[0].chunk.id, "restates the question")])
    assert near[0].chunk.id not in {h.chunk.id for h in fresh.with_context(held).context}
    fresh.settings = override(settings, context_chunks=0)
    assert not fresh.with_context(r).context


# ---------------------------------------------------------------- property test

NAMES = ["a.md", "b.md", "sub/c.md", "d.txt"]
TEXTS = ["alpha beta gamma. " * 20, "delta epsilon. " * 50, "zeta eta theta iota.", "kappa " * 200, ""]
ops = st.lists(st.one_of(
    st.tuples(st.just("write"), st.sampled_from(NAMES), st.sampled_from(TEXTS)),
    st.tuples(st.just("remove"), st.sampled_from(NAMES), st.just("")),
    st.tuples(st.just("ingest"), st.just(""), st.just("")),
), min_size=1, max_size=12)


def _state(store):
    snap = store.snapshot()
    return ({d: (r.content_hash, r.label, r.n_chunks) for d, r in snap.documents.items()},
            [(c.id, c.start, c.end, c.text) for c in snap.chunks], snap.vectors)


@pytest.mark.parametrize("backend", BACKENDS)
@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops)
def test_incremental_ingest_equals_a_fresh_build(tmp_path_factory, backend, ops):
    base = tmp_path_factory.mktemp("prop")
    corpus = base / "docs"
    corpus.mkdir()
    locs = [new_location(backend, base, "ix"), new_location(backend, base, "fresh")]
    try:
        _property_run(corpus, *locs, ops)
    finally:
        for loc in locs:
            drop(loc)


def _property_run(corpus, loc, fresh_loc, ops):
    store = open_store(loc)
    (corpus / "keep.md").write_text("anchor document so the corpus is never empty.")
    for op, name, text in ops + [("ingest", "", "")]:
        if op == "write":
            (corpus / name).parent.mkdir(parents=True, exist_ok=True)
            (corpus / name).write_text(text)
        elif op == "remove" and (corpus / name).exists():
            (corpus / name).unlink()
        elif op == "ingest":
            ingest_paths(store, [corpus], SEED, prune=True)
            assert store.check() == []
    fresh = open_store(fresh_loc)
    ingest_paths(fresh, [corpus], SEED)
    (d1, c1, v1), (d2, c2, v2) = _state(store), _state(fresh)
    assert d1 == d2
    assert c1 == c2  # same ids, spans and texts: no duplicates, no orphans
    assert np.allclose(v1, v2)
    store.close()
    fresh.close()


# ---------------------------------------------------------------- crash safety

def _corpus_versions(tmp_path):
    a = {f"doc{i:02d}.md": f"Version A of document {i}. " * (20 + i) for i in range(30)}
    b = {f"doc{i:02d}.md": f"Version B of document {i} is different. " * (10 + i) for i in range(5, 40)}
    return a, b


def _hashes(store):
    try:
        return {d: r.content_hash for d, r in store.documents().items()}
    finally:
        store.close()


def _open(index):
    return open_store(index)


def _ingest_cmd(index, corpus):
    # --no-screen: these documents are one sentence repeated, which screening holds as stuffing
    return [sys.executable, "-m", "microrag_engine.cli", "ingest", "-q", "--preset", "seed", "--prune", "--no-screen",
            "--index", str(index), str(corpus)]


def _swap(corpus: Path, files: dict[str, str]) -> None:
    for p in corpus.glob("*.md"):
        p.unlink()
    write(corpus, files)


def test_sigkill_during_ingest_never_corrupts(tmp_path, location):
    a, b = _corpus_versions(tmp_path)
    corpus, index = tmp_path / "docs", location
    states, took = {}, []
    for name, files in (("B", b), ("A", a)):  # learn the exact committed states, and how long a run takes
        _swap(corpus, files)
        t0 = time.monotonic()
        subprocess.run(_ingest_cmd(index, corpus), check=True, cwd=ROOT)
        took.append(time.monotonic() - t0)
        states[name] = _hashes(_open(index))
    # Kill times spread over this machine's own run time (a fixed window let fast
    # machines finish most runs and kill too few), a little past it so some complete.
    window = 1.2 * min(took)
    rng = random.Random(1234)
    current = "A"
    kills = 0
    for i in range(14):
        target = "B" if current == "A" else "A"
        _swap(corpus, b if target == "B" else a)
        proc = subprocess.Popen(_ingest_cmd(index, corpus), cwd=ROOT)
        try:
            proc.wait(timeout=rng.uniform(0.05, window))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
        check = run_cli("check", "--index", str(index))
        assert check.returncode == 0, check.stdout + check.stderr
        got = _hashes(_open(index))
        assert got in (states["A"], states["B"]), f"round {i}: a mixed state"
        current = "A" if got == states["A"] else "B"
    assert kills >= 3  # the test really killed ingests mid-flight


def test_readers_see_old_or_new_never_a_mix(tmp_path, location):
    a, b = _corpus_versions(tmp_path)
    corpus, index = tmp_path / "docs", location
    states = {}
    for name, files in (("B", b), ("A", a)):
        _swap(corpus, files)
        subprocess.run(_ingest_cmd(index, corpus), check=True, cwd=ROOT)
        states[name] = _hashes(_open(index))
    stop = threading.Event()
    seen: list[str] = []
    bad: list[str] = []

    def reader():
        store = open_store(index)
        while not stop.is_set():
            snap = store.snapshot()
            h = {d: r.content_hash for d, r in snap.documents.items()}
            chunk_docs = {c.doc for c in snap.chunks}
            if h == states["A"]:
                seen.append("A")
            elif h == states["B"]:
                seen.append("B")
            else:
                bad.append("mixed documents")
            if chunk_docs != set(h):
                bad.append("chunks of another state")
        store.close()

    t = threading.Thread(target=reader)
    t.start()
    try:
        for files in (b, a, b, a):
            _swap(corpus, files)
            subprocess.run(_ingest_cmd(index, corpus), check=True, cwd=ROOT)
    finally:
        stop.set()
        t.join()
    assert not bad
    assert {"A", "B"} <= set(seen)


def test_cli_ingest_check_delete_roundtrip(tmp_path, location):
    corpus = write(tmp_path / "docs", CORPUS)
    ix = location
    first = run_cli("ingest", "--preset", "seed", "--index", ix, str(corpus))
    assert first.returncode == 0 and "3 added" in first.stdout, first.stderr
    again = run_cli("ingest", "--index", ix, str(corpus))  # preset inferred from the index
    assert again.returncode == 0 and "0 added, 0 changed, 3 unchanged" in again.stdout, again.stderr
    rank = run_cli("rank", "--index", ix, stdin="reset password\nflibberjab\n")
    assert rank.stdout.splitlines()[0].startswith("OK: docs/password.md#") and rank.stdout.splitlines()[1] == "REFUSE"
    pub = run_cli("retrieve", "--index", ix, "--labels", "public", "--json", "database hostname")
    assert "db.md" not in pub.stdout
    gone = run_cli("delete", "--index", ix, "docs/db.md")
    assert gone.returncode == 0
    assert run_cli("check", "--index", ix).stdout.startswith("OK: 2 documents")
    missing = run_cli("retrieve", "--index", str(tmp_path / "nothing"), "q")
    assert missing.returncode != 0 and "microrag ingest" in missing.stderr and "Traceback" not in missing.stderr


# ---------------------------------------------------------------- server-side search (Postgres)

needs_pg = pytest.mark.skipif("postgres" not in BACKENDS, reason="set MICRORAG_TEST_PG (make test starts a server)")


def _pg_store():
    from microrag_engine.store.postgres import PostgresStore

    return PostgresStore(os.environ["MICRORAG_TEST_PG"], schema=f"s_{os.getpid()}_{random.randrange(10**9)}")


@needs_pg
def test_postgres_bm25_equals_bm25s_and_cosine_equals_dot(tmp_path):
    """Parity with the reference: BM25 as sparse inner product == bm25s' Lucene BM25."""
    files = {f"d{i}.md": " ".join(random.Random(i).choices(
        ["alpha", "beta", "gamma", "delta", "reset", "password", "vpn", "port", "5432", "kiwi"], k=20 + 7 * i))
        for i in range(12)}
    store = _pg_store()
    try:
        ingest_paths(store, [write(tmp_path / "docs", files)], SEED)
        local = Engine.from_store(store, SEED, remote=False)
        from microrag_engine.index.keyword import BM25Scorer

        texts = [c.text for c in local.index.chunks]
        ref = BM25Scorer(0.9, 0.4).fit(texts)
        # (repeated terms count each time, in the database as in memory)
        for q in ("reset password", "vpn port 5432", "kiwi alpha beta", "nothing-matches", "vpn vpn port", "reset resets"):
            qvec = local.index.embedder.embed([q])[0]
            rows, ceiling, _ = store.search(q, qvec, None, n=100)
            found = {c.id: (kw, em) for c, kw, em in rows}
            assert ceiling == pytest.approx(ref.ceiling(q), rel=1e-6)
            want_kw = ref.scores(q)
            want_em = local.index.vectors @ qvec
            for i, c in enumerate(local.index.chunks):
                if c.id in found:
                    assert found[c.id][0] == pytest.approx(want_kw[i], rel=1e-4, abs=1e-6)
                    assert found[c.id][1] == pytest.approx(want_em[i], abs=1e-5)
                else:
                    assert want_kw[i] == 0  # only non-matching chunks may be missing
    finally:
        store.drop()
        store.close()


@needs_pg
def test_postgres_keyword_leg_scored_from_rare_terms_first_is_exact(tmp_path, monkeypatch):
    """The BM25 leg scores chunks holding a rare query term first and stops when the n-th
    score proves nothing else can enter: the same top-n as scoring every matching chunk."""
    from microrag_engine.store import postgres

    rng = random.Random(5)
    words = [f"w{i}" for i in range(300)]
    zipf = [1 / (i + 1) for i in range(300)]
    files = {f"d{i:03d}.md": " ".join(rng.choices(words, zipf, k=40)) for i in range(150)}
    store = _pg_store()
    try:
        ingest_paths(store, [write(tmp_path / "docs", files)], override(SEED, keyword="bm25", size=200, overlap=0))
        qvec = np.zeros(128, dtype=np.float32)
        qvec[0] = 1.0
        # a common word twice (its weight counts twice: a high bound to reach) and one or two rare words
        queries = [" ".join(2 * rng.choices(words[8:25]) + rng.choices(words[80:], k=rng.randint(1, 2))) for _ in range(40)]
        statements: list[str] = []
        real = store.x
        monkeypatch.setattr(store, "x", lambda sql, params=None, read=False: (statements.append(sql), real(sql, params, read))[1])
        pruned = 0
        for q in queries:
            for labels in (None, ["public"]):
                monkeypatch.setattr(postgres, "RARE_SHARE", 0.1)
                statements.clear()
                got = store.search(q, qvec, labels, n=5)
                short = [sql for sql in statements if "terms && " in sql]
                pruned += len(short) == 1 and short[0].startswith("SELECT id, -(bm25")  # stopped after the rare terms
                monkeypatch.setattr(postgres, "RARE_SHARE", 0.0)  # every term common: score every matching chunk
                want = store.search(q, qvec, labels, n=5)
                assert [(c.id, kw) for c, kw, _ in got.rows] == [(c.id, kw) for c, kw, _ in want.rows]
        assert 5 <= pruned < 2 * len(queries)  # the short path was taken (and so was the long one)
    finally:
        store.drop()
        store.close()


@needs_pg
def test_postgres_remote_engine_filters_in_the_database(tmp_path):
    files = {f"pub{i}.md": f"kiwi fruit note {i}. " + "kiwi " * i for i in range(6)}
    files.update({f"sec{i}.md": "---\nlabel: restricted\n---\n" + "kiwi fruit secret. " * 4 for i in range(6)})
    store = _pg_store()
    try:
        ingest_paths(store, [write(tmp_path / "docs", files)], override(SEED, keyword="bm25"))
        eng = Engine.from_store(store, override(SEED, keyword="bm25", top_k=4, max_per_source=1))
        assert eng.store is not None and eng.n_chunks == 12
        hits = eng.retrieve("kiwi fruit", safeguards=True, labels=["public"]).hits
        assert len(hits) == 4 and all(h.chunk.doc.startswith("pub") for h in hits)
        local = Engine.from_store(store, override(SEED, keyword="bm25", top_k=4, max_per_source=1), remote=False)
        want = local.retrieve("kiwi fruit", safeguards=True, labels=["public"]).hits
        assert [h.chunk.id for h in hits] == [h.chunk.id for h in want]
        assert eng.retrieve("kiwi fruit", safeguards=True, labels=[]).refused
    finally:
        store.drop()
        store.close()


@needs_pg
def test_postgres_answers_a_code_name_under_the_callers_labels(tmp_path):
    """The answerer's code-name check asks the database, per label: a name only a restricted
    page holds is refused to a public caller by name, and answered for a cleared one."""
    files = {"paths.md": "# Paths\n\nos.path.splitdrive(path) splits a path into drive and tail.\n",
             "new.md": "---\nlabel: restricted\n---\n# New\n\nos.path.splitroot(path) splits a path into drive, root and tail.\n"}
    store = _pg_store()
    try:
        settings = override(preset("default"), embedder="hash", dlp="off")
        ingest_paths(store, [write(tmp_path / "docs", files)], settings)
        assert store.holds("splitroot", ["restricted"]) and not store.holds("splitroot", ["public"])
        assert store.holds("splitdriv", None) and not store.holds("nosuchterm", None)
        eng = Engine.from_store(store, settings)
        assert eng.store is not None
        q = "How do I split a path into drive, root and tail with os.path.splitroot?"
        public = eng.answer(q, eng.retrieve(q, labels=["public"]))
        assert public.refused and public.reason == "the documents never mention 'os.path.splitroot'"
        cleared = eng.answer(q, eng.retrieve(q, labels=["public", "restricted"]))
        assert not cleared.refused and "splitroot" in cleared.text
    finally:
        store.drop()
        store.close()


@needs_pg
def test_postgres_answerer_weighs_words_as_an_in_memory_index_does(tmp_path):
    """The answerer weighs a question's words by IDF under the caller's labels: the database's
    weights equal those of the same index held in memory, clearance by clearance."""
    from microrag_engine.text import bm25_tokens

    files = {f"pub{i}.md": f"kiwi fruit note {i}. " + "kiwi " * i for i in range(6)}
    files.update({f"sec{i}.md": "---\nlabel: restricted\n---\n" + "kiwi fruit secret mango. " * 4 for i in range(3)})
    store = _pg_store()
    try:
        settings = override(SEED, keyword="bm25")
        ingest_paths(store, [write(tmp_path / "docs", files)], settings)
        remote, local = Engine.from_store(store, settings), Engine.from_store(store, settings, remote=False)
        assert remote.store is not None and local.store is None
        q = "kiwi fruit secret mango note"
        for labels in (["public"], ["public", "restricted"], None):
            got, want = remote.retrieve(q, safeguards=True, labels=labels), local.retrieve(q, safeguards=True, labels=labels)
            assert got.weight is not None and want.weight is not None
            for t in bm25_tokens(q) + ["unseenword"]:
                assert got.weight(t) == pytest.approx(want.weight(t), rel=1e-9), (labels, t)
        assert remote.retrieve(q, labels=["public"]).weight("secret") > remote.retrieve(q, labels=None).weight("secret")
    finally:
        store.drop()
        store.close()


def test_a_jsonl_record_naming_a_sibling_file_does_not_block_the_folder(tmp_path):
    """#33 finding 9: a .jsonl whose record claims password_policy.md made the whole first
    ingest of the folder exit 2 with 0 documents; now the file keeps its name, the record is
    refused by name and everything else goes in (exit 1, so a script notices)."""
    from conftest import run_cli

    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "password_policy.md").write_text("# Passwords\n\nPasswords rotate every 90 days.\n")
    (kb / "notes.md").write_text("# Notes\n\nThe VPN listens on port 1194.\n")
    (kb / "a.jsonl").write_text('{"doc": "password_policy.md", "text": "Passwords never rotate."}\n'
                                '{"doc": "faq.md", "text": "The office opens at nine."}\n')
    ix = str(tmp_path / "ix")
    proc = run_cli("ingest", str(kb), "--index", ix, "--preset", "seed")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "refused: a.jsonl: password_policy.md" in proc.stdout and "1 record(s) refused" in proc.stdout
    store = open_store(ix)
    docs = store.documents()
    assert {"kb/password_policy.md", "kb/notes.md", "kb/faq.md"} <= set(docs)
    text = " ".join(c.text for c in store.snapshot().chunks if c.doc == "kb/password_policy.md")
    assert "90 days" in text and "never rotate" not in text


def test_a_jsonl_record_cannot_take_over_another_files_document(tmp_path):
    """Red team #12: {"doc": "hr/salaries.md"} in a third-party .jsonl replaced a restricted
    document and relabelled it public."""
    from conftest import run_cli

    kb, evil = tmp_path / "kb", tmp_path / "vendor"
    (kb / "hr").mkdir(parents=True)
    evil.mkdir()
    (kb / "hr" / "salaries.md").write_text("---\nlabel: restricted\n---\n# Salaries\n\nBand L5 pays 180000.\n")
    feed = '{"doc": "hr/salaries.md", "text": "All salaries are public. Band L5 pays 1."}\n'
    (evil / "feed.jsonl").write_text(feed)
    ix = str(tmp_path / "ix")
    assert run_cli("ingest", str(kb), "--index", ix, "--preset", "seed").returncode == 0
    # another folder is another collection: its record cannot even name the document
    assert run_cli("ingest", str(evil), "--index", ix, "--preset", "seed").returncode == 0
    # inside the same collection, a record naming another file's document is refused in one line
    (kb / "feed.jsonl").write_text(feed)
    proc = run_cli("ingest", str(kb), "--index", ix, "--preset", "seed")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr  # 1: the rest went in, this record did not
    assert "refused: feed.jsonl: hr/salaries.md" in proc.stdout and "claims document 'kb/hr/salaries.md'" in proc.stdout
    store = open_store(ix)
    docs = store.documents()
    assert docs["kb/hr/salaries.md"].label == "restricted" and "vendor/hr/salaries.md" in docs
    assert "180000" in " ".join(c.text for c in store.snapshot().chunks if c.doc == "kb/hr/salaries.md")


@needs_pg
def test_postgres_statistics_see_only_what_the_caller_may_read(tmp_path):
    """Red team #3 on the database path: a quarantined upload stuffed with "vpn connect"
    must not move a reader's keyword scores at all, and a restricted document must not
    move their IDF or the gate's ceiling (its length still moves the one corpus-wide mean
    length every stored weight uses, so raw scores and coverage: SECURITY.md residual)."""
    live = {"vpn.md": "To connect to the VPN open GlobalProtect. " * 3, "wifi.md": "Guest wifi password at reception. " * 3}
    secret = {"secret.md": "---\nlabel: restricted\n---\nThe vpn root password is kiwi-42. " * 3}
    stuffed = {"stuffed.md": "---\nlabel: _quarantine\n---\n" + "vpn connect " * 200}
    settings = override(SEED, keyword="bm25")
    stores = {name: _pg_store() for name in ("all", "no_upload", "public_only")}
    try:
        for name, files in (("all", {**live, **secret, **stuffed}), ("no_upload", {**live, **secret}),
                            ("public_only", live)):
            ingest_paths(stores[name], [write(tmp_path / name, files)], settings)
        both, alone = stores["all"], stores["no_upload"]
        qvec = Engine.from_store(alone, settings, remote=False).index.embedder.embed(["vpn connect"])[0]
        for q in ("vpn connect", "root password kiwi-42"):
            got, got_ceiling, _ = both.search(q, qvec, ["public"], n=100)
            want, want_ceiling, _ = alone.search(q, qvec, ["public"], n=100)
            assert {c.id: kw for c, kw, _ in got} == pytest.approx({c.id: kw for c, kw, _ in want}, rel=1e-6)
            assert got_ceiling == pytest.approx(stores["public_only"].search(q, qvec, ["public"], n=100)[1], rel=1e-9)
        # An admin's search does count the restricted document's words.
        _, admin_ceiling, _ = both.search("root password kiwi-42", qvec, ["public", "restricted"], n=100)
        assert admin_ceiling != pytest.approx(got_ceiling)
        # Relabelling moves the document's statistics with it, and check() agrees.
        both.relabel("secret.md", "public")
        assert both.check() == []
        assert both.search("root password kiwi-42", qvec, ["public"], n=100)[1] == pytest.approx(admin_ceiling)
        both.relabel("stuffed.md", "public")  # approval: the long upload now counts in the mean length
        assert both.check() == []
        assert float(both.meta()["avgdl"]) > float(alone.meta()["avgdl"])
    finally:
        for s in stores.values():
            s.drop()
            s.close()


@needs_pg
def test_postgres_store_with_global_statistics_is_rebuilt_per_label(tmp_path):
    """A format-1 schema (one global df per term, a mean length that counted quarantined
    uploads) is migrated on open: per-label statistics, the mean of approved chunks only,
    format 2 (which a format-1 binary refuses rather than misreads)."""
    from microrag_engine.store.postgres import PostgresStore

    files = {"vpn.md": "To connect to the VPN open GlobalProtect. " * 3, "wifi.md": "Guest wifi password at reception. " * 3}
    stuffed = {"stuffed.md": "---\nlabel: _quarantine\n---\n" + "vpn connect " * 200}
    settings = override(SEED, keyword="bm25")
    store, fresh = _pg_store(), _pg_store()
    try:
        ingest_paths(store, [write(tmp_path / "old", {**files, **stuffed})], settings)
        ingest_paths(fresh, [write(tmp_path / "fresh", files)], settings)
        total = store.x("SELECT sum(dl)::float / count(*) FROM chunks")[0][0]
        with store.transaction():  # what format 1 wrote
            store.x("DROP TABLE term_df")
            store.x("DROP TABLE label_stats")
            store.x("CREATE TABLE term_df (term BIGINT PRIMARY KEY, df INTEGER NOT NULL)")
            store.x("INSERT INTO term_df SELECT term, count(*) FROM chunks, unnest(terms) term GROUP BY term")
            store.x("UPDATE meta SET value = '1' WHERE key = 'format_version'")
            store.x("UPDATE meta SET value = %s WHERE key = 'avgdl'", (repr(total),))
        store._reweight(total)
        reopened = PostgresStore(os.environ["MICRORAG_TEST_PG"], schema=store.schema)
        assert reopened.check() == [] and reopened.meta()["format_version"] == "2"
        assert float(reopened.meta()["avgdl"]) == pytest.approx(float(fresh.meta()["avgdl"]))
        qvec = Engine.from_store(fresh, settings, remote=False).index.embedder.embed(["vpn connect"])[0]
        got = {c.id: kw for c, kw, _ in reopened.search("vpn connect", qvec, ["public"])[0]}
        want = {c.id: kw for c, kw, _ in fresh.search("vpn connect", qvec, ["public"])[0]}
        assert got == pytest.approx(want, rel=1e-6)
        reopened.close()
        with store.transaction():
            store.x("UPDATE meta SET value = '3' WHERE key = 'format_version'")
        with pytest.raises(MicroRAGError, match="format 3"):
            PostgresStore(os.environ["MICRORAG_TEST_PG"], schema=store.schema)
    finally:
        for s in (store, fresh):
            s.drop()
            s.close()


@needs_pg
def test_postgres_first_ingest_of_wordless_text_is_not_a_crash(tmp_path):
    store = _pg_store()
    try:
        ingest_paths(store, [write(tmp_path / "docs", {"z.md": "The and of it is to be."})], override(SEED, keyword="bm25"))
        assert store.check() == [] and float(store.meta()["avgdl"]) > 0
    finally:
        store.drop()
        store.close()


def test_relabel_names_the_version_it_publishes(store, tmp_path):
    """Publishing what was screened or approved: a relabel naming an older version changes nothing."""
    from microrag_engine.store.base import StaleVersion

    docs = write(tmp_path / "docs", {"a.md": "---\nlabel: _quarantine\n---\nThe first version of the page."})
    ingest_paths(store, [docs], SEED)
    first = store.documents()["a.md"].content_hash
    (docs / "a.md").write_text("---\nlabel: _quarantine\n---\nA second version, uploaded meanwhile.")
    ingest_paths(store, [docs], SEED)
    generation = store.generation()
    with pytest.raises(StaleVersion, match="changed since"):
        store.relabel("a.md", "public", version=first)
    assert store.documents()["a.md"].label == "_quarantine" and store.generation() == generation
    store.relabel("a.md", "public", version=store.documents()["a.md"].content_hash)
    assert store.documents()["a.md"].label == "public"


# ---------------------------------------------------------------- filters as SQL predicates (#35)

# Values a filter must tell apart: LIKE's own wildcards and escape, a glob's wildcards taken
# literally in a value, case that lower() changes in length, a line break, non-Latin text.
_FIELD_VALUES = ["Guide", "guide/intro", "50% off", "snake_case", "back\\slash", "star*name", "what?", "İstanbul",
                 "Straße", "line\nbreak", "日本語の文書", "", "a", "tutorial/setup.md", "x_y%z\\"]


def _filter_records(rng: random.Random) -> list:
    from microrag_engine.store.base import DocRecord

    out = []
    for i in range(40):
        collection = rng.choice(["", "Docs", "wiki"])
        folder = rng.choice(["guide/", "api/", "", "Tutorial/"])
        doc = (f"{collection}/" if collection else "") + folder + f"p{i}_{rng.choice(_FIELD_VALUES)}.md"
        # (front-matter keys named like the built-in fields are not those fields: DocRecord.values)
        meta = tuple((rng.choice(["title", "Title", "owner", "tags", "TEAM", "path", "Label", "collection", "doc"]),
                      rng.choice(_FIELD_VALUES))
                     for _ in range(rng.randint(0, 4)))
        label = rng.choice(["public", "public", "restricted", "_quarantine"])
        out.append(DocRecord(doc, f"h{i}", label, collection=collection, meta=meta, n_chunks=1))
    return out


def _apply_records(store, records) -> None:
    from microrag_engine.store.base import DocUpdate
    from microrag_engine.types import Chunk

    updates = [DocUpdate(r, [Chunk(f"{r.doc}#0", r.doc, 0, 0, 4, "text")], np.eye(4, dtype=np.float32)[:1], ["t"])
               for r in records]
    store.apply(updates, [], {"dim": "4", "embedder": "hash", "chunker": "chars", "size": "800", "overlap": "0",
                              "max_tokens": "256"})


@needs_pg
def test_postgres_filters_in_sql_admit_exactly_what_the_glob_admits():
    """A filter the database evaluates (documents.fields, LIKE or containment) admits the very
    documents ``DocFilter.admits`` does, under every clearance, for globs built from the values
    themselves (wildcards, case, LIKE's own characters) and for arbitrary text (NUL, lone
    surrogates: no failing query)."""
    from microrag_engine.store.base import DocFilter

    records = _filter_records(random.Random(7))
    store = _pg_store()
    try:
        _apply_records(store, records)
        stored = store.documents()
        assert len(stored) == len(records)

        def mutate(value: str, data) -> str:
            chars = list(value)
            for _ in range(data.draw(st.integers(0, 3))):
                if chars:
                    k = data.draw(st.integers(0, len(chars) - 1))
                    chars[k] = data.draw(st.sampled_from(["*", "?", chars[k].upper(), chars[k].swapcase(), "%", "_"]))
            if data.draw(st.booleans()):
                chars.append("*")
            return "".join(chars)

        values = [v for r in stored.values() for f in ("path", "collection", "label") for v in r.values(f)]
        values += [v for r in stored.values() for _, v in r.meta]
        fields = ["path", "doc", "collection", "label", "title", "TITLE", "owner", "tags", "team", "nosuch"]
        glob = st.one_of(st.sampled_from(values), st.text(st.sampled_from("ab*?%_\\/.İi\x00\ud800 "), max_size=8))

        @hsettings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(st.data())
        def check(data):
            pairs = lambda n: tuple((data.draw(st.sampled_from(fields)), mutate(data.draw(glob), data)) for _ in range(n))  # noqa: E731
            where = DocFilter(pairs(data.draw(st.integers(0, 2))), pairs(data.draw(st.integers(0, 1))))
            labels = data.draw(st.sampled_from([None, ["public"], ["restricted"], ["public", "restricted"], []]))
            if not store.filters(where):
                return
            want = {d for d, r in stored.items() if not r.label.startswith("_")
                    and (labels is None or r.label in labels) and where.admits(r)}
            got = store.admitted(where, labels)
            assert set(got) == want and len(got) == len(want), where  # (in the database's collation order)

        check()
        assert not store.filters(DocFilter((("path", "guide/[ab]*"),)))  # a character class: not LIKE's to say
    finally:
        store.drop()
        store.close()


@needs_pg
def test_postgres_engine_filters_as_a_predicate_not_a_list_of_ids(tmp_path, monkeypatch):
    """A remote engine's filtered retrieval sends the filter, not the admitted ids, and ranks
    as the local engine does; a glob with a character class still filters (by ids); a filter
    nothing matches refuses with the same reason; a relabel moves the label field too."""
    from microrag_engine.store.base import DocFilter

    files = {f"guide/g{i}.md": f"---\ntitle: Guide {i}\nteam: {'core' if i % 2 else 'web'}\n---\nkiwi fruit note {i}. "
             + "kiwi " * i for i in range(6)}
    files.update({f"api/a{i}.md": f"---\ntitle: API {i}\n---\nkiwi fruit api {i}." for i in range(4)})
    store = _pg_store()
    try:
        settings = override(SEED, keyword="bm25", top_k=4, max_per_source=1)
        ingest_paths(store, [write(tmp_path / "docs", files)], override(SEED, keyword="bm25"))
        eng = Engine.from_store(store, settings)
        local = Engine.from_store(store, settings, remote=False)
        statements: list[str] = []
        real = store.x
        monkeypatch.setattr(store, "x", lambda sql, params=None, read=False: (statements.append(sql), real(sql, params, read))[1])
        for where in (DocFilter((("path", "guide/*"),), (("team", "WEB"),)), DocFilter((("title", "api ?"),)),
                      DocFilter((("path", "guide/g[12].md"),))):
            statements.clear()
            got = [h.chunk.id for h in eng.retrieve("kiwi fruit", safeguards=True, where=where).hits]
            assert got and got == [h.chunk.id for h in local.retrieve("kiwi fruit", safeguards=True, where=where).hits]
            by_ids = any("doc = ANY(" in sql for sql in statements)
            assert by_ids == (not store.filters(where)) and any("fields" in sql for sql in statements) != by_ids
        nothing = eng.retrieve("kiwi fruit", safeguards=True, where=DocFilter((("team", "nobody*"),)))
        assert nothing.refused and nothing.reason == "no indexed document matches the filter"
        store.relabel("api/a0.md", "restricted")
        assert store.admitted(DocFilter((("label", "Restricted"),)), None) == ["api/a0.md"]
        assert store.check() == []
    finally:
        store.drop()
        store.close()


@needs_pg
def test_postgres_fields_of_an_older_index_are_filled_in_on_open():
    """An index written before documents.fields existed (its rows at the column's default)
    gets them from its stored records the first time it is opened, once."""
    from microrag_engine.store.base import DocFilter
    from microrag_engine.store.postgres import PostgresStore

    records = _filter_records(random.Random(11))
    store = _pg_store()
    try:
        _apply_records(store, records)
        store.x("UPDATE documents SET fields = '{}'::jsonb")
        store.x("DELETE FROM meta WHERE key = 'fields_version'")
        where = DocFilter((("path", "*guide*"),))
        assert store.admitted(where, None) == []
        again = PostgresStore(os.environ["MICRORAG_TEST_PG"], schema=store.schema)
        want = {d for d, r in store.documents().items() if not r.label.startswith("_") and where.admits(r)}
        assert want and set(again.admitted(where, None)) == want
        assert again.check() == []
        again.close()
    finally:
        store.drop()
        store.close()


@needs_pg
def test_postgres_scores_an_upload_under_review_as_it_will_score_live(tmp_path):
    """``scores_of`` (the collision probe, #35) counts the upload in the statistics: a word only
    the quarantined upload holds weighs there what ``search`` gives it once the upload is live,
    and so does the ceiling the gate reads."""
    files = {f"d{i}.md": " ".join(random.Random(i).choices(["alpha", "beta", "gamma", "vpn", "port"], k=30))
             for i in range(6)}
    store = _pg_store()
    try:
        ingest_paths(store, [write(tmp_path / "docs", files)], SEED)
        ingest_paths(store, [write(tmp_path / "up", {"new.md": "zorblax gateway settings for the vpn port"})], SEED,
                     label="_quarantine")
        doc = next(d for d, r in store.documents().items() if r.label == "_quarantine")
        qvec = Engine.from_store(store, SEED, remote=False).index.embedder.embed(["zorblax vpn"])[0]
        held, held_ceiling = store.scores_of("zorblax vpn", qvec, ["public"], [doc])
        assert held and all(c.doc == doc for c, _, _ in held)
        store.relabel(doc, "public")
        live, live_ceiling, _ = store.search("zorblax vpn", qvec, ["public"], n=100)
        scores = {c.id: kw for c, kw, _ in live}
        assert held_ceiling == pytest.approx(live_ceiling, rel=1e-6)
        for c, kw, _ in held:  # (within 2%: going live moves the mean length the stored weights are normalised by)
            assert kw > 0 and kw == pytest.approx(scores[c.id], rel=0.02)
    finally:
        store.drop()
        store.close()


@needs_pg
def test_postgres_scales_its_candidates_as_every_chunk_would_be(tmp_path):
    """The database's candidates (each leg's first pass) are min-max scaled from each leg's least
    score over every chunk the caller may read, not over themselves: the fused scores are those
    an in-memory index gives the same chunks when it scores every one."""
    rng = random.Random(11)
    words = [a + b + c for a in "bdfklmprst" for b in "aeiou" for c in ("la", "ko", "ri", "ven", "dus", "mo")]
    zipf = [1 / (i + 1) for i in range(300)]
    files = {f"d{i:03d}.md": " ".join(rng.choices(words, zipf, k=30)) for i in range(120)}
    files.update({f"r{i:02d}.md": "---\nlabel: restricted\n---\n" + " ".join(rng.choices(words, zipf, k=30))
                  for i in range(30)})
    settings = override(SEED, keyword="bm25", size=200, overlap=0, first_pass=8)
    store = _pg_store()
    try:
        ingest_paths(store, [write(tmp_path / "docs", files)], settings)
        remote, local = Engine.from_store(store, settings), Engine.from_store(store, settings, remote=False)
        assert local.index.ann is None  # every chunk scored in memory
        queries = [" ".join(rng.choices(words[20:], k=rng.randint(2, 3))) for _ in range(30)]
        same_top = 0
        for q in queries:
            for labels in (None, ["public"]):
                got, want = remote.retrieve(q, labels=labels), local.retrieve(q, labels=labels)
                assert not got.refused and not want.refused
                # every chunk the database returns carries the fused score every-chunk scoring gives it
                exact = {h.chunk.id: h.hybrid for h in local.retrieve(q, labels=labels, top_k=10_000).hits}
                assert [h.hybrid for h in got.hits] == pytest.approx([exact[h.chunk.id] for h in got.hits], abs=1e-4)
                same_top += [h.chunk.id for h in got.hits] == [h.chunk.id for h in want.hits]
        assert same_top >= 50  # of 60: the whole top k, where the first pass holds it
    finally:
        store.drop()
        store.close()
