"""OpenTelemetry spans around the pipeline's steps, when something is there to record them.

Library code opens a step with ``span("microrag.retrieve", k=5)``. With ``opentelemetry-api``
installed and a tracer provider in place - the one :func:`use` set (``serve --trace``, a
test), else the host application's global one - it is a real span, current for what runs
inside it, so the steps nest. Otherwise it is one shared do-nothing object: no allocation, a
global read and an ``isinstance`` per step. The spans are made with the API alone; the SDK
and the exporters are the operator's (:func:`setup` is what ``serve --trace`` calls).

What a span may carry: counts, scores, flags and closed-set names (a mode, who refused).
Never the question, a document's text or name, a key: callers pass only the former, and an
exception is recorded by its type alone, since its message may quote any of the latter.
A keyword's name is the attribute's under ``microrag.`` (``k`` -> ``microrag.k``); a name
with a dot in it is kept as it is (``**{"http.route": ...}``, OpenTelemetry's own names).

Not here: context sent on outbound calls (the LLM endpoint), metrics or logs through
OpenTelemetry (metrics are Prometheus's, ``server/metrics.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from ..errors import MicroRAGError

try:
    from opentelemetry import trace
except ImportError:  # the otel extra is not installed: every span is the null one
    trace = None  # type: ignore[assignment]

Value = str | bool | int | float

_provider: Any = None  # set by use(): wins over the global provider
_cached: tuple[Any, Any] = (None, None)  # (provider, its tracer)


# ------------------------------------------------------------------ steps


class Step:
    """A step that records nothing: what :func:`span` gives when no provider listens."""

    __slots__ = ()

    def __enter__(self) -> Step:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def set(self, **attributes: Value | None) -> None:
        """Attributes learnt during the step (hits found, refused); ``None`` values are left out."""


NULL = Step()


class _Recording(Step):
    """A real span, current while the ``with`` block runs."""

    __slots__ = ("_opened", "_span")

    def __init__(self, tracer: Any, name: str, attributes: Mapping[str, Value | None], kind: Any, parent: Any) -> None:
        self._opened = tracer.start_as_current_span(name, context=parent, kind=kind, attributes=_named(attributes),
                                                    record_exception=False, set_status_on_exception=False)
        self._span: Any = None

    def __enter__(self) -> Step:
        self._span = self._opened.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        typ = exc[0]
        if typ is not None:  # the type only: an exception's message may quote a question or a document
            self._span.set_attribute("error.type", typ.__qualname__)
            self._span.set_status(trace.Status(trace.StatusCode.ERROR, typ.__qualname__))
        self._opened.__exit__(*exc)

    def set(self, **attributes: Value | None) -> None:
        self._span.set_attributes(_named(attributes))

    def fail(self, description: str) -> None:
        """Mark the span failed (a 5xx) without an exception."""
        self._span.set_status(trace.Status(trace.StatusCode.ERROR, description))


def span(name: str, **attributes: Value | None) -> Step:
    """A step named ``name`` (``microrag.<step>``) with ``attributes`` (counts, scores, flags):
    a context manager whose value takes more attributes with ``.set(...)``."""
    tracer = _tracer()
    if tracer is None:
        return NULL
    return _Recording(tracer, name, attributes, trace.SpanKind.INTERNAL, None)


def server_span(name: str, headers: Mapping[str, str], **attributes: Value | None) -> Step:
    """The root span of one HTTP request, continuing the caller's trace when its headers carry
    one (W3C ``traceparent``, or whatever propagator the process set)."""
    tracer = _tracer()
    if tracer is None:
        return NULL
    from opentelemetry import propagate  # (the API's; only reached with a provider in place)

    return _Recording(tracer, name, attributes, trace.SpanKind.SERVER, propagate.extract(headers))


def failed(step: Step, description: str) -> None:
    """Mark ``step`` failed without an exception (a request answered 5xx); nothing for a null step."""
    if isinstance(step, _Recording):
        step.fail(description)


def _named(attributes: Mapping[str, Value | None]) -> dict[str, Value]:
    return {(k if "." in k else "microrag." + k): v for k, v in attributes.items() if v is not None}


# ------------------------------------------------------------------ where spans go


def use(provider: Any) -> None:
    """Send this library's spans to ``provider`` (an OpenTelemetry ``TracerProvider``) rather
    than the global one, which a process can set only once; ``None`` goes back to the global."""
    global _provider
    _provider = provider


def enabled() -> bool:
    """Whether a step would record now."""
    return _tracer() is not None


def _tracer() -> Any:
    global _cached
    if trace is None:
        return None
    provider = _provider if _provider is not None else trace.get_tracer_provider()
    if _cached[0] is provider:
        return _cached[1]
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None  # nobody installed a provider: nothing would record
    tracer = provider.get_tracer("microrag")
    _cached = (provider, tracer)
    return tracer


# ------------------------------------------------------------------ serve --trace

EXTRA = "pip install 'microrag-engine[otel]'"
_OTLP = {"grpc": ("opentelemetry.exporter.otlp.proto.grpc.trace_exporter", "opentelemetry-exporter-otlp-proto-grpc"),
         "http/protobuf": ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "opentelemetry-exporter-otlp-proto-http")}


def setup(env: Mapping[str, str]) -> str:
    """An SDK tracer provider for this library's spans (:func:`use`), its exporters from the
    standard variables: ``OTEL_TRACES_EXPORTER`` (``console``, ``otlp``, ``none``, comma-separated;
    unset: ``otlp`` when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``..._TRACES_ENDPOINT`` is set, else
    ``console``), ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`` (``http/protobuf``, the default, or
    ``grpc``); the SDK and exporters read the rest (endpoint, headers, ``OTEL_SERVICE_NAME``,
    ``OTEL_TRACES_SAMPLER``). Returns where spans go, in words. Raises ``MicroRAGError``, one
    line naming the package, when the SDK or an exporter is not installed. ``env``: the
    ``OTEL_*`` variables (``config.otel_environment()``; config is the one environment reader)."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError:
        raise MicroRAGError(f"tracing needs the OpenTelemetry SDK: {EXTRA}") from None
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "otlp" if endpoint else "console").split(",")]
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "microrag"}))
    provider = TracerProvider(resource=resource)
    said = []
    for name in filter(None, names):
        if name == "console":  # one JSON object per span on stdout, as each ends
            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
            said.append("the console")
        elif name == "otlp":
            provider.add_span_processor(BatchSpanProcessor(_otlp(env)))
            said.append(f"OTLP ({endpoint or 'the default endpoint'})")
        elif name != "none":
            raise MicroRAGError(f"OTEL_TRACES_EXPORTER={name!r}: microrag knows console, otlp and none")
    use(provider)
    return ", ".join(said) or "nowhere (OTEL_TRACES_EXPORTER=none)"


def _otlp(env: Mapping[str, str]) -> Any:
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip().lower()
    if protocol not in _OTLP:
        raise MicroRAGError(f"OTLP protocol {protocol!r}: microrag knows http/protobuf and grpc")
    module, package = _OTLP[protocol]
    try:
        exporter = importlib.import_module(module).OTLPSpanExporter
    except ImportError:
        raise MicroRAGError(f"OTLP export ({protocol}) needs its exporter: pip install {package} "
                            "(or OTEL_TRACES_EXPORTER=console)") from None
    return exporter()
