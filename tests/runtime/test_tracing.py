"""OpenTelemetry spans of the engine: the tree one question makes, what its spans carry, and
that no text is ever in one - recorded by the SDK's in-memory exporter through the module's
own hook (``tracing.use``), since a process sets the global provider only once."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from microrag_engine.config import override, preset  # noqa: E402
from microrag_engine.engine import Engine  # noqa: E402
from microrag_engine.errors import MicroRAGError  # noqa: E402
from microrag_engine.runtime import tracing  # noqa: E402
from microrag_engine.types import Document  # noqa: E402

SECRET = "quokkavault"  # planted in a document: never in a span
DOCS = [Document("handbook/vpn.md", f"# VPN\n\nThe corporate VPN uses WireGuard on UDP port 51820. The {SECRET} "
                                    "gateway is at the data centre."),
        Document("handbook/leave.md", "# Leave\n\nEmployees get 20 vacation days a year. Up to 5 unused days "
                                      "carry over to March 31."),
        Document("hr/salaries-secret-name.md", "# Salary bands\n\nThe engineering salary band L5 pays 180000.")]
QUESTION = "Which UDP port does the corporate VPN use?"


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        yield exporter
    finally:
        tracing.use(None)


@pytest.fixture(scope="module")
def engine():
    return Engine.from_documents(DOCS, override(preset("seed"), chunker="sentences"))


def tree(finished) -> dict[str, list[str]]:
    """Each span's name -> its children's names (spans of one trace)."""
    by_id = {s.context.span_id: s for s in finished}
    out: dict[str, list[str]] = {s.name: [] for s in finished}
    for s in finished:
        if s.parent is not None and s.parent.span_id in by_id:
            out[by_id[s.parent.span_id].name].append(s.name)
    return out


def one(finished, name: str):
    found = [s for s in finished if s.name == name]
    assert len(found) == 1, [s.name for s in finished]
    return found[0]


def everything_said(finished) -> str:
    """Every name, attribute, event and status text of ``finished``, as one string."""
    parts = []
    for s in finished:
        parts += [s.name, s.status.description or "", *map(str, s.attributes.keys()), *map(str, s.attributes.values())]
        for e in s.events:
            parts += [e.name, *map(str, e.attributes.values())]
    return "\n".join(parts)


def assert_no_text(finished, *texts: str) -> None:
    said = everything_said(finished).lower()
    for text in (SECRET, "WireGuard", "180000", "salaries-secret-name", "vpn.md", *texts):
        assert text.lower() not in said, text


def test_an_answer_is_a_tree_of_steps_with_counts_only(spans, engine):
    ans = engine.ask(QUESTION, verify=True)
    finished = spans.get_finished_spans()
    assert tree(finished) == {"microrag.ask": ["microrag.retrieve", "microrag.answer"], "microrag.retrieve": [],
                              "microrag.answer": ["microrag.verify"], "microrag.verify": []}
    assert len({s.context.trace_id for s in finished}) == 1
    retrieve = one(finished, "microrag.retrieve").attributes
    assert retrieve["microrag.k"] == engine.settings.top_k
    assert retrieve["microrag.hits"] == len(ans.retrieval.hits) > 0
    assert retrieve["microrag.refused"] is False and "microrag.refused_by" not in retrieve
    assert 0 < retrieve["microrag.top_score"] <= 1
    answer = one(finished, "microrag.answer").attributes
    assert answer["microrag.mode"] == "extractive" and answer["microrag.refused"] is ans.refused
    assert answer["microrag.passages"] == len(ans.retrieval.hits)
    verify = one(finished, "microrag.verify").attributes
    if ans.verification is not None:  # the shipped NLI model (else the span says it was unavailable)
        assert verify["microrag.sentences"] == len(ans.verification.sentences)
        assert verify["microrag.policy"] == "flag"
    else:
        assert verify["microrag.unavailable"] is True
    assert all(s.status.is_ok for s in finished)
    assert_no_text(finished, QUESTION, "corporate", "51820")


def test_a_refusal_says_who_refused(spans, engine):
    ans = engine.ask("zebra xylophone quantum banana")
    assert ans.refused
    finished = spans.get_finished_spans()
    answer = one(finished, "microrag.answer").attributes
    assert answer["microrag.refused"] is True and answer["microrag.refused_by"] in ("gate", "answerer")
    retrieve = one(finished, "microrag.retrieve").attributes
    if ans.retrieval.refused:
        assert retrieve["microrag.refused_by"] == "gate" == answer["microrag.refused_by"]
    assert "microrag.verify" not in {s.name for s in finished}  # a refusal is not verified
    assert_no_text(finished, "zebra", "xylophone")


def test_a_filtered_retrieval_that_matches_nothing_is_refused_by_the_filter(spans, engine):
    from microrag_engine.store.base import DocFilter

    ans = engine.ask(QUESTION, where=DocFilter.parse(["path=nowhere/*"]))
    assert ans.refused
    finished = spans.get_finished_spans()
    assert one(finished, "microrag.retrieve").attributes["microrag.refused_by"] == "filter"
    assert one(finished, "microrag.answer").attributes["microrag.refused_by"] == "filter"


def test_an_in_memory_ingest_is_chunked_then_embedded(spans):
    Engine.from_documents(DOCS, preset("seed"))
    finished = spans.get_finished_spans()
    assert tree(finished) == {"microrag.ingest": ["microrag.chunk", "microrag.embed"], "microrag.chunk": [],
                              "microrag.embed": []}
    chunks = one(finished, "microrag.chunk").attributes["microrag.chunks"]
    assert one(finished, "microrag.ingest").attributes["microrag.documents"] == 3
    assert one(finished, "microrag.embed").attributes["microrag.chunks"] == chunks > 0
    assert_no_text(finished)


def test_a_stored_ingest_embeds_in_batches_under_one_span(spans, tmp_path):
    from microrag_engine.ingest import ingest_documents
    from microrag_engine.store import open_store

    report = ingest_documents(open_store(tmp_path / "ix", create=True), DOCS, preset("seed"))
    finished = spans.get_finished_spans()
    ingest = one(finished, "microrag.ingest")
    assert ingest.attributes["microrag.documents"] == 3 and ingest.attributes["microrag.changes"] == 3
    assert ingest.attributes["microrag.chunks"] == report.chunks_written
    embeds = [s for s in finished if s.name == "microrag.embed"]
    assert embeds and all(s.parent.span_id == ingest.context.span_id for s in embeds)
    assert_no_text(finished)


def test_an_error_is_recorded_by_its_type_never_its_message(spans):
    with pytest.raises(MicroRAGError), tracing.span("microrag.retrieve", k=3):
        raise MicroRAGError(f"a message quoting {SECRET}")
    (s,) = spans.get_finished_spans()
    assert not s.status.is_ok and s.attributes["error.type"] == "MicroRAGError"
    assert not s.events  # no exception event: its message could quote anything
    assert_no_text([s])


def test_without_a_provider_a_step_is_the_shared_null_one(engine):
    tracing.use(None)
    assert not tracing.enabled()  # (this process never sets the global provider)
    assert tracing.span("microrag.retrieve", k=1) is tracing.NULL
    with tracing.span("microrag.answer") as step:
        step.set(hits=3)


def test_without_opentelemetry_the_engine_answers(monkeypatch, engine):
    monkeypatch.setattr(tracing, "trace", None)  # what the module holds when the import failed
    tracing.use(TracerProvider())  # even with a provider set, nothing is called
    try:
        assert tracing.span("microrag.ask") is tracing.NULL
        assert not engine.ask(QUESTION).refused
    finally:
        tracing.use(None)


def test_setup_reads_the_standard_variables(monkeypatch):
    try:
        assert tracing.setup({}) == "the console"  # no OTLP endpoint set: where an operator sees them at once
        assert tracing.setup({"OTEL_TRACES_EXPORTER": "console"}) == "the console"
        assert tracing.enabled()
        assert tracing.setup({"OTEL_TRACES_EXPORTER": "none"}).startswith("nowhere")
        with pytest.raises(MicroRAGError, match="console, otlp and none"):
            tracing.setup({"OTEL_TRACES_EXPORTER": "zipkin"})
    finally:
        tracing.use(None)


def test_otlp_without_its_exporter_is_one_line_naming_the_package(monkeypatch):
    import sys

    for name in ("opentelemetry.exporter", "opentelemetry.exporter.otlp.proto.http.trace_exporter",
                 "opentelemetry.exporter.otlp.proto.grpc.trace_exporter"):
        monkeypatch.setitem(sys.modules, name, None)
    try:
        with pytest.raises(MicroRAGError, match="pip install opentelemetry-exporter-otlp-proto-http"):
            tracing.setup({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})  # otlp: an endpoint is set
        with pytest.raises(MicroRAGError, match="pip install opentelemetry-exporter-otlp-proto-grpc"):
            tracing.setup({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    finally:
        tracing.use(None)
