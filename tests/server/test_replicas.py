"""Stateless replicas on PostgreSQL streaming replication (issue #20): a real primary and a
real hot standby on 127.0.0.1 (``scripts/pg_loopback.py run --standby``, as ``make test``
runs it) and two ``microrag serve`` processes, each writing to the primary and reading from
the standby. What one replica takes in, the other serves; a key revoked through one fails on
both at once; the rate limit is one budget across both; an uploader reads their own upload
through the other replica without waiting for replication."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from helpers.net import free_port
from helpers.server import HANDBOOK
from microrag_engine.config import preset
from microrag_engine.ingest import ingest_paths
from microrag_engine.store import open_store

PRIMARY, STANDBY = os.environ.get("MICRORAG_TEST_PG", ""), os.environ.get("MICRORAG_TEST_PG_STANDBY", "")
pytestmark = pytest.mark.skipif(not (PRIMARY and STANDBY),
                                reason="needs a primary and a hot standby: make test runs scripts/pg_loopback.py run --standby")

UPLOAD = ("# Bicycle storage\n\nBicycles are stored in the cage behind building C. The cage code changes every "
          "quarter and is posted at the reception desk.")


def _replica(index: str, standby: str, workdir: Path, rate: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = (workdir / f"replica-{port}.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "microrag_engine.cli", "serve", "--index", index, "--standby", standby,
                             "--port", str(port), "--rate-per-minute", str(rate), "--no-verify", "-q"],
                            cwd=workdir, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"replica exited: {(workdir / f'replica-{port}.log').read_text()[-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("replica did not start within 120 s")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[dict]:
    from microrag_engine.server.auth import KeyStore
    from microrag_engine.server.tables import PostgresTables

    work = tmp_path_factory.mktemp("replicas")
    schema = f"rep_{os.getpid()}_{random.randrange(10**9)}"
    index, standby = f"{PRIMARY}?schema={schema}", f"{STANDBY}?schema={schema}"
    corpus = work / "corpus"
    corpus.mkdir()
    for name, text in HANDBOOK.items():
        (corpus / name).write_text(text)
    store = open_store(index)
    ingest_paths(store, [corpus], preset("default"), collection="")
    keys = KeyStore(PostgresTables(store))  # where `microrag keys add --index postgresql://...` puts them
    key = {"admin": keys.add("root", "admin", ["public", "internal", "restricted"]),
           "reader": keys.add("rita", "reader", ["public"]), "spare": keys.add("sam", "reader", ["public"]),
           "trusted": keys.add("tess", "contributor", ["public"], trusted=True), "meter": keys.add("max", "reader", ["public"]),
           "contrib": keys.add("bob", "contributor", ["public"])}
    procs = []
    try:
        for _ in range(2):
            proc, url = _replica(index, standby, work, rate=40)
            procs.append((proc, url))
        yield {"a": procs[0][1], "b": procs[1][1], "key": key, "store": store}
    finally:
        for proc, _ in procs:
            proc.terminate()
            proc.wait(timeout=20)
        store.drop()
        store.close()


def _call(cluster: dict, replica: str, method: str, path: str, who: str, **kw) -> httpx.Response:
    return httpx.request(method, cluster[replica] + path, headers={"Authorization": f"Bearer {cluster['key'][who]}"},
                         timeout=60, **kw)


def _docs(cluster: dict, replica: str, who: str, query: str) -> list[str]:
    r = _call(cluster, replica, "POST", "/search", who, json={"query": query})
    assert r.status_code == 200, r.text
    return [h["doc"] for h in r.json()["hits"]]


def test_both_replicas_serve_and_the_standby_is_one(cluster):
    """(That reads go to the standby is shown below: with its replay paused, a replica does not
    see an upload the primary has.)"""
    for replica in ("a", "b"):
        assert "leave.md" in _docs(cluster, replica, "reader", "How many vacation days do employees get?")
    assert _standby("SELECT pg_is_in_recovery()")[0]


def _standby(sql: str) -> tuple:
    import psycopg

    with psycopg.connect(STANDBY, autocommit=True) as conn:
        return conn.execute(sql).fetchone()


def test_an_upload_through_one_replica_is_served_by_the_other(cluster):
    """With the standby's replay paused, B cannot show a reader the upload (B reads from the
    standby) but shows it to its uploader (read from the primary: their own write); once
    replay resumes, B serves it to everyone."""
    question = "where are bicycles stored?"
    _standby("SELECT pg_wal_replay_pause()")
    try:
        r = _call(cluster, "a", "POST", "/ingest", "trusted", json={"source": "bikes.md", "body": UPLOAD})
        assert r.status_code == 200 and r.json()["status"] == "live", r.text
        doc = r.json()["doc"]
        assert _docs(cluster, "b", "trusted", question)[0] == doc
        assert doc not in _docs(cluster, "b", "reader", question)
    finally:
        _standby("SELECT pg_wal_replay_resume()")
    deadline, seen = time.time() + 20, []
    while time.time() < deadline:
        seen = _docs(cluster, "b", "reader", question)
        if seen and seen[0] == doc:
            break
        time.sleep(0.2)
    assert seen and seen[0] == doc
    time.sleep(1.2)  # a replica looks for other replicas' writes once a second
    assert doc in [d["doc"] for d in _call(cluster, "b", "GET", "/documents", "admin").json()]


def test_review_queue_and_audit_trail_are_shared(cluster):
    """An upload held through A is reviewed and approved through B; B's audit shows A's queries."""
    body = "# Parking\n\nVisitor parking is on level 2 of the north garage; ask reception for a day pass."
    r = _call(cluster, "a", "POST", "/ingest", "contrib", json={"source": "parking.md", "body": body})
    assert r.status_code == 200 and r.json()["status"] == "quarantined", r.text
    doc = r.json()["doc"]
    queued = [e for e in _call(cluster, "b", "GET", "/review", "admin").json() if e["doc"] == doc]
    assert queued, "the review queue is per replica"
    approved = _call(cluster, "b", "POST", f"/review/{doc}/approve?version={queued[0]['version']}", "admin")
    assert approved.status_code == 200, approved.text
    assert _call(cluster, "a", "GET", "/review", "admin").json() == []  # taken once, for both
    deadline, seen = time.time() + 20, []
    while time.time() < deadline and doc not in seen:
        seen = _docs(cluster, "a", "reader", "where is visitor parking?")
        time.sleep(0.2)
    assert doc in seen
    trail = _call(cluster, "b", "GET", "/audit?limit=200", "admin").json()
    assert any(row["action"] == "ingest" and row["query"] == doc for row in trail)  # written by A
    assert any(row["action"] == "search" and "visitor parking" in row["query"] for row in trail)


def test_a_key_revoked_through_one_replica_fails_on_both(cluster):
    for replica in ("a", "b"):
        assert _call(cluster, replica, "GET", "/whoami", "spare").status_code == 200
    kid = next(r[0] for r in cluster["store"].x("SELECT id, name FROM keys") if r[1] == "sam")
    assert _call(cluster, "a", "DELETE", f"/keys/{kid}", "admin").status_code == 200
    for replica in ("a", "b"):  # no waiting: keys are read from the primary on every request
        r = _call(cluster, replica, "GET", "/whoami", "spare")
        assert r.status_code == 401 and "revoked" in r.json()["error"]


def test_the_rate_limit_is_one_budget_across_replicas(cluster):
    """40 a minute in all: alternating replicas, the 41st request is refused, by either."""
    codes = [_call(cluster, "ab"[i % 2], "GET", "/whoami", "meter").status_code for i in range(44)]
    assert codes[:30].count(429) == 0
    assert 429 in codes and codes.count(200) <= 41


def test_a_wrong_standby_is_one_clear_error(cluster):
    """Found by a new-user trial: a malformed URI and a standby of another database gave tracebacks."""
    from microrag_engine.errors import MicroRAGError
    from microrag_engine.store.postgres import PostgresStore

    schema = cluster["store"].schema
    with pytest.raises(MicroRAGError, match="not a PostgreSQL URI"):
        PostgresStore(PRIMARY, schema=schema, read_uri="not a uri")
    with pytest.raises(MicroRAGError, match=r"cannot connect to the standby \(--standby\)"):
        PostgresStore(PRIMARY, schema=schema, read_uri="postgresql://postgres@127.0.0.1:1/postgres")
    with pytest.raises(MicroRAGError, match="has no index schema"):
        PostgresStore(PRIMARY, schema=schema, read_uri=STANDBY.rsplit("/", 1)[0] + "/template1")
