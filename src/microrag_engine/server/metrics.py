"""What an operator's Prometheus scrapes: ``GET /metrics`` (admin key), in its text format.

Requests by route and status and their latency; each pipeline step's latency (retrieve,
answer - the model or the extractive answerer, verification included -, verify alone,
the output guard); refusals by who refused (gate, answerer, model, verification, filter);
guard findings by kind; uploads by what became of them; rate-limit hits; and, read at
scrape time, the index's chunks, documents and generation, the review queue and a
standby's replication lag. Labels are bounded sets (a route's template, never its path;
a refusal's kind, never its reason text), so a caller cannot grow the series.

One registry per app (``prometheus-client``'s default one is process-global, and a test
process runs many apps). ``serve`` runs one process, so no multiprocess collector is
needed. Without prometheus-client (an install without the server extra) every call here
does nothing and ``/metrics`` says what to install.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

try:
    import prometheus_client as prom
    from prometheus_client.core import GaugeMetricFamily
except ImportError:  # the server extra is not installed: metrics off
    prom = None  # type: ignore[assignment]

STEPS = ("retrieve", "answer", "verify", "guard")
REFUSED_BY = ("gate", "answerer", "model", "verification", "filter")
# HTTP allows any token as a method: one outside this set is counted as "other", so a caller
# cannot grow the series by inventing methods.
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
# Seconds: a query's steps run from about a millisecond (the guard) to a model's tens of seconds.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """The server's counters and histograms; ``gauges`` is read at each scrape."""

    def __init__(self, gauges: Callable[[], dict[str, float]] | None = None) -> None:
        self.enabled = prom is not None
        if prom is None:
            return
        self.registry = prom.CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = prom.Counter("microrag_requests", "HTTP requests by route template, method and status.",
                                     ["route", "method", "status"], registry=r)
        self.latency = prom.Histogram("microrag_request_seconds", "HTTP request latency by route template.",
                                      ["route"], buckets=BUCKETS, registry=r)
        self.steps = prom.Histogram("microrag_step_seconds", "Latency of each pipeline step.", ["step"],
                                    buckets=BUCKETS, registry=r)
        self.refusals = prom.Counter("microrag_refusals", "Answers refused, by who refused.", ["by"], registry=r)
        self.findings = prom.Counter("microrag_guard_findings", "Guard findings by guard (input, output) and kind.",
                                     ["guard", "kind"], registry=r)
        self.uploads = prom.Counter("microrag_uploads", "Uploads by outcome (live, quarantined, held, approved, "
                                    "rejected).", ["outcome"], registry=r)
        self.limited = prom.Counter("microrag_rate_limited", "Requests refused by a rate limit (429).", ["route"],
                                    registry=r)
        for step in STEPS:  # every series present from the start: a dashboard shows 0, not "no data"
            self.steps.labels(step)
        for by in REFUSED_BY:
            self.refusals.labels(by)
        if gauges is not None:
            r.register(_Gauges(gauges))

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        if self.enabled:
            self.requests.labels(route, method if method in METHODS else "other", str(status)).inc()
            self.latency.labels(route).observe(seconds)
            if status == 429:
                self.limited.labels(route).inc()

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.observe(name, time.perf_counter() - start)

    def observe(self, step: str, seconds: float) -> None:
        if self.enabled:
            self.steps.labels(step).observe(seconds)

    def refused(self, by: str) -> None:
        if self.enabled:
            self.refusals.labels(by if by in REFUSED_BY else "answerer").inc()

    def found(self, guard: str, kinds: dict[str, int]) -> None:
        if self.enabled:
            for kind, n in kinds.items():
                self.findings.labels(guard, kind[:40]).inc(n)

    def upload(self, outcome: str) -> None:
        if self.enabled:
            self.uploads.labels(outcome).inc()

    def exposition(self) -> tuple[bytes, str]:
        """The text format and its content type."""
        assert prom is not None
        return prom.generate_latest(self.registry), prom.CONTENT_TYPE_LATEST


class _Gauges:
    """The index's size, generation, review queue and replica lag, read when scraped."""

    def __init__(self, read: Callable[[], dict[str, float]]) -> None:
        self.read = read

    def describe(self) -> list[Any]:
        return []  # read lazily: nothing is known before the first scrape

    def collect(self) -> Iterator[Any]:
        helps = {"index_chunks": "Chunks in the served index.", "index_documents": "Documents in the served index.",
                 "index_generation": "The store's write generation the served index reflects.",
                 "review_queue": "Uploads waiting for an admin's review.",
                 "replica_lag_seconds": "How far this standby's replay is behind its primary."}
        for name, value in self.read().items():
            yield GaugeMetricFamily(f"microrag_{name}", helps.get(name, name), value=value)
