"""Seed fidelity: the walkthrough's numbers, to the printed digit, read from data files."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, needs_shared, run_cli
from microrag_engine.cli.query import format_hit, rank_line
from microrag_engine.config import preset
from microrag_engine.engine import Engine

pytestmark = needs_shared
EXPECTED = json.loads((FIXTURES / "seed-kb-expected.json").read_text()) if FIXTURES.is_dir() else {"queries": {}}


@pytest.fixture(scope="module")
def seed_engine(seed_kb):
    return Engine.from_paths([seed_kb], preset("seed"))


def test_seed_counts(seed_engine):
    assert len(seed_engine.index.chunks) == EXPECTED["chunks"]
    assert seed_engine.index.dim == EXPECTED["embedding_dim"]


@pytest.mark.parametrize("query", sorted(EXPECTED["queries"]))
def test_seed_scores_reproduce(seed_engine, query):
    hits = seed_engine.retrieve(query).hits
    expected = EXPECTED["queries"][query]
    assert len(hits) == len(expected)
    for hit, exp in zip(hits, expected):
        assert (hit.chunk.doc, hit.chunk.index) == (exp["doc"], exp["chunk"])
        # "to the printed precision": hybrid printed with 3 decimals, legs with 2
        assert f"{hit.hybrid:.3f}" == f"{exp['hybrid']:.3f}"
        assert f"{hit.kw:.2f}" == f"{exp['kw']:.2f}"
        assert f"{hit.em:.2f}" == f"{exp['em']:.2f}"


def test_seed_scores_reproduce_from_a_persistent_index(seed_kb, tmp_path):
    from microrag_engine.ingest import ingest_paths
    from microrag_engine.store import open_store

    store = open_store(tmp_path / "ix")
    ingest_paths(store, [seed_kb], preset("seed"))
    engine = Engine.from_store(store, preset("seed"))
    assert len(engine.index.chunks) == EXPECTED["chunks"] and engine.index.dim == EXPECTED["embedding_dim"]
    for query, expected in EXPECTED["queries"].items():
        got = [(h.chunk.doc, h.chunk.index, f"{h.hybrid:.3f}", f"{h.kw:.2f}", f"{h.em:.2f}") for h in engine.retrieve(query).hits]
        # a persistent index's ids carry their collection (the folder's name); the scores are the seed's
        assert got == [(f"{seed_kb.name}/{e['doc']}", e["chunk"],
                        f"{e['hybrid']:.3f}", f"{e['kw']:.2f}", f"{e['em']:.2f}") for e in expected]


def test_seed_retrieve_is_bare(seed_engine):
    # The seed's retrieve has no cap: three chunks of one file come back.
    docs = [h.chunk.doc for h in seed_engine.retrieve("how do I reset my password?").hits]
    assert docs.count("password_policy.md") == 3


def test_seed_cli_first_line(seed_kb):
    proc = run_cli("retrieve", "--preset", "seed", "--corpus", str(seed_kb), "how do I reset my password?")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "[0.846 kw=1.00 em=0.69] password_policy.md · chunk 0"
    assert "13 chunks" in proc.stderr and "dim 128" in proc.stderr  # diagnostics on stderr
    assert "13 chunks" not in proc.stdout


def test_format_hit_matches_seed(seed_engine):
    hit = seed_engine.retrieve("how do I reset my password?").hits[0]
    assert format_hit(hit).splitlines()[0] == "[0.846 kw=1.00 em=0.69] password_policy.md · chunk 0"


# ---------------------------------------------------------------- ranking protocol

RANK_QUERIES = [
    "reset my password okta",
    "vpn globalprotect access",
    "postgresql database hostname",
    "new hire orientation onboarding",
    "flibberjab wuzzle qxzzy",
    "database",
]


@pytest.fixture(scope="module")
def rank_lines():
    proc = run_cli("rank", "--preset", "seed", "--corpus", str(FIXTURES / "assignment-chunks.jsonl"),
                   stdin="\n".join(RANK_QUERIES) + "\n")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(RANK_QUERIES)  # exactly one line per query
    return dict(zip(RANK_QUERIES, lines))


def _ids(line: str) -> list[str]:
    assert line.startswith("OK: "), line
    return line[4:].split(", ")


@pytest.mark.parametrize("query,doc", [
    ("reset my password okta", "password.md"),
    ("vpn globalprotect access", "network.md"),
    ("postgresql database hostname", "database.md"),
    ("new hire orientation onboarding", "onboarding.md"),
])
def test_rank_top_doc(rank_lines, query, doc):
    ids = _ids(rank_lines[query])
    assert ids[0].split("#")[0] == doc
    assert 1 <= len(ids) <= 4


def test_rank_refuses_nonsense(rank_lines):
    assert rank_lines["flibberjab wuzzle qxzzy"] == "REFUSE"


def test_rank_database_is_capped_and_diverse(rank_lines):
    docs = [i.split("#")[0] for i in _ids(rank_lines["database"])]
    assert max(docs.count(d) for d in docs) <= 2
    assert len(set(docs)) >= 2


def test_rank_refuses_empty_lines():
    proc = run_cli("rank", "--preset", "seed", "--corpus", str(FIXTURES / "assignment-chunks.jsonl"),
                   stdin="\n   \nvpn globalprotect access\n")
    assert proc.stdout.splitlines()[:2] == ["REFUSE", "REFUSE"] and proc.stdout.splitlines()[2].startswith("OK: ")


def test_rank_line_format():
    from microrag_engine.types import Retrieval

    assert rank_line(Retrieval("q", [], refused=True, reason="x")) == "REFUSE"
