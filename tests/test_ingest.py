"""Ingest: ids that carry their collection, no silent overwrites, files that are gone, one DLP policy."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from microrag_engine import guard
from microrag_engine.config import override, preset
from microrag_engine.engine import Engine
from microrag_engine.errors import CorpusError
from microrag_engine.ingest import filterable, guarded, ingest_paths, redacted_id
from microrag_engine.load.base import MAX_FRONT_MATTER_KEYS, split_front_matter
from microrag_engine.store.base import FIELD_NAME, MAX_FIELD_CHARS, MAX_FIELDS, DocFilter, DocRecord
from microrag_engine.store.sqlite import SQLiteStore
from microrag_engine.types import Document

SEED = preset("seed")
DEFAULT = preset("default")


def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def body(topic: str) -> str:
    return f"# {topic.title()}\n\n" + f"This page explains {topic} in depth for new users. " * 6


@pytest.fixture
def store(tmp_path):
    s = SQLiteStore(tmp_path / "ix")
    yield s
    s.close()


def test_two_projects_docs_folders_keep_all_their_documents(store, tmp_path):
    first = write(tmp_path / "alpha" / "docs", {"index.md": body("alpha setup"), "async.md": body("alpha async")})
    second = write(tmp_path / "beta" / "docs", {"index.md": body("beta setup"), "cors.md": body("beta cors")})
    ingest_paths(store, [first], SEED)
    with pytest.raises(CorpusError) as refused:  # same folder name, another folder: refused, not replaced
        ingest_paths(store, [second], SEED)
    assert "--collection" in str(refused.value) and "\n" not in str(refused.value)
    assert set(store.documents()) == {"docs/index.md", "docs/async.md"}
    report = ingest_paths(store, [second], SEED, collection="beta")
    assert sorted(report.added) == ["beta/cors.md", "beta/index.md"] and not report.changed
    assert set(store.documents()) == {"docs/index.md", "docs/async.md", "beta/index.md", "beta/cors.md"}
    again = ingest_paths(store, [first], SEED)  # re-ingesting a root is idempotent
    assert again.changes == 0 and len(again.unchanged) == 2


def test_a_single_file_keeps_the_id_it_has_in_its_folder(store, tmp_path):
    docs = write(tmp_path / "docs", {"tutorial/cors.md": body("cors"), "index.md": body("home")})
    ingest_paths(store, [docs], SEED)
    (docs / "tutorial" / "cors.md").write_text(body("cross origin requests"))
    report = ingest_paths(store, [docs / "tutorial" / "cors.md"], SEED)
    assert report.changed == ["docs/tutorial/cors.md"] and not report.added
    assert set(store.documents()) == {"docs/tutorial/cors.md", "docs/index.md"}
    # a file from nowhere indexed yet is named after its own folder
    loose = write(tmp_path / "notes", {"todo.md": body("todo list")})
    assert ingest_paths(store, [loose / "todo.md"], SEED).added == ["notes/todo.md"]


def test_files_that_are_gone_are_reported_and_pruned_on_request(store, tmp_path):
    docs = write(tmp_path / "docs", {"a.md": body("apples"), "b.md": body("bananas")})
    ingest_paths(store, [docs], SEED)
    (docs / "b.md").unlink()
    kept = ingest_paths(store, [docs], SEED)
    assert kept.gone == ["docs/b.md"] and not kept.removed and "docs/b.md" in store.documents()
    assert "--prune" in kept.summary()
    pruned = ingest_paths(store, [docs], SEED, prune=True)
    assert pruned.removed == ["docs/b.md"] and not pruned.gone and set(store.documents()) == {"docs/a.md"}


def test_an_index_built_before_collections_keeps_its_ids(store, tmp_path):
    docs = write(tmp_path / "docs", {"a.md": body("apples")})
    ingest_paths(store, [docs], SEED, collection="")  # how indexes were built before ids carried a collection
    again = ingest_paths(store, [docs], SEED)
    assert again.changes == 0 and set(store.documents()) == {"a.md"}


def test_a_bad_collection_name_is_one_clear_error(store, tmp_path):
    docs = write(tmp_path / "docs", {"a.md": body("apples")})
    with pytest.raises(CorpusError, match="invalid collection name"):
        ingest_paths(store, [docs], SEED, collection="../etc")


# ---------------------------------------------------------------- query-time filters

FILTERED = {
    "guide/oauth.md": "---\nversion: 2\n---\n# OAuth tokens\n\n" + "Rotate the OAuth token every ninety days. " * 5,
    "guide/cors.md": "# CORS\n\n" + "Configure CORS so the token endpoint answers browsers. " * 5,
    "CHANGELOG.md": "# Changelog\n\n" + "Token rotation changed in release two. " * 5,
}


@pytest.mark.parametrize("where, exclude, expect", [
    (["path=guide/*"], None, {"docs/guide/oauth.md", "docs/guide/cors.md"}),
    (None, ["path=*changelog*"], {"docs/guide/oauth.md", "docs/guide/cors.md"}),
    (["title=*oauth*"], None, {"docs/guide/oauth.md"}),
    (["version=2"], None, {"docs/guide/oauth.md"}),
    (["collection=docs", "path=*.md"], ["title=CORS"], {"docs/guide/oauth.md", "docs/CHANGELOG.md"}),
])
def test_filters_narrow_what_a_query_draws_from(store, tmp_path, where, exclude, expect):
    ingest_paths(store, [write(tmp_path / "docs", FILTERED)], SEED)
    engine = Engine.from_store(store, SEED)
    hits = engine.retrieve("token", where=DocFilter.parse(where, exclude), top_k=10).hits
    assert {h.chunk.doc for h in hits} == expect


def test_a_filter_that_matches_nothing_refuses(store, tmp_path):
    ingest_paths(store, [write(tmp_path / "docs", FILTERED)], SEED)
    out = Engine.from_store(store, SEED).retrieve("token", where=DocFilter.parse(["path=nowhere/*"]))
    assert out.refused and not out.hits and "filter" in out.reason


def test_filters_work_on_in_memory_corpora(tmp_path):
    engine = Engine.from_paths([write(tmp_path / "docs", FILTERED)], SEED)
    hits = engine.retrieve("token", where=DocFilter.parse(["title=CORS"]), top_k=10).hits
    assert {h.chunk.doc for h in hits} == {"guide/cors.md"}


# ---------------------------------------------------------------- DLP: one policy, named documents


def test_ingest_names_each_changed_document_and_never_a_value(store, tmp_path):
    docs = write(tmp_path / "docs", {
        "ops.md": "# Ops\n\nThe staging database password is Zq8!vN2kLm4R and the key AKIAIOSFODNN7EXAMPLE.\n",
        "api.md": "# API\n\nUse `secrets.compare_digest()` and OAuth2PasswordRequestForm with SECRET_KEY.\n",
    })
    report = ingest_paths(store, [docs], DEFAULT)
    assert set(report.findings) == {"docs/ops.md"}  # code that names secrets is not a secret
    lines = report.dlp_lines()
    assert lines == ["DLP docs/ops.md: 1 aws_access_key, 1 secret_in_context"]
    assert "Zq8!" not in "\n".join(lines)
    stored = " ".join(c.text for c in store.snapshot().chunks)
    assert "Zq8!vN2kLm4R" not in stored and "secrets.compare_digest()" in stored and "OAuth2PasswordRequestForm" in stored


def test_corpus_runs_apply_the_same_dlp_as_ingest(tmp_path):
    docs = write(tmp_path / "docs", {"ops.md": "# Ops\n\nThe staging database password is Zq8!vN2kLm4R today.\n"})
    engine = Engine.from_paths([docs], DEFAULT)
    assert "Zq8!vN2kLm4R" not in engine.index.chunks[0].text and "[REDACTED" in engine.index.chunks[0].text


def test_pdf_pages_stay_true_after_redaction(store, tmp_path):
    """A redaction on page 1 changes its length; page 2's chunks still cite page 2."""
    from microrag_engine.ingest import ingest_documents
    from microrag_engine.types import Document

    page1 = "Contact the lab manager. The wifi password is Tr0ub4dor&3xyzzy today.\n\n"
    page2 = "Centrifuge safety: balance the rotor before every run and never open the lid early.\n\n"
    page3 = "Waste disposal: sharps go in the yellow bins by the door."
    doc = Document("lab/manual.pdf", page1 + page2 + page3,
                   meta=(("pages", f"0,{len(page1)},{len(page1) + len(page2)}"),))
    report = ingest_documents(store, [doc], DEFAULT)
    assert report.findings == {"lab/manual.pdf": {"secret_in_context": 1}}
    chunks = store.snapshot().chunks
    by_page = {c.page: c.text for c in chunks}
    assert "Tr0ub4dor" not in " ".join(by_page.values())
    assert "Centrifuge" in by_page[2] and "sharps" in by_page[3] and "lab manager" in by_page[1]
    hits = Engine.from_store(store, DEFAULT).retrieve("how do I balance the centrifuge rotor?").hits
    from microrag_engine.augment import citation

    assert citation(hits[0]) == f"[source: lab/manual.pdf · chunk {hits[0].chunk.index} · p. 2]"


def test_a_subfolder_joins_its_folders_collection(store, tmp_path):
    docs = write(tmp_path / "docs", {"sub/ls.md": body("listing"), "index.md": body("home")})
    ingest_paths(store, [docs], SEED)
    again = ingest_paths(store, [docs / "sub"], SEED)
    assert again.changes == 0 and again.unchanged == ["docs/sub/ls.md"]
    assert set(store.documents()) == {"docs/sub/ls.md", "docs/index.md"}


def test_filters_are_parsed_strictly_and_fields_ignore_case(store, tmp_path):
    for bad in (["path"], ["=x"], ["path="]):
        with pytest.raises(ValueError, match="FIELD=GLOB"):
            DocFilter.parse(bad)
    ingest_paths(store, [write(tmp_path / "docs", FILTERED)], SEED)
    engine = Engine.from_store(store, SEED)
    hits = engine.retrieve("token", where=DocFilter.parse(["PATH=guide/cors.md"]), top_k=10).hits
    assert {h.chunk.doc for h in hits} == {"docs/guide/cors.md"}


# ---------------------------------------------------------------- the streaming pipeline

def _docs(n: int) -> list:
    from microrag_engine.types import Document

    return [Document(f"d{i:03}.md", body(f"topic number {i} and its details")) for i in range(n)]


class _Counting(SQLiteStore):
    """A store that counts transactions."""

    applied = 0

    def apply(self, updates, deletes, meta):
        type(self).applied += 1
        return super().apply(updates, deletes, meta)


def test_a_large_ingest_commits_in_batches_and_a_rerun_finishes_an_interrupted_one(tmp_path, monkeypatch):
    from microrag_engine import ingest
    from microrag_engine.ingest import stream_documents

    monkeypatch.setattr(ingest, "EMBED_CHUNKS", 8)

    docs = _docs(60)
    whole = SQLiteStore(tmp_path / "whole")
    stream_documents(whole, ((d, "") for d in docs), SEED)  # small: one transaction
    broken = _Counting(tmp_path / "broken")

    def dies_after(n):
        for i, d in enumerate(docs):
            if i == n:
                raise OSError("disk went away")
            yield d, ""

    with pytest.raises(OSError):
        stream_documents(broken, dies_after(45), SEED, commit_chunks=20)
    assert _Counting.applied >= 2  # it did write in several transactions before dying
    assert broken.check() == []  # what landed is whole documents, nothing half-written
    landed = set(broken.documents())
    assert 0 < len(landed) <= 45
    again = stream_documents(broken, ((d, "") for d in docs), SEED, commit_chunks=20)
    assert sorted(again.unchanged) == sorted(landed) and len(again.added) == 60 - len(landed)
    a, b = whole.snapshot(), broken.snapshot()
    assert [c.id for c in a.chunks] == [c.id for c in b.chunks] and [c.text for c in a.chunks] == [c.text for c in b.chunks]
    assert abs(a.vectors - b.vectors).max() < 1e-6


def test_the_embedder_starts_on_the_first_documents_and_batches_grow(tmp_path, monkeypatch):
    """#34: the first batch is embedded once 32 chunks are ready (not 256: the embedder sat idle
    while they were prepared), each later one gathers twice as many, up to EMBED_CHUNKS."""
    from microrag_engine import ingest

    sizes: list[int] = []
    real = ingest.embed_prepared

    def watched(items, embedder, landed=None):
        sizes.append(sum(len(p.chunks) for p in items))
        return real(items, embedder, landed)

    monkeypatch.setattr(ingest, "embed_prepared", watched)
    docs = [Document(f"d{i}.md", " ".join(f"Sentence {j} of document {i} is about topic {i * j}." for j in range(60)))
            for i in range(120)]
    report = ingest.stream_documents(SQLiteStore(tmp_path / "ix"), ((d, "") for d in docs), SEED)
    per_doc = report.chunks_written // len(docs)
    assert per_doc >= 2 and sum(sizes) == report.chunks_written
    targets = [ingest.batch_chunks(k) for k in range(len(sizes))]
    assert targets[:5] == [32, 64, 128, 256, 256]
    # each batch but the last closes on the document that reaches its target
    assert all(t <= n < t + 2 * per_doc + 1 for n, t in zip(sizes[:-1], targets)), (sizes, per_doc)


def test_the_loader_runs_a_bounded_distance_ahead_of_the_writer(tmp_path, monkeypatch):
    from microrag_engine import ingest

    monkeypatch.setattr(ingest, "QUEUE_DEPTH", 4)
    monkeypatch.setattr(ingest, "EMBED_CHUNKS", 3)
    pulled, lead = [0], []

    class Watching(SQLiteStore):
        def apply(self, updates, deletes, meta):
            lead.append(pulled[0] - len(self.documents()) - len(updates))
            return super().apply(updates, deletes, meta)

    def stream():
        for d in _docs(80):
            pulled[0] += 1
            yield d, ""

    store = Watching(tmp_path / "ix")
    report = ingest.stream_documents(store, stream(), SEED, commit_chunks=6)
    assert len(report.added) == 80 and len(lead) > 5
    # pulled but not yet written: the queue, one embed batch, one commit batch and the item in hand
    assert max(lead) <= 4 + 3 + 6 + 2, lead


def test_a_loader_error_surfaces_in_the_caller_with_its_message(store):
    from microrag_engine.ingest import stream_documents

    docs = _docs(3)
    with pytest.raises(CorpusError, match="two inputs both map"):
        stream_documents(store, ((d, "") for d in [*docs, docs[0]]), SEED)
    assert store.documents() == {}  # a small ingest is one transaction: nothing landed


def test_documents_prepared_elsewhere_in_any_split_land_as_a_local_ingest_lands_them(tmp_path, monkeypatch):
    """The pieces ``cluster.py`` runs on workers (``prepare_files``, ``embed_texts``) and on the
    driver (``Ingestion``, ``attach_vectors``), with the files cut into shards and grouped as
    ``stream_documents`` groups them, build the index ``ingest_paths`` builds."""
    from microrag_engine import ingest
    from microrag_engine.index.embed import make_embedder

    monkeypatch.setattr(ingest, "EMBED_CHUNKS", 5)
    monkeypatch.setattr(ingest, "FIRST_EMBED_CHUNKS", 2)  # groups of 2, 4, then 5 chunks
    docs = write(tmp_path / "docs", {f"p{i}.md": body(f"topic {i}") + f" The old key was AKIAABCDEFGHIJKLMNO{i}." for i in range(9)})
    whole = SQLiteStore(tmp_path / "whole")
    settings = DEFAULT.__class__(**{**DEFAULT.__dict__, "embedder": "hash", "dlp": "redact"})
    local = ingest_paths(whole, [docs], settings)
    split = SQLiteStore(tmp_path / "split")
    corpus = ingest.Corpus.resolve(split, [docs], settings)
    embedder = make_embedder("hash")
    run = ingest.Ingestion(split, settings, embedder.dim, extra_meta=corpus.roots, commit_chunks=7)
    batch: list[ingest.Prepared] = []
    formed = 0
    shards = [corpus.files[i:i + 2] for i in range(0, len(corpus.files), 2)]
    for shard in shards:
        for item in ingest.prepare_files(shard, run.plan, embedder):
            assert not isinstance(item, str)
            corpus.loaded.add(item.record.doc)
            run.count(item.record.doc, len(item.chunks), item.findings, item.replaces)
            batch.append(item)
            if sum(len(p.chunks) for p in batch) >= ingest.batch_chunks(formed):
                run.write(ingest.attach_vectors(batch, ingest.embed_texts([c.text for p in batch for c in p.chunks], embedder)))
                batch, formed = [], formed + 1
    run.write(ingest.attach_vectors(batch, ingest.embed_texts([c.text for p in batch for c in p.chunks], embedder)))
    report = run.finish(corpus.deletions(False))
    assert report.added == local.added and report.findings == local.findings and len(report.findings) == 9
    a, b = whole.snapshot(), split.snapshot()
    assert {d: (r.content_hash, r.label, r.origin, r.n_chunks, r.collection, r.meta) for d, r in a.documents.items()} == \
           {d: (r.content_hash, r.label, r.origin, r.n_chunks, r.collection, r.meta) for d, r in b.documents.items()}
    assert [(c.id, c.text) for c in a.chunks] == [(c.id, c.text) for c in b.chunks]
    assert abs(a.vectors - b.vectors).max() < 1e-6 and split.check() == []
    again = ingest_paths(split, [docs], settings)  # the local path sees the same index: nothing to redo
    assert again.changes == 0 and len(again.unchanged) == 9


def test_a_new_embedder_build_is_named_and_reembeds_everything_on_the_next_ingests(store, tmp_path, monkeypatch):
    from microrag_engine.index.embed import make_embedder

    docs = write(tmp_path / "docs", {"a.md": body("alpha setup"), "b.md": body("beta cors")})
    ingest_paths(store, [docs], SEED)
    embedder = make_embedder(SEED.embedder)  # the process's (cached) instance
    assert store.meta()["embedder_digest"] == embedder.digest == "hash-128"
    monkeypatch.setattr(embedder, "digest", "hash-next-build")  # what a new release's graph looks like
    from microrag_engine.store.base import embedder_drift

    assert embedder_drift(store.meta(), "hash-next-build") == ""  # the seed's hashing never changes: no warning
    minilm_meta = {**store.meta(), "embedder": "minilm", "embedder_digest": "aaaa"}
    assert "re-embed" in embedder_drift(minilm_meta, "bbbb") and "aaaa" in embedder_drift(minilm_meta, "bbbb")
    other = write(tmp_path / "other", {"c.md": body("gamma setup")})
    ingest_paths(store, [other], SEED)  # only part of the index re-embedded: still stale
    assert store.meta()["embedder_digest"] == "hash-128"
    again = ingest_paths(store, [docs, other], SEED)  # every folder, in one command, as the warning says
    assert sorted(again.changed) == ["docs/a.md", "docs/b.md"]  # re-embedded, not skipped as unchanged
    assert again.unchanged == ["other/c.md"]  # already this build's (its hash carries the digest)
    assert store.meta()["embedder_digest"] == "hash-next-build"  # now every document is
    assert embedder_drift({**minilm_meta, "embedder_digest": "bbbb"}, "bbbb") == ""


def test_a_second_ingest_of_an_unchanged_tree_parses_nothing(store, tmp_path, monkeypatch):
    import microrag_engine.ingest as ingest_module

    docs = write(tmp_path / "docs", {f"p{i}.md": body(f"topic {i}") for i in range(5)})
    assert len(ingest_paths(store, [docs], DEFAULT).added) == 5
    parsed: list[str] = []
    real = ingest_module.iter_tagged

    def counting(files, markup="clean"):
        for tag, doc in real(files, markup):
            parsed.append(doc.path)
            yield tag, doc
    monkeypatch.setattr(ingest_module, "iter_tagged", counting)
    report = ingest_paths(store, [docs], DEFAULT)
    assert (len(report.unchanged), report.changes, parsed) == (5, 0, [])
    # touched (same bytes, new mtime): hashed, not parsed; edited: parsed, the rest not
    import os
    import time
    os.utime(docs / "p1.md", ns=(time.time_ns(), time.time_ns() + 10**9))
    (docs / "p2.md").write_text(body("topic two, revised"))
    report = ingest_paths(store, [docs], DEFAULT)
    assert (report.changed, parsed) == (["docs/p2.md"], ["p2.md"])
    # another policy (here a label) reads every file once more
    parsed.clear()
    assert len(ingest_paths(store, [docs], DEFAULT, label="internal").changed) == 5 and len(parsed) == 5


def test_a_held_file_is_screened_again_on_every_ingest(store, tmp_path):
    docs = write(tmp_path / "docs", {"ok.md": body("parking"), "bad.md": body("toner")})
    screened: list[str] = []

    def screen(doc, file):
        screened.append(doc.path)
        return ["injection: test"] if doc.path.endswith("bad.md") else []
    first = ingest_paths(store, [docs], DEFAULT, screen=screen)
    assert list(first.held) == ["docs/bad.md"] and first.held_files["docs/bad.md"] == str((docs / "bad.md").resolve())
    screened.clear()
    again = ingest_paths(store, [docs], DEFAULT, screen=screen)
    assert list(again.held) == ["docs/bad.md"] and screened == ["docs/bad.md"]  # ok.md: skipped unread


@pytest.mark.parametrize("stored", ["memory", "index"])
def test_front_matter_goes_through_dlp_so_a_filter_cannot_recover_a_secret(tmp_path, stored):
    """#33 (1): a secret in front matter skipped DLP and stayed a filter field; a `where` glob
    binary search recovered it from "no indexed document matches the filter". The field is
    redacted as the same line in the body would be, so no glob on the value matches."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "db.md").write_text("---\nowner: platform\ndb_password: zq7vtr4kwm\n---\n# Database\n\nThe database runs on port 5432.")
    settings = preset("default")
    if stored == "memory":
        engine = Engine.from_paths([docs], settings)
    else:
        store = SQLiteStore(tmp_path / "ix")
        report = ingest_paths(store, [docs], settings, collection="")
        assert report.findings["db.md"] == {"secret_in_context": 1}
        meta = dict(store.documents()["db.md"].meta)
        assert meta["db_password"].startswith("[REDACTED") and "zq7" not in meta["db_password"]
        engine = Engine.from_store(store, settings)
    for glob in ("zq7*", "zq7vtr4kwm", "*4kwm"):
        assert engine.select(DocFilter((("db_password", glob),))) == set()
    assert engine.select(DocFilter((("owner", "platform"),))) == {"db.md"}  # a plain field still filters


SECRET_FIELDS = st.sampled_from(["db_password", "password", "api_key", "secret", "token", "owner", "notes"])
VALUES = st.one_of(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=6, max_size=24),
                   st.from_regex(r"AKIA[0-9A-Z]{16}", fullmatch=True),
                   st.from_regex(r"sk_live_[0-9a-zA-Z]{24}", fullmatch=True),
                   st.sampled_from(["platform", "the data team", "changeme", "hunter2"]))


@given(key=SECRET_FIELDS, value=VALUES, cut=st.integers(1, 24))
@hsettings(max_examples=60, deadline=None)
def test_a_filter_reads_no_more_of_a_front_matter_field_than_the_text_shows(key, value, cut):
    """#33 (1), by construction: a front-matter field is stored as DLP leaves the same line in the
    body, so whatever a glob on it can tell (prefix, suffix, middle, exact), the text tells too."""
    settings = preset("default")
    stored, _, _ = guarded(Document("db.md", "# Database\n\nIt runs nightly.", meta=((key, value),)), settings)
    as_text, _, _ = guarded(Document("line.md", f"{key}: {value}"), settings)
    shown = as_text.text.removeprefix(f"{key}: ")
    record = DocRecord("db.md", "h", meta=filterable(stored.meta))
    assert record.values(key) == [shown[:MAX_FIELD_CHARS]]
    if value not in as_text.text:  # the text hides it: so does the field, and no glob holding it matches
        assert value not in record.values(key)[0]
        for glob in (value, f"{value}*", f"*{value}", f"*{value[cut % len(value):]}", f"{value[:cut]}?*"):
            if len(glob.strip("*?")) >= 4:  # a glob of a few letters may match the redaction marker itself
                assert not DocFilter(((key, glob),)).admits(record), glob


FM_KEYS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-. 0123456789ABC", min_size=1, max_size=90).filter(str.strip)
FM_VALUES = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Zl", "Zp", "Cc")), max_size=1200)


@given(pairs=st.lists(st.tuples(FM_KEYS, FM_VALUES), max_size=200), titled=st.booleans())
@hsettings(max_examples=40, deadline=None)
def test_front_matter_of_any_size_keeps_a_bounded_set_of_filter_fields(pairs, titled):
    """#33: front matter is the file author's to size; what is kept of it is bounded: at most
    MAX_FRONT_MATTER_KEYS keys read, at most MAX_FIELDS filter fields (the title always among
    them), names a filter can ask for, values cut at MAX_FIELD_CHARS."""
    front = "".join(f"{k}: {v}\n" for k, v in pairs)
    meta, body = split_front_matter(f"---\n{front}---\n# Title\n\nBody.")
    assert len(meta) <= MAX_FRONT_MATTER_KEYS and body.endswith("Body.")
    if titled:  # as the ingest adds it: the front matter's own title, else the document's
        meta.setdefault("title", "Title")
    fields = filterable(tuple(meta.items()))
    assert len(fields) <= MAX_FIELDS
    assert all(re.fullmatch(FIELD_NAME, k) and len(v) <= MAX_FIELD_CHARS for k, v in fields)
    if "title" in meta and re.fullmatch(FIELD_NAME, "title"):
        assert ("title", meta["title"][:MAX_FIELD_CHARS]) in fields


def test_a_front_matter_edit_alone_rewrites_the_document(store, tmp_path):
    """The text's hash decides "unchanged"; a front-matter edit (an owner, a label-free field)
    left the old fields stored, and so did a record stored before its fields were bounded and
    went through DLP. Now either rewrites that document, and only that one."""
    docs = write(tmp_path / "docs", {"a.md": "---\nowner: alice\n---\n# A\n\nThe body of a.",
                                     "b.md": "# B\n\nThe body of b."})
    ingest_paths(store, [docs], DEFAULT)
    (docs / "a.md").write_text("---\nowner: bob\n---\n# A\n\nThe body of a.")
    (docs / "b.md").write_text("# B\n\nThe body of b.")  # touched, not changed
    report = ingest_paths(store, [docs], DEFAULT)
    assert report.changed == ["docs/a.md"] and "docs/b.md" in report.unchanged
    assert dict(store.documents()["docs/a.md"].meta)["owner"] == "bob"


STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"  # split: the repository's own secret scan must not flag the test
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
SECRETS = (STRIPE, AWS, "alice.smith@corp-mail.com")


def _stored(store: SQLiteStore) -> str:
    """Every name, field and chunk text the store holds, as one string to search. Where files
    and collection folders sit on disk (file signatures, collection roots, origins: paths as
    written) is the operator's own bookkeeping, which maps files to documents and is never
    shown to a caller; everything a caller can be shown is here."""
    parts = [f"{r.doc} {r.collection} {r.meta}" for r in store.documents().values()]
    parts += [c.text + c.id for c in store.snapshot().chunks]
    parts += [k + v for k, v in store.meta().items() if k != "files" and not k.startswith("collection:")]
    return "\n".join(parts)


def _leaks(store: SQLiteStore) -> list[str]:
    held = _stored(store)
    return [s for s in SECRETS if s in held or s[4:16] in held]


def test_files_and_folders_named_like_keys_are_stored_under_redacted_names(tmp_path, store):
    """#33 (1, the rest): a document id went in as written, so a file named like a live key was
    its own leak in every listing, citation and `path` filter. Names go through the same DLP as
    the text: a key anywhere in a segment (a folder's, dotted or joined by "_") replaces that
    segment, a file keeps its extension, and two files named like different keys stay apart."""
    docs = write(tmp_path / "ops", {f"keys/{STRIPE}.md": body("billing"), f"keys/backup_{AWS}.txt": body("storage"),
                                    "keys/old_" + STRIPE.replace("4eC", "9xZ") + ".md": body("refunds"),
                                    f"creds.{AWS}/a.md": body("rotation"), "share/alice.smith@corp-mail.com/n.md": body("notes"),
                                    "notes.md": body("notes")})
    first = ingest_paths(store, [docs], DEFAULT, collection="")
    ids = sorted(store.documents())
    assert len(ids) == 6 and sorted(first.added) == ids and "notes.md" in ids and not _leaks(store)
    assert [i.split("/")[0] for i in ids if i.endswith("/a.md")] != ["creds"]  # the folder's whole name goes
    assert sum(i.startswith("keys/REDACTED-") and i.endswith(".md") for i in ids) == 2
    assert first.findings[next(i for i in ids if i.endswith(".txt"))].get("aws_access_key") == 1  # the report says why
    again = ingest_paths(store, [docs], DEFAULT, collection="")
    assert sorted(again.unchanged) == ids and not again.added and not again.removed
    engine = Engine.from_store(store, DEFAULT)
    assert engine.retrieve("billing in depth for new users").hits[0].chunk.doc.startswith("keys/REDACTED-")


def test_a_redacted_name_is_the_same_whatever_else_is_ingested_or_in_what_order(tmp_path):
    """The tag is a keyed hash of the name as written: a record order, another file, another run
    or another worker never moves a document to another id; a file saved back under the id the
    index shows is a name like any other, tagged anew, and never takes the first file's id."""
    a, b = SQLiteStore(tmp_path / "a"), SQLiteStore(tmp_path / "b")
    for st_ in (a, b):
        st_.apply([], [], {"name_key": "k" * 32})
    one = write(tmp_path / "one", {f"{AWS}.txt": body("storage")})
    ingest_paths(a, [one], DEFAULT, collection="")
    (only,) = a.documents()
    two = write(tmp_path / "two", {"x.md": body("notes"), f"{AWS}.txt": body("storage"), only: body("decoy")})
    report = ingest_paths(b, [two], DEFAULT, collection="")
    assert only in b.documents() and len(b.documents()) == 3 and len(report.added) == 3
    assert not any(report.findings.get(d, {}).get("name") for d in b.documents())


def test_a_record_claiming_a_key_named_file_is_refused_as_before(tmp_path, store):
    """#33 (9) stays closed: a .jsonl record that names a file's document maps to the same
    redacted id, so it is refused by name, not stored beside it as a look-alike."""
    docs = write(tmp_path / "ops", {f"{STRIPE}.md": body("billing"),
                                    "evil.jsonl": '{"id": "e#0", "doc": "' + STRIPE + '.md", "text": "Refunds are never issued."}\n'})
    report = ingest_paths(store, [docs], DEFAULT, collection="")
    assert len(store.documents()) == 1 and list(report.refused) == [f"evil.jsonl: {STRIPE}.md"]


def test_a_document_moves_between_name_forms_and_is_never_stored_twice(tmp_path, store):
    """An index written before names went through DLP (or under --dlp off) holds the raw id: the
    next ingest stores the file under the redacted id and removes the raw one; --dlp label moves
    it back, restricted. Never two copies, never one reported gone while its file is there."""
    docs = write(tmp_path / "ops", {f"{STRIPE}.md": body("billing"), "notes.md": body("notes")})
    ingest_paths(store, [docs], override(DEFAULT, dlp="off"), collection="")
    assert f"{STRIPE}.md" in store.documents()
    moved = ingest_paths(store, [docs], DEFAULT, collection="")
    ids = sorted(store.documents())
    assert len(ids) == 2 and not _leaks(store) and moved.removed == [f"{STRIPE}.md"] and not moved.gone
    back = ingest_paths(store, [docs], override(DEFAULT, dlp="label"), collection="")
    assert {d: r.label for d, r in store.documents().items()} == {f"{STRIPE}.md": "restricted", "notes.md": "public"}
    assert not back.gone and len(back.removed) == 1


def test_a_held_version_keeps_the_stored_one_under_its_old_name(tmp_path, store):
    """Screening keeps a new version out and the previous one stays: also when the new one would
    have moved it to its redacted name."""
    docs = write(tmp_path / "ops", {f"{AWS}.md": body("storage")})
    ingest_paths(store, [docs], override(DEFAULT, dlp="off"), collection="")
    for prune in (False, True):
        report = ingest_paths(store, [docs], DEFAULT, collection="", prune=prune, screen=lambda doc, file: ["held for the test"])
        assert list(store.documents()) == [f"{AWS}.md"] and len(report.held) == 1 and not report.removed and not report.gone


def test_a_key_named_collection_keeps_its_redacted_name_as_the_folder_grows(tmp_path, store):
    """A known collection's stored name is its name: a second ingest of the folder, a new file in
    it, or one file of it given alone never redacts it again (the folder stays one collection)."""
    docs = write(tmp_path / AWS, {"a.md": body("storage")})
    ingest_paths(store, [docs], DEFAULT)
    write(docs, {"b.md": body("notes")})
    ingest_paths(store, [docs], DEFAULT)
    ingest_paths(store, [docs / "a.md"], DEFAULT)
    assert len({d.split("/")[0] for d in store.documents()}) == 1 and len(store.documents()) == 2
    (docs / "a.md").unlink()
    assert len(ingest_paths(store, [docs], DEFAULT, prune=True).removed) == 1


def test_a_front_matter_field_named_like_a_key_is_dropped(tmp_path, store):
    """A field's name is a name like a file's: one holding a key is not kept as a filter field."""
    token = "ghp_" + "1234567890abcdefghijklmnopqrstuvwxyzAB"
    docs = write(tmp_path / "ops", {"a.md": f"---\n{token}: yes\nowner: platform\n---\n# Notes\n\nRotate monthly."})
    report = ingest_paths(store, [docs], DEFAULT, collection="")
    (record,) = store.documents().values()
    assert token[4:].lower() not in str(record.meta).lower() and dict(record.meta)["owner"] == "platform"
    assert report.findings["a.md"] == {"github_token": 1}


def test_a_records_name_keeps_no_made_up_extension(tmp_path, store):
    """Only a format the loaders read counts as an extension: a record named "password.<value>"
    does not keep its value as one."""
    docs = write(tmp_path / "ops", {"recs.jsonl": '{"id": "r#0", "doc": "password.Zq7xK9p2", "text": "Toner is in room 4."}\n'})
    ingest_paths(store, [docs], DEFAULT, collection="")
    assert "Zq7xK9p2" not in str(list(store.documents()))


def test_a_key_named_collection_is_redacted_and_still_prunes(tmp_path, store):
    """A collection named after its folder is a name like a document's: redacted, recorded on
    its documents (so --prune still finds what is gone), and moved when an index holds it raw."""
    docs = write(tmp_path / AWS, {"a.md": body("storage"), "b.md": body("notes")})
    ingest_paths(store, [docs], override(DEFAULT, dlp="off"))
    assert sorted(store.documents()) == [f"{AWS}/a.md", f"{AWS}/b.md"]
    ingest_paths(store, [docs], DEFAULT)
    records = store.documents().values()
    assert len(records) == 2 and not _leaks(store)
    assert {r.collection for r in records} == {next(iter(records)).doc.split("/")[0]}
    (docs / "b.md").unlink()
    pruned = ingest_paths(store, [docs], DEFAULT, prune=True)
    assert len(pruned.removed) == 1 and len(store.documents()) == 1
    explicit = SQLiteStore(tmp_path / "explicit")
    ingest_paths(explicit, [docs], DEFAULT, collection=AWS)
    assert not _leaks(explicit)


def test_under_dlp_label_a_key_in_the_name_restricts_the_document(tmp_path, store):
    docs = write(tmp_path / "ops", {f"{AWS}.md": body("storage"), "notes.md": body("notes")})
    report = ingest_paths(store, [docs], override(DEFAULT, dlp="label"), collection="")
    assert {d: r.label for d, r in store.documents().items()} == {f"{AWS}.md": "restricted", "notes.md": "public"}
    assert report.findings[f"{AWS}.md"] == {"aws_access_key": 1}


def test_in_memory_engines_name_documents_as_ingest_does(tmp_path):
    docs = write(tmp_path / "ops", {f"{STRIPE}.md": body("billing"), f"{STRIPE.replace('4eC', '0aa')}.md": body("refunds")})
    ids = {c.doc for c in Engine.from_paths([docs], DEFAULT).index.chunks}
    assert len(ids) == 2 and all(i.startswith("REDACTED-") and i.endswith(".md") for i in ids)


SEP = st.sampled_from(["_", "-", ".", " ", "+", "~"])  # glued to a word, a key is no key to DLP, in text or name
WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=0, max_size=8)
KEY = st.one_of(st.from_regex(r"AKIA[0-9A-Z]{16}", fullmatch=True), st.from_regex(r"sk_live_[0-9a-zA-Z]{24}", fullmatch=True),
                st.from_regex(r"ghp_[0-9a-zA-Z]{36}", fullmatch=True), st.from_regex(r"glpat-[0-9a-zA-Z_-]{20}", fullmatch=True))


@given(before=WORD, after=WORD, sep1=SEP, sep2=SEP, key=KEY, folder=st.booleans(), ext=st.sampled_from(["", ".md", ".txt"]))
@hsettings(max_examples=200, deadline=None)
def test_no_key_survives_in_a_name_from_any_position(before, after, sep1, sep2, key, folder, ext):
    """By construction: a key before, after or between words, joined by any separator, in a folder
    or a file name, is gone from the redacted id, which keeps the rest of the path and the
    extension; the id, saved back as a name, is tagged anew, never kept as the same id."""
    segment = f"{before}{sep1 if before else ''}{key}{sep2 if after else ''}{after}"
    name = f"top/{segment}/page.md" if folder else f"top/{segment}{ext}"
    safe, found = redacted_id(name, "k" * 32)
    assert found and key not in safe and key[6:18] not in safe
    assert safe.startswith("top/") and safe.endswith("/page.md" if folder else ext)
    again, found_again = redacted_id(safe, "k" * 32)
    assert again != safe and found_again == {}


VALUE = st.one_of(KEY, st.just("alice.smith@corp-mail.com"), st.just("password: Hunter2x9"), st.just("AB123456C"),
                  st.just("4111 1111 1111 1111"), st.text(max_size=12))


@given(stem=st.builds(lambda a, v, b: a + v + b, st.text(max_size=10), VALUE, st.text(max_size=10)).filter(
    lambda t: "/" not in t and t.strip() != ""))
@hsettings(max_examples=300, deadline=None)
def test_whatever_dlp_finds_in_a_name_read_as_text_is_redacted(stem):
    """The same DLP as the text: anything it finds in a file's name, read as a line of text, takes
    the name out, whatever surrounds it (values DLP finds, glued to arbitrary text)."""
    if guard.redact(stem)[1]:
        safe, found = redacted_id(f"d/{stem}", "k" * 32)
        assert safe != f"d/{stem}" and found


@pytest.mark.parametrize("stem", ["password_Hunter2x9", "wifi_password_is_Tr0ub4dor", "glpat-rWcqFLm9_BBbKeP5Cxoe",
                                  "backup_" + STRIPE, f"notes.{AWS}", "alice.smith@corp-mail.com",
                                  "db_password=Zq7xK9p2mW", "notes password=Zq7xK9p2mW"])
def test_names_a_review_found_taken_out(stem, tmp_path, store):
    """Names an outside review got past an earlier version: each is redacted in the id and in the
    title a document without a heading takes from its file's name."""
    docs = write(tmp_path / "ops", {f"{stem}.txt": "Rotation happens every quarter, on the first Monday."})
    ingest_paths(store, [docs], DEFAULT, collection="")
    (record,) = store.documents().values()
    assert stem not in record.doc and stem not in str(record.meta) and record.doc.startswith("REDACTED-")


def test_a_file_whose_name_is_not_utf8_is_skipped_with_a_warning(tmp_path, store, caplog):
    """Undecodable bytes in a file name stopped the whole ingest with a traceback: the file is now
    skipped with one warning and the rest goes in."""
    import os

    docs = write(tmp_path / "ops", {"notes.md": body("notes")})
    (docs / os.fsdecode(b"bad\xff.md")).write_text(body("storage"))
    with caplog.at_level("WARNING", logger="microrag"):
        report = ingest_paths(store, [docs], DEFAULT, collection="")
    assert report.added == ["notes.md"] and "not UTF-8" in caplog.text



def test_the_progress_line_moves_while_one_big_page_embeds(tmp_path, monkeypatch, capsys):
    """#34: a page of many chunks embeds in many groups; the line counts each group's chunks,
    so it moves while the file count sits on that page."""
    from microrag_engine import ingest

    monkeypatch.setattr(ingest, "EMBED_CHUNKS", 4)
    big = Document("big.md", " ".join(f"Sentence number {i} says something about topic {i}." for i in range(400)))
    ingest.stream_documents(SQLiteStore(tmp_path / "ix"), [(big, "")], SEED, progress=True)
    err = capsys.readouterr().err
    counts = [int(m.replace(",", "")) for m in re.findall(r"([\d,]+) chunks embedded", err)]
    assert len(counts) >= 2 and counts == sorted(counts), err[-300:]
    told = []  # without a terminal: the callback hears each landing too
    ingest.stream_documents(SQLiteStore(tmp_path / "ix2"), [(big, "")], SEED, progress=lambda *a: told.append(a))
    landings = [chunks for _, _, chunks in told if chunks]
    assert len(landings) >= 2 and landings == sorted(landings) and {total for _, total, _ in told} == {0}
