"""Step 3, the name prior: rare words of titles and file names, per clearance."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from microrag_engine.config import override, preset
from microrag_engine.engine import Engine
from microrag_engine.errors import ConfigError
from microrag_engine.retrieve.names import DocNames, name_boost, name_tokens
from microrag_engine.types import Chunk, Document

FACT = "The parking records are kept by the facilities team."


def test_a_name_is_its_title_and_its_file_stem_read_as_words():
    toks = name_tokens("reference/sql-create_table.html", "CREATE TABLE")
    assert {"creat", "tabl", "sql"} <= toks
    assert "html" not in toks and "refer" not in toks  # the extension and the folders are not the name


def test_only_words_rare_among_the_names_count():
    titles = {f"guide-{t}.md": f"Guide: {t}" for t in ("vpn", "printers", "email", "badges", "payroll")}
    titles.update({f"more/guide-{i}.md": f"Guide {i}" for i in range(35)})
    titles["vpn-windows.md"] = "VPN on Windows"
    names = DocNames(titles, rare=0.05)  # 41 names: a word in at most 2 of them is rare
    assert "guid" not in names.named  # in every name
    assert names.named_by("guide to the vpn") == {"guide-vpn.md": 1.0, "vpn-windows.md": 0.5}
    assert names.named_by("how do I reset a password") == {}
    boost = name_boost(names, "vpn", 0.1)
    assert boost == {"guide-vpn.md": pytest.approx(-0.1), "vpn-windows.md": pytest.approx(-0.05)}
    assert name_boost(names, "vpn", 0.0) == {}


def _docs(*paths: str) -> list[Document]:
    return [Document(p, "", prechunked=(Chunk(f"{p}#0", p, 0, 0, len(FACT), FACT),)) for p in paths]


@pytest.mark.parametrize("first_pass", [False, True])
@pytest.mark.parametrize("weight,first", [(0.0, "notes.md"), (0.1, "parking.md")])
def test_a_page_named_by_the_question_wins_a_tie(weight, first, first_pass):
    """The same sentence on two pages: without the prior the tie goes by corpus order, with it
    to the page whose name the question holds; scored over every chunk, or over an ANN first
    pass's candidates (a large index)."""
    if first_pass:
        pytest.importorskip("faiss", reason="the ANN first pass needs faiss (extra 'ann')")
    settings = override(preset("default"), embedder="hash", w_name=weight, ann_threshold=1 if first_pass else 50_000)
    engine = Engine.from_documents(_docs("notes.md", "parking.md"), settings)
    assert (engine.index.ann is not None) == first_pass
    hits = engine.retrieve("who keeps the parking records?").hits
    assert [h.chunk.text for h in hits[:2]] == [FACT, FACT]
    assert hits[0].chunk.doc == first


def test_a_name_the_caller_cannot_read_does_not_move_a_readable_page():
    """The statistic is per clearance: a secret page also named "parking" makes the word common
    for those who can read it, and changes nothing for those who cannot."""
    settings = override(preset("default"), embedder="hash")
    engine = Engine.from_documents(_docs("notes.md", "parking.md", "parking-plan.md"), settings)
    engine.relabel([c.doc == "parking-plan.md" for c in engine.index.chunks], "secret")
    alone = Engine.from_documents(_docs("notes.md", "parking.md"), settings)
    ask = "who keeps the parking records?"
    public = [h.chunk.doc for h in engine.retrieve(ask, labels=["public"]).hits]
    assert public == [h.chunk.doc for h in alone.retrieve(ask).hits]
    assert public[0] == "parking.md"
    # Read with the secret page, "parking" names two of three pages: not rare, so no prior.
    assert [h.chunk.doc for h in engine.retrieve(ask, labels=["public", "secret"]).hits][0] == "notes.md"


def test_the_prior_reads_stored_titles(tmp_path):
    """An index on disk: titles come from the stored records (front matter here)."""
    from microrag_engine.ingest import ingest_paths
    from microrag_engine.store import open_store

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(f"{FACT}\n")
    (tmp_path / "docs" / "b.md").write_text(f"---\ntitle: Parking\n---\n{FACT}\n")
    settings = override(preset("default"), embedder="hash", dlp="off")
    store = open_store(tmp_path / "ix", create=True)
    ingest_paths(store, [tmp_path / "docs"], settings, collection="")
    for weight, first in ((0.0, "a.md"), (0.1, "b.md")):
        engine = Engine.from_store(store, override(settings, w_name=weight))
        assert engine.retrieve("who keeps the parking records?").hits[0].chunk.doc == first
    store.close()


@pytest.mark.parametrize("knobs", [{"w_name": -0.1}, {"name_rare": 0.0}, {"name_rare": 1.5}])
def test_name_prior_knobs_are_checked(knobs):
    with pytest.raises(ConfigError, match="w_name"):
        override(preset("default"), **knobs)


@given(titles=st.dictionaries(st.text(max_size=40), st.text(max_size=80), max_size=12), query=st.text(max_size=200),
       rare=st.floats(0.01, 1.0))
@settings(max_examples=200, deadline=None)
def test_any_names_and_question_give_shares_in_range(titles, query, rare):
    """Untrusted names and questions: never an error, every share in (0, 1], only known documents."""
    shares = DocNames(titles, rare).named_by(query)
    assert set(shares) <= set(titles)
    assert all(0 < s <= 1 for s in shares.values())


def test_a_relabel_after_a_query_derives_the_name_statistics_again():
    """The statistics are cached per clearance: a page made secret after the first query must
    stop counting for those who can no longer read it."""
    settings = override(preset("default"), embedder="hash")
    engine = Engine.from_documents(_docs("notes.md", "parking.md", "parking-plan.md"), settings)
    ask = "who keeps the parking records?"
    assert engine.retrieve(ask, labels=["public"]).hits[0].chunk.doc == "notes.md"  # "parking" names two pages
    engine.relabel([c.doc == "parking-plan.md" for c in engine.index.chunks], "secret")
    assert engine.retrieve(ask, labels=["public"]).hits[0].chunk.doc == "parking.md"


@pytest.mark.parametrize("hidden", ["restricted", "_quarantine"])
def test_a_stored_page_the_caller_cannot_read_does_not_count(tmp_path, hidden):
    """An index on disk: a restricted page (front matter) counts only for those cleared for it,
    and one waiting for review (``_quarantine``, relabelled in the engine) for no one."""
    from microrag_engine.ingest import ingest_paths
    from microrag_engine.store import open_store

    (tmp_path / "docs").mkdir()
    for name in ("notes.md", "parking.md"):
        (tmp_path / "docs" / name).write_text(f"{FACT}\n")
    front = "---\nlabel: restricted\n---\n" if hidden == "restricted" else ""
    (tmp_path / "docs" / "parking-plan.md").write_text(f"{front}Spaces are assigned in March.\n")
    settings = override(preset("default"), embedder="hash", dlp="off")
    store = open_store(tmp_path / "ix", create=True)
    ingest_paths(store, [tmp_path / "docs"], settings, collection="")
    engine = Engine.from_store(store, settings)
    if hidden == "_quarantine":
        engine.relabel([c.doc == "parking-plan.md" for c in engine.index.chunks], hidden)
    ask = "who keeps the parking records?"
    assert engine.retrieve(ask, labels=None if hidden == "_quarantine" else ["public"]).hits[0].chunk.doc == "parking.md"
    if hidden == "restricted":  # cleared: "parking" names two pages of three, so no prior, and corpus order decides
        assert engine.retrieve(ask, labels=["public", "restricted"]).hits[0].chunk.doc == "notes.md"
    store.close()


def test_a_question_of_many_words_looks_up_a_bounded_number():
    titles = {f"p{i}.md": f"word{i}" for i in range(200)}
    names = DocNames(titles, rare=0.05)
    assert len(names.named_by(" ".join(f"word{i}" for i in range(200)))) == 32
