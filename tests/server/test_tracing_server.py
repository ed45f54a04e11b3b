"""Spans of a real server (uvicorn in a thread, this process): one ``microrag.request`` per
request, the pipeline's steps beneath it, the route's template and the request id on it, and
no question, document text or name, or key in any span."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="server extra not installed")
pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from helpers.server import Running  # noqa: E402
from microrag_engine.runtime import tracing  # noqa: E402

SECRET_WORDS = ("WireGuard", "51820", "180000", "salaries", "vacation", "Salary")  # document text and names


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    srv = Running(tmp_path_factory.mktemp("tracing"), rate_per_minute=100_000, verify=False)
    try:
        yield srv, exporter
    finally:
        srv.stop()
        tracing.use(None)


def of_request(exporter, rid: str) -> list:
    """The spans of the trace whose request span carries ``rid`` (waiting a moment for it to end)."""
    deadline = time.time() + 5
    while True:
        finished = exporter.get_finished_spans()
        roots = [s for s in finished if s.name == "microrag.request" and s.attributes.get("microrag.request_id") == rid]
        if roots or time.time() > deadline:
            break
        time.sleep(0.02)
    assert len(roots) == 1, [s.name for s in finished]
    return [s for s in finished if s.context.trace_id == roots[0].context.trace_id]


def said(spans) -> str:
    parts = []
    for s in spans:
        parts += [s.name, s.status.description or "", *map(str, s.attributes.values())]
        parts += [str(v) for e in s.events for v in e.attributes.values()]
    return "\n".join(parts).lower()


def test_a_query_is_a_request_span_over_the_pipeline_steps(traced):
    srv, exporter = traced
    r = srv.call("POST", "/query", "reader", headers={"X-Request-ID": "trace-q-1"},
                 json={"query": "Which UDP port does the corporate VPN use?"})
    assert r.status_code == 200, r.text
    spans = of_request(exporter, "trace-q-1")
    root = next(s for s in spans if s.name == "microrag.request")
    assert root.parent is None and root.kind.name == "SERVER"
    assert root.attributes["http.route"] == "/query" and root.attributes["http.method"] == "POST"
    assert root.attributes["http.status_code"] == 200
    # The input guard, retrieval, the answer, then the output guard (as the metrics' "guard" step:
    # once on the answer as numbered for a person, once on its text).
    assert [s.name for s in sorted(spans, key=lambda s: s.start_time) if s.parent == root.context] == [
        "microrag.guard", "microrag.retrieve", "microrag.answer", "microrag.guard", "microrag.guard"]
    guards = [s.attributes for s in sorted(spans, key=lambda s: s.start_time) if s.name == "microrag.guard"]
    assert [g["microrag.guard"] for g in guards] == ["input", "output", "output"]
    assert all(g["microrag.findings"] == 0 for g in guards)
    retrieve = next(s for s in spans if s.name == "microrag.retrieve")
    assert retrieve.attributes["microrag.hits"] == len(r.json()["sources"]) > 0
    for text in (*SECRET_WORDS, "corporate", srv.key["reader"], "rita"):
        assert text.lower() not in said(spans), text


def test_a_refusal_carries_who_refused_and_a_restricted_answer_no_text(traced):
    srv, exporter = traced
    r = srv.call("POST", "/query", "reader", headers={"X-Request-ID": "trace-q-2"},
                 json={"query": "zebra xylophone quantum banana"})
    assert r.json()["refused"]
    answer = next(s for s in of_request(exporter, "trace-q-2") if s.name == "microrag.answer")
    assert answer.attributes["microrag.refused"] is True
    assert answer.attributes["microrag.refused_by"] in ("gate", "answerer")
    r = srv.call("POST", "/query", "admin", headers={"X-Request-ID": "trace-q-3"},
                 json={"query": "What does the engineering salary band L5 pay?"})
    assert "180000" in r.text  # the admin may read it; no span may
    spans = of_request(exporter, "trace-q-3")
    for text in (*SECRET_WORDS, "engineering", srv.key["admin"]):
        assert text.lower() not in said(spans), text


def test_a_route_is_its_template_and_a_callers_trace_is_continued(traced):
    srv, exporter = traced
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    r = srv.call("DELETE", "/documents/salaries.md", "reader", headers={
        "X-Request-ID": "trace-d-1", "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"})
    assert r.status_code == 403  # a reader deletes nothing
    (root,) = of_request(exporter, "trace-d-1")
    assert root.attributes["http.route"] == "/documents/{doc:path}" and root.attributes["http.status_code"] == 403
    assert format(root.context.trace_id, "032x") == trace_id and root.parent is not None  # under the caller's span
    assert root.status.is_unset  # a 4xx is the caller's error, not the server's
    assert "salaries" not in said([root])


def test_without_opentelemetry_the_server_answers(tmp_path, monkeypatch):
    monkeypatch.setattr(tracing, "trace", None)  # what the module holds when the import failed
    srv = Running(tmp_path, verify=False)
    try:
        r = srv.call("POST", "/query", "reader", json={"query": "Which UDP port does the corporate VPN use?"})
        assert r.status_code == 200 and "51820" in r.json()["answer"], r.text
    finally:
        srv.stop()


HOST = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)  # the host application's, once per process
from helpers.server import Running
srv = Running(Path({tmp!r}), verify=False)
r = srv.call("DELETE", "/documents/salaries.md?why=WireGuard", "reader")
assert r.status_code == 403, r.text
r = srv.call("POST", "/query", "reader", json={{"query": "Which UDP port does the corporate VPN use?"}})
assert r.status_code == 200, r.text
srv.stop()
for s in exporter.get_finished_spans():
    print("SPAN", s.name, *sorted(f"{{k}}={{v}}" for k, v in s.attributes.items()))
"""


def test_a_host_applications_global_provider_gets_microrags_spans_and_only_those(tmp_path):
    """Library use: spans go to the global provider the host set; FastAPI's own telemetry
    (which would record the path and the query string) stays off."""
    script = HOST.format(tests=str(Path(__file__).parents[1]), tmp=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    spans = [line for line in proc.stdout.splitlines() if line.startswith("SPAN ")]
    names = [line.split()[1] for line in spans]
    assert names.count("microrag.request") == 2 and "microrag.retrieve" in names, proc.stdout
    assert all(n.startswith("microrag.") for n in names), names
    for text in ("salaries", "WireGuard", "why=", "corporate"):
        assert text.lower() not in "\n".join(spans).lower(), text
