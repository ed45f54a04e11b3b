"""The BM25 keyword leg at 100k and 1M chunks: the postings index against bm25s' weight matrix.

    python benchmarks/keyword_scale.py                          # 100k and 1M chunks (~10 min, ~8 GB)
    python benchmarks/keyword_scale.py --sizes 100000 --engine 100000

Chunks are three random SciFact sentences (as benchmarks/open_index.py makes them); a
sentence is tokenised once and chunks share its tokens, so a million chunks fit in memory.
Side by side, per size:
  * previous: bm25s (``method="lucene"``) fits the weight matrix, a query sums its columns
    (the scorer this repository used before: ``np.add.at`` over the matrix); a clearance got
    its own re-fit on the chunks it may read, and any write a full re-fit;
  * postings: ``BM25Scorer`` (raw tf + chunk lengths; IDF and length norm per query), a
    clearance a mask (``masked``), a write ``updated`` (one document of 10 chunks replaced).
Query time is the median and p95 over 60 queries (five words of a random sentence), after
one warm-up; both scorers' scores are checked equal bit for bit on every query.
``--engine N`` also times the server's reload after a one-document write on a SQLite store
of N chunks (random unit vectors, exact dense search): ``Engine.from_store`` (what reload did)
against ``Engine.updated``. Writes benchmarks/results/keyword.md and keyword.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from open_index import sentences  # noqa: E402 - the same SciFact sentences

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact" / "corpus.jsonl.gz"
OUT = ROOT / "benchmarks" / "results"
PER_CHUNK = 3  # sentences
WRITE = 10  # chunks of the document a write replaces


def corpus(n: int, pool: list[str], seed: int = 0) -> np.ndarray:
    """Sentence numbers, ``PER_CHUNK`` per chunk: chunk i is ``" ".join(pool[s] for s in rows[i])``."""
    return np.random.default_rng(seed).integers(0, len(pool), (n, PER_CHUNK))


def tokens_of(rows: np.ndarray, sentence_tokens: list[list[str]]) -> list[list[str]]:
    # bm25_tokens works word by word: the tokens of joined sentences are the sentences' tokens joined.
    return [[t for s in row for t in sentence_tokens[s]] for row in rows.tolist()]


def queries(pool: list[str], n: int = 60, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        words = rng.choice(pool).split()
        if len(words) >= 5:
            out.append(" ".join(rng.sample(words, 5)))
    return out


class Previous:
    """The scorer before postings: bm25s' eager weight matrix, a query summing its columns."""

    def __init__(self, tokens: list[list[str]]) -> None:
        import bm25s

        model = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
        model.index([t or ["\x00empty"] for t in tokens], show_progress=False)
        self.vocab = dict(model.vocab_dict)
        self.data, self.indices, self.indptr = (np.asarray(model.scores[k]) for k in ("data", "indices", "indptr"))
        self.n = len(tokens)

    def scores(self, query: str) -> np.ndarray:
        from microrag_engine.text import bm25_tokens

        out = np.zeros(self.n, dtype=self.data.dtype)
        for t in bm25_tokens(query):
            i = self.vocab.get(t)
            if i is not None and i + 1 < len(self.indptr):
                lo, hi = int(self.indptr[i]), int(self.indptr[i + 1])
                np.add.at(out, self.indices[lo:hi], self.data[lo:hi])
        return out.astype(np.float64)

    def nbytes(self) -> int:
        return self.data.nbytes + self.indices.nbytes + self.indptr.nbytes


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def query_times(score, qs: list[str]) -> tuple[float, float, list[np.ndarray]]:
    score(qs[0])  # warm-up: pages, vocabulary
    times, outs = [], []
    for q in qs:
        t, out = timed(lambda q=q: score(q))
        times.append(t)
        outs.append(out)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))], outs


def keyword(n: int, pool: list[str], sentence_tokens: list[list[str]], qs: list[str]) -> dict:
    from microrag_engine.index.keyword import BM25Scorer

    rows = corpus(n, pool)
    tokens = tokens_of(rows, sentence_tokens)
    r: dict = {"postings_total": sum(len(set(t)) for t in tokens)}
    r["previous_fit_s"], previous = timed(lambda: Previous(tokens))
    r["postings_fit_s"], scorer = timed(lambda: BM25Scorer(0.9, 0.4).updated(None, tokens=tokens))
    r["previous_bytes"], r["postings_bytes"] = previous.nbytes(), sum(a.nbytes for a in scorer.state()[0].values())
    r["previous_query_p50_s"], r["previous_query_p95_s"], want = query_times(previous.scores, qs)
    r["postings_query_p50_s"], r["postings_query_p95_s"], got = query_times(scorer.scores, qs)
    r["equal"] = all(np.array_equal(a, b) for a, b in zip(want, got))
    del previous
    # A clearance that may read every other chunk: its own re-fit before, a mask now.
    visible = np.arange(n) % 2 == 0
    r["previous_scoped_fit_s"], scoped = timed(lambda: Previous([t for t, v in zip(tokens, visible) if v]))
    r["previous_scoped_query_p50_s"], _, want = query_times(scoped.scores, qs)
    del scoped
    r["masked_s"], view = timed(lambda: scorer.masked(visible))
    r["masked_query_p50_s"], r["masked_query_p95_s"], got = query_times(view.scores, qs)
    r["masked_equal"] = all(np.array_equal(a, b) for a, b in zip(want, got))
    # A write: one document of WRITE chunks replaced (removed, its new version placed where it was).
    keep = np.ones(n, dtype=bool)
    keep[n // 2:n // 2 + WRITE] = False
    new = tokens_of(corpus(WRITE, pool, seed=2), sentence_tokens)
    at = np.arange(n // 2, n // 2 + WRITE)
    r["update_s"], after = timed(lambda: scorer.updated(keep, tokens=new, at=at))
    expected = tokens[:n // 2] + new + tokens[n // 2 + WRITE:]
    r["update_equal"] = None  # a third bm25s fit at 1M costs minutes and memory (the test suite checks it)
    if n <= 100_000:
        reference = Previous(expected)
        r["update_equal"] = all(np.array_equal(after.scores(q), reference.scores(q)) for q in qs)
    return r


def engine(n: int, pool: list[str], work: Path) -> dict:
    """Reload after a one-document write on a SQLite store of ``n`` chunks, before (from_store) and now (updated)."""
    from microrag_engine.config import override, preset
    from microrag_engine.engine import Engine
    from microrag_engine.store.base import DocRecord, DocUpdate, bound_meta
    from microrag_engine.store.sqlite import SQLiteStore
    from microrag_engine.types import Chunk

    settings = override(preset("default"), embedder="hash", ann_threshold=10**9)  # exact dense search: not measured here
    folder = work / f"kw-ix-{n}"
    vec_rng = np.random.default_rng(n)

    def document(d: int, rows: np.ndarray, tag: str = "") -> DocUpdate:
        doc = f"synthetic/doc{d:07}.md"
        chunks, at = [], 0
        for k, row in enumerate(rows.tolist()):
            text = " ".join(pool[s] for s in row)
            chunks.append(Chunk(f"{doc}#{k}", doc, k, at, at + len(text), text))
            at += len(text) + 1
        vectors = vec_rng.standard_normal((len(chunks), 128)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        label = "internal" if d % 10 == 0 else "public"
        return DocUpdate(DocRecord(doc, f"h{d}{tag}", label, n_chunks=len(chunks)), chunks, vectors,
                         [str(hash(c.text)) for c in chunks])

    meta = bound_meta(settings, 128)
    if not (folder / "index.sqlite").exists():
        store = SQLiteStore(folder)
        rows = corpus(n, pool)
        batch = []
        for d in range(n // WRITE):
            batch.append(document(d, rows[d * WRITE:(d + 1) * WRITE]))
            if len(batch) >= 2000:
                store.apply(batch, [], meta)
                batch = []
        store.apply(batch, [], meta)
        store.close()
    store = SQLiteStore(folder)
    current = Engine.from_store(store, settings, save_derived=False)
    seed = time.time_ns() % 2**32  # a new version each run (the store is kept between runs)
    store.apply([document(n // WRITE // 2, corpus(WRITE, pool, seed=seed), tag=f"-v{seed}")], [], meta)
    r: dict = {}
    r["from_store_s"], fresh = timed(lambda: Engine.from_store(store, settings, save_derived=False))
    r["updated_s"], updated = timed(lambda: current.updated(store))
    q = "vitamin D deficiency and the risk of fractures"
    r["equal"] = all([(h.chunk.id, h.hybrid) for h in updated.retrieve(q, labels=c).hits] ==
                     [(h.chunk.id, h.hybrid) for h in fresh.retrieve(q, labels=c).hits] for c in (None, ["public"]))
    store.close()
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--engine", type=int, nargs="*", default=[], help="store sizes for the reload timing")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "microrag-keyword-bench")
    args = ap.parse_args()
    from microrag_engine.text import bm25_tokens

    pool = sentences()
    sentence_tokens = [bm25_tokens(s) for s in pool]
    qs = queries(pool)
    results = {"keyword": {}, "engine": {}}
    for n in args.sizes:
        results["keyword"][str(n)] = keyword(n, pool, sentence_tokens, qs)
        print(n, json.dumps(results["keyword"][str(n)]), file=sys.stderr)
    for n in args.engine:
        results["engine"][str(n)] = engine(n, pool, args.work)
        print("engine", n, json.dumps(results["engine"][str(n)]), file=sys.stderr)
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    command = "python benchmarks/keyword_scale.py --sizes " + " ".join(map(str, args.sizes)) + \
        (" --engine " + " ".join(map(str, args.engine)) if args.engine else "")
    context = {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), "python": platform.python_version(),
               "numpy": np.__version__, "command": command}
    (OUT / "keyword.json").write_text(json.dumps({"context": context, **results}, indent=1))
    ms = 1000.0
    lines = ["# The BM25 keyword leg at scale", "", f"`{command}` on {cpu}, {context['cores']} cores, numpy {np.__version__}.",
             "Previous: bm25s' weight matrix (a re-fit per clearance and per write). Postings: raw tf and lengths, "
             "statistics applied per query (a clearance is a mask, a write an update). Query times: median / p95 "
             f"of {len(qs)} five-word queries; scores compared bit for bit.", "",
             "| chunks | postings | fit: previous / postings | memory: previous / postings "
             "| query: previous | query: postings | scores equal |",
             "|---|---|---|---|---|---|---|"]
    for n, r in results["keyword"].items():
        lines.append(f"| {int(n):,} | {r['postings_total']:,} | {r['previous_fit_s']:.1f} s / {r['postings_fit_s']:.1f} s "
                     f"| {r['previous_bytes'] / 2**20:,.0f} / {r['postings_bytes'] / 2**20:,.0f} MiB "
                     f"| {r['previous_query_p50_s'] * ms:.2f} / {r['previous_query_p95_s'] * ms:.2f} ms "
                     f"| {r['postings_query_p50_s'] * ms:.2f} / {r['postings_query_p95_s'] * ms:.2f} ms | {r['equal']} |")
    lines += ["", "A clearance that may read half the chunks, and a write replacing one document of "
              f"{WRITE} chunks:", "",
              "| chunks | clearance: re-fit (previous) / mask | its query: previous / masked (p50) | scores equal "
              "| write: full re-fit (previous) / update | equal to a fit |",
              "|---|---|---|---|---|---|"]
    for n, r in results["keyword"].items():
        lines.append(f"| {int(n):,} | {r['previous_scoped_fit_s']:.1f} s / {r['masked_s'] * ms:.1f} ms "
                     f"| {r['previous_scoped_query_p50_s'] * ms:.2f} / {r['masked_query_p50_s'] * ms:.2f} ms "
                     f"| {r['masked_equal']} | {r['previous_fit_s']:.1f} s / {r['update_s'] * ms:.0f} ms "
                     f"| {'not checked' if r['update_equal'] is None else r['update_equal']} |")
    if results["engine"]:
        lines += ["", "The server's reload after a one-document write (SQLite store, hash vectors, exact dense "
                  "search - an HNSW graph, above `ann_threshold`, is rebuilt either way and not included):", "",
                  "| chunks | `Engine.from_store` (previous reload) | `Engine.updated` | rankings equal |", "|---|---|---|---|"]
        for n, r in results["engine"].items():
            lines.append(f"| {int(n):,} | {r['from_store_s']:.1f} s | {r['updated_s']:.2f} s | {r['equal']} |")
    (OUT / "keyword.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
