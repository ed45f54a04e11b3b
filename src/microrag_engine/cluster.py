"""Ingest on a Ray cluster: workers load, guard, chunk and embed; this process writes.

In:  a Ray address (``connect``), then paths, a ``Store``, settings (``ingest_cluster``).
Out: a ``ClusterReport``: an ``IngestReport`` plus the worker processes that ran tasks.

The driver lists the files (names only: cheap) and sends shards of them to Ray tasks
that load, map ids, check hashes, apply DLP and chunk (``ingest.prepare_files``). It
takes their documents in file order and groups the changed ones for embedding exactly
as a local ingest does (an embedder's vectors can depend on the texts embedded with
them), sends each group to an embed task, and writes the vectors through the same
``Ingestion`` a local ingest uses (whole documents per transaction, content hashes that
make a rerun skip what landed), in order whatever order tasks end in: the index is the
one a local ingest of the same paths builds. Tasks write nothing, so a task whose worker
dies is simply run again by Ray (``MAX_RETRIES``); if the driver dies, running the
command again skips what was committed and finishes the rest. At most ``2 x CPUs`` tasks
of each kind are in flight or waiting, so memory stays bounded whatever the corpus size.

Workers import this package: every node needs ``pip install 'microrag-engine[models,cluster]'``
(same versions as the driver) and the corpus at the same path (a shared filesystem).
Ray is imported lazily: the rest of the package works without the ``cluster`` extra.
"""

from __future__ import annotations

import logging
import math
import os
import socket
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import ingest
from .config import Settings, cluster_test_hooks
from .errors import ConfigError, MicroRAGError
from .index.embed import Embedder, make_embedder
from .ingest import (
    COMMIT_CHUNKS,
    Corpus,
    Held,
    Ingestion,
    IngestReport,
    Plan,
    Prepared,
    Progress,
    QuickCheck,
    Refused,
    Screen,
    Source,
    Ticker,
    Unchanged,
    attach_vectors,
    clash,
    embed_texts,
    file_policy,
    prepare_files,
)
from .store.base import Store

INSTALL = "distributed ingest needs Ray: pip install 'microrag-engine[cluster]'"
MAX_RETRIES = 3  # runs of a task after its worker (or node) died, before the ingest fails
MAX_FILES_PER_TASK = 64
TASKS_PER_CPU = 4  # shards per worker CPU, when the corpus has files enough: stragglers stay short
CONNECT_TIMEOUT = 5.0  # seconds to reach the head's port before saying it is unreachable

log = logging.getLogger("microrag")


@dataclass
class ClusterReport(IngestReport):
    """An ``IngestReport`` plus where the work ran."""

    tasks: int = 0
    workers: list[str] = field(default_factory=list)  # "host:pid" of each worker process that returned a result

    def summary(self) -> str:
        hosts = {w.rsplit(":", 1)[0] for w in self.workers}
        return (super().summary() + f"; {self.tasks} Ray task(s) on {len(self.workers)} worker process(es), "
                f"{len(hosts)} node(s)")


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MicroRAGError(INSTALL) from None
    return ray


def connect(address: str) -> None:
    """Join the Ray cluster at ``address`` (``HOST:PORT`` of the head, ``ray://HOST:PORT`` for
    Ray Client, or ``auto``: the cluster this machine belongs to). Never starts one. An address
    nobody answers at is one line of error, quickly, before anything is read or written."""
    ray = _ray()
    if ray.is_initialized():
        return
    if address != "auto":
        host, _, port = address.removeprefix("ray://").rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"--cluster {address!r}: give the head's HOST:PORT, ray://HOST:PORT or auto")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT).close()
        except OSError as exc:
            raise MicroRAGError(f"cannot reach a Ray cluster at {address} ({exc.strerror or exc}); start one with "
                                "'ray start --head' (docs/operating/cluster.md)") from None
    try:
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    except Exception as exc:  # Ray raises ConnectionError, ValueError, RuntimeError... for the same thing
        if "ray[client]" in str(exc):
            raise MicroRAGError("ray:// addresses need Ray Client: pip install 'ray[client]' (or run the command on a "
                                "node of the cluster with --cluster HOST:PORT)") from None
        raise MicroRAGError(f"cannot connect to the Ray cluster at {address}: {_one_line(exc)}") from None
    _errors_to_log()


def _errors_to_log() -> None:
    """Ray prints the cluster's error messages (a worker died...) on this process's stdout,
    where ``--json`` output goes; say them as one-line warnings on stderr instead."""
    try:
        from ray._private import worker
    except ImportError:  # another Ray layout: its messages stay where Ray puts them
        return

    def say(data: dict[str, Any], ignore_prefix: bool = False) -> None:
        for line in data.get("lines") or []:
            if str(line).strip():
                log.warning("ray: %s", str(line).strip().splitlines()[0][:300])
                break

    worker.print_to_stdstream = say


def disconnect() -> None:
    ray = _ray()
    if ray.is_initialized():
        ray.shutdown()


# ---------------------------------------------------------------- the worker side

@dataclass
class ShardResult:
    """What a prepare task hands back: per document, its id (unchanged) or its ``Prepared``
    chunks; what the loader warned about; which process did it."""

    items: list[Prepared | str | Held | Refused | Unchanged]
    warnings: list[str]
    worker: str


_PLANS: dict[str, Plan] = {}  # per worker process: the plan of the ingest it works for (one at a time)
_EMBEDDERS: dict[str, Embedder] = {}  # per worker process: loading a model costs ~0.5 s


def prepare_shard(shard: list[tuple[Source, Path, str]], plan_box: list[Any], die_marker: str = "",
                  screen: Screen | None = None) -> ShardResult:
    """A Ray task: ``prepare_files`` over ``shard``. The plan comes as a reference in a list (so
    Ray does not fetch it for every task) and is fetched once per worker process."""
    _maybe_die(die_marker)
    ref = plan_box[0]
    plan = _PLANS.get(ref.hex())
    if plan is None:
        _PLANS.clear()
        plan = _PLANS[ref.hex()] = _ray().get(ref)
    with _warnings() as warned:
        items = prepare_files(shard, plan, _embedder(plan.settings.embedder), screen)
    return ShardResult(items, warned, _me())


def embed_batch(texts: list[str], embedder: str, digest: str, die_marker: str = "") -> tuple[np.ndarray, str]:
    """A Ray task: one ``embed_texts`` call, the same group of texts a local ingest embeds together.
    A worker whose embedder is another build than the driver's refuses: its vectors would not
    match the digest the index records."""
    _maybe_die(die_marker)
    model = _embedder(embedder)
    if model.digest != digest:
        raise ConfigError(f"worker {_me()} has embedder build {model.digest}, the driver {digest}: install the same "
                          "microrag-engine version on every node")
    return embed_texts(texts, model), _me()


def _embedder(name: str) -> Embedder:
    if name not in _EMBEDDERS:
        _EMBEDDERS[name] = make_embedder(name)
    return _EMBEDDERS[name]


def _me() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _maybe_die(marker: str) -> None:
    if marker and not os.path.exists(marker):  # the test hook: this worker dies, once
        Path(marker).write_text(str(os.getpid()))
        os._exit(1)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def _warnings() -> Iterator[list[str]]:
    """The loader's warnings in a task, to be said by the driver (worker logs go nowhere)."""
    handler = _Collect()
    log.addHandler(handler)
    try:
        yield handler.lines
    finally:
        log.removeHandler(handler)


# ---------------------------------------------------------------- the driver side

def ingest_cluster(
    store: Store,
    paths: Iterable[str | Path],
    settings: Settings,
    label: str | None = None,
    prune: bool = False,
    principal: str | None = None,
    progress: bool | Progress = False,
    collection: str | None = None,
    files_per_task: int = 0,
    commit_chunks: int = COMMIT_CHUNKS,
    screen: Screen | None = None,
) -> ClusterReport:
    """``ingest_paths`` with the loading, chunking and embedding done by Ray tasks on the
    cluster ``connect`` joined; this process writes. Same arguments, same resulting index:
    ``screen`` runs on the workers, on the same document and file a local ingest screens."""
    ray = _ray()
    if not ray.is_initialized():
        raise MicroRAGError("not connected to a Ray cluster: call cluster.connect(address) first")
    die_marker, test_commit = cluster_test_hooks()
    settings.validate()
    corpus = Corpus.resolve(store, paths, settings, collection)
    embedder = make_embedder(settings.embedder)
    run = Ingestion(store, settings, embedder.dim, label, principal, corpus.roots,
                    commit_chunks=test_commit or commit_chunks)
    # Each file's signature is recorded as a local ingest records it (the next local run skips
    # what this one stored); a held file's is dropped once its verdict comes back.
    quick = QuickCheck(store.meta(), corpus, file_policy(settings, embedder.digest, label))
    for _, path, _ in corpus.files:
        quick.read(path)
    cpus = int(ray.cluster_resources().get("CPU", 0))
    if cpus < 1:  # tasks could never be scheduled: waiting would hang
        raise MicroRAGError("the Ray cluster has no CPUs for tasks (a head started with --num-cpus=0 and no workers?); "
                            "add workers with: ray start --address HEAD:PORT")
    size = files_per_task or max(1, min(MAX_FILES_PER_TASK, math.ceil(len(corpus.files) / (TASKS_PER_CPU * cpus))))
    # .jsonl files last, as a local ingest reads them: a file's own path names its document
    # before any record can claim that name.
    files = sorted(corpus.files, key=lambda f: f[1].suffix.lower() == ".jsonl")
    shards = [files[i:i + size] for i in range(0, len(files), size)]
    flow = _Flow(ray, run, corpus, shards, 2 * cpus, die_marker, screen)
    ticker = Ticker(progress, len(corpus.files), "file")
    try:
        flow.run(ticker)
        for held in flow.held.values():
            quick.held(Path(held.file))
        report = run.finish(_still_gone(corpus.deletions(prune), corpus) + corpus.replaced, quick.meta())
    except BaseException:
        flow.cancel()
        run.abandon()
        raise
    finally:
        ticker.close()
    out = ClusterReport(**vars(report), tasks=flow.tasks, workers=sorted(flow.workers))
    out.gone = [] if prune else corpus.missing
    out.held = {d: h.reasons for d, h in flow.held.items()}
    out.held_files = {d: h.file for d, h in flow.held.items()}
    out.refused = flow.refused
    return out


class _Flow:
    """The driver's loop. Prepare tasks (one per shard of files) return prepared documents;
    taken in shard order, they form embedding groups exactly as ``stream_documents`` forms
    them (``ingest.batch_chunks``); embed tasks return each group's vectors, written in group order.
    So the writes, and the vectors, do not depend on which task ends first. At most
    ``window`` tasks of each kind are in flight or waiting to be taken: memory is bounded."""

    def __init__(self, ray: Any, run: Ingestion, corpus: Corpus, shards: list[list[tuple[Source, Path, str]]],
                 window: int, die_marker: str, screen: Screen | None = None) -> None:
        self.ray, self.ingestion, self.corpus, self.shards, self.window, self.die = ray, run, corpus, shards, window, die_marker
        opts = {"num_cpus": 1, "max_retries": MAX_RETRIES, "retry_exceptions": False}
        self.prepare = ray.remote(prepare_shard).options(**opts)
        self.embed = ray.remote(embed_batch).options(**opts)
        self.plan_box = [ray.put(self.ingestion.plan)]
        self.pending: dict[Any, tuple[str, int]] = {}  # task -> ("prepare", shard) | ("embed", group)
        self.prepared: dict[int, ShardResult] = {}  # ended, not yet taken
        self.vectors: dict[int, np.ndarray] = {}  # ended, not yet written
        self.groups: dict[int, list[Prepared]] = {}  # formed, not yet written
        self.queued: deque[int] = deque()  # groups formed, not yet sent
        self.batch: list[Prepared] = []
        self.sent = self.taken = self.formed = self.written = self.embedding = self.files_done = self.tasks = 0
        self.seen: set[str] = set()
        self.workers: set[str] = set()
        self.said: set[str] = set()
        self.screen = screen
        self.held: dict[str, Held] = {}
        self.refused: dict[str, str] = {}  # "file: doc" -> why, as IngestReport.refused

    def run(self, ticker: Ticker) -> None:
        ray = self.ray
        while True:
            while self.queued and self.embedding < self.window:
                n = self.queued.popleft()
                texts = [c.text for p in self.groups[n] for c in p.chunks]
                plan = self.ingestion.plan
                self.pending[self.embed.remote(texts, plan.settings.embedder, plan.digest, self.die)] = ("embed", n)
                self.embedding += 1
                self.tasks += 1
            while (self.sent < len(self.shards) and self.sent - self.taken < self.window
                   and len(self.queued) < self.window):
                self.pending[self.prepare.remote(self.shards[self.sent], self.plan_box, self.die, self.screen)] = ("prepare", self.sent)
                self.sent += 1
                self.tasks += 1
            if not self.pending:
                break
            done, _ = ray.wait(list(self.pending), num_returns=1)
            for ref in done:
                kind, n = self.pending.pop(ref)
                if kind == "prepare":
                    self.prepared[n] = _result(ray, ref, _files(self.shards[n]))
                else:
                    self.embedding -= 1
                    docs = [p.record.doc for p in self.groups[n]]
                    self.vectors[n], worker = _result(ray, ref, f"the chunks of {_some(docs, 'document')}")
                    self.workers.add(worker)
            while self.taken in self.prepared:
                self._take(self.prepared.pop(self.taken))
                self.files_done += len(self.shards[self.taken])
                self.taken += 1
                ticker.tick(self.files_done)
            if self.taken == len(self.shards) and self.batch:
                self._form()  # the last, partial group
            while self.written in self.vectors:
                group = self.groups.pop(self.written)
                self.ingestion.write(attach_vectors(group, self.vectors.pop(self.written)))
                ticker.embedded(sum(len(p.chunks) for p in group))
                self.written += 1
        assert self.taken == len(self.shards) and self.written == self.formed, "the flow ended early"

    def _take(self, result: ShardResult) -> None:
        """One shard's documents into the report and the embedding groups, in corpus order."""
        self.workers.add(result.worker)
        for line in result.warnings:
            if line not in self.said:
                self.said.add(line)
                log.warning("%s", line)
        for item in result.items:
            if isinstance(item, Held):  # its file is here: loaded (never pruned for it), not written
                self.corpus.loaded.add(item.doc)
                self.corpus.loaded.update(item.stale)  # what is stored of it, under whichever name, stays
                self.held[item.doc] = item
                self.seen.add(item.doc)  # its name is given out, held or not (as a local ingest counts it)
                continue
            if isinstance(item, Refused):
                self.refused[item.what] = item.why
                continue
            named_by = "" if isinstance(item, str) else item.named_by
            doc = item if isinstance(item, str) else item.doc if isinstance(item, Unchanged) else item.record.doc
            if doc in self.seen and named_by:
                self.refused[named_by] = str(clash(doc))  # a record's claim: refused, the rest goes in
                continue
            if doc in self.seen:
                raise clash(doc)
            self.seen.add(doc)
            self.corpus.loaded.add(doc)
            if isinstance(item, str | Unchanged):
                self.ingestion.unchanged(doc)
                continue
            self.corpus.replaced += item.stale  # the same document under another form of its name
            self.ingestion.count(doc, len(item.chunks), item.findings, item.replaces)
            self.batch.append(item)
            if sum(len(p.chunks) for p in self.batch) >= ingest.batch_chunks(self.formed):
                self._form()

    def _form(self) -> None:
        self.groups[self.formed], self.batch = self.batch, []
        self.queued.append(self.formed)
        self.formed += 1

    def cancel(self) -> None:
        for ref in self.pending:
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # noqa: S110 - already ended, or the cluster is gone: nothing left to stop
                pass


def _result(ray: Any, ref: Any, what: str) -> Any:
    """A task's result, or its failure as one line: the task's own error if it raised one of
    ours (a clash of ids, say); else what went wrong and on which files."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        cause = exc.cause  # the exception the task raised
        if isinstance(cause, MicroRAGError):
            raise cause from None
        raise MicroRAGError(f"a Ray task failed on {what}: {_one_line(cause or exc)}") from None
    except ray.exceptions.RayError as exc:  # the worker or its node died, more often than MAX_RETRIES
        raise MicroRAGError(f"Ray lost the task for {what} {MAX_RETRIES + 1} times ({type(exc).__name__}); "
                            "what was committed stays: run the command again to finish") from None


def _still_gone(deletions: list[str], corpus: Corpus) -> list[str]:
    """``--prune``'s deletions minus documents whose file this machine still sees: a worker that
    could not read a file (no shared mount there, a missing extra) must not delete its document."""
    kept = [d for d in deletions if corpus.existing[d].origin and Path(corpus.existing[d].origin).exists()]
    if kept:
        log.warning("kept %d document(s) whose files exist here but no worker could read (%s); fix the workers and "
                    "run the command again", len(kept), _some(kept, "document"))
    return [d for d in deletions if d not in kept]


def _files(shard: list[tuple[Source, Path, str]]) -> str:
    return _some([str(path) for _, path, _ in shard], "file")


def _some(names: list[str], kind: str) -> str:
    return names[0] + (f" and {len(names) - 1} more {kind}(s)" if len(names) > 1 else "")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]
