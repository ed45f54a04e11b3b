"""PostgreSQL backend at scale: the database-side hybrid first pass (BM25 + HNSW) at 100k / 1M chunks.

    python scripts/pg_loopback.py run -- python benchmarks/pg_scale.py --sizes 100000 1000000

Builds a ``PostgresStore`` schema with N synthetic chunks and measures ``PostgresStore.search``
(the real method: BM25 top-100 + HNSW top-100, optionally filtered by label) - issue 20, item 3.

Corpus. Text: 30-80 words per chunk drawn from a Zipf-Mandelbrot distribution
(p(rank r) ~ 1 / (r + 10)) over ~50k word types: the ~13.7k real English words of the
MiniLM vocabulary that stem to distinct non-stop-word stems (in vocabulary order, roughly
frequency order) followed by pronounceable pseudo-words for the rare tail, every type
its own BM25 term. Vectors: ``benchmarks/scale.py``'s ``clustered()`` (384-d, 2,000
clusters), independent of the text. Documents of 10 chunks; a document is ``internal``
with probability 10%, else ``public``.

Load. Rows are written as ``PostgresStore.apply`` writes them (same columns; term ids from
``term_id``, BM25 weights from ``bm25_doc_weights`` + ``sparse_literal`` with the corpus mean
length, ``term_df`` / ``label_stats`` / ``meta`` consistent with them) but with COPY, and with
the secondary indexes (``chunks_hnsw``, ``chunks_terms``, ``chunks_label``) dropped during
the load and re-created afterwards from their own definitions (``pg_get_indexdef``) with
the build settings below, each timed on its own; then VACUUM ANALYZE.
``store.check()`` runs up to ``--check-max`` chunks (it reads the whole corpus into Python).

Measure. ``--queries`` queries of 2-5 vocabulary words (each word half the time drawn from
the Zipf distribution, half the time uniformly over the vocabulary: common and rare words)
with the query vectors of ``scale.py``'s ``queries()``; each runs ``store.search(q, v,
labels, n=100)`` unfiltered and filtered to ``internal`` (10%), after warm-up queries.
Every SQL statement ``search`` issues is timed by wrapping ``store.x``, so the legs' own
times (and their result ids) come from the real method's statements. Recall@10: the dense
leg's ids ranked by exact score, first 10, against exact numpy search under the same
filter; the BM25 leg's first 10 against exact BM25 computed in numpy from the same term
weights, hashed term ids and per-label IDF (a returned chunk whose exact score ties the
10th best counts as a hit). Writes benchmarks/results/pg_scale.md (sections for sizes not
in this run are kept). Run by hand, never in CI.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
from hostinfo import machine  # benchmarks/ is the script's folder
from scale import clustered, exact_truth, queries  # the same vectors and queries as the dense benchmark

OUT = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parent.parent
DIM = 384
CHUNKS_PER_DOC = 10
INTERNAL_SHARE = 0.10
ZIPF_S, ZIPF_Q = 1.0, 10.0
N_FIRST = 100  # search(n=...): what retrieval asks each leg for
SCHEMA = "pgscale"
PGBIN = Path("/usr/lib/postgresql/15/bin")


# ------------------------------------------------------------------ corpus


def vocabulary(size: int, seed: int = 7) -> tuple[list[str], list[str]]:
    """(words, stems): real words first (MiniLM vocabulary order), pseudo-words after; each
    word is one BM25 token (``bm25_tokens(word) == [stem]``) and every stem is distinct."""
    from microrag_engine.text import bm25_tokens

    vocab = json.loads((ROOT / "src/microrag_engine/models/minilm/tokenizer.json").read_text())["model"]["vocab"]
    words, stems, seen = [], [], set()

    def take(w: str) -> None:
        t = bm25_tokens(w)
        if len(t) == 1 and t[0] not in seen:
            seen.add(t[0])
            words.append(w)
            stems.append(t[0])

    for w in sorted(vocab, key=vocab.get):
        if re.fullmatch(r"[a-z]{3,}", w):
            take(w)
            if len(words) >= size:
                return words, stems
    real = set(words)
    rng = np.random.default_rng(seed)
    onsets = "b c d f g h j k l m n p r s t v w z br cr dr fr gr pr tr st sk pl bl cl sh th ch".split()
    nuclei = "a e i o u ai ou ea io ia".split()
    codas = ["", "", "", "n", "r", "l", "s", "t", "m", "k", "x", "nd", "rt"]
    while len(words) < size:
        k = int(rng.integers(2, 4))
        w = "".join(onsets[rng.integers(len(onsets))] + nuclei[rng.integers(len(nuclei))] for _ in range(k))
        w += codas[rng.integers(len(codas))]
        if w not in real:
            take(w)
    return words, stems


class Corpus:
    """N synthetic chunks, generated batch by batch from seeded generators (reproducible)."""

    def __init__(self, n: int, vocab_size: int, seed: int = 11) -> None:
        from microrag_engine.store.postgres import term_id

        self.n = n
        self.words, self.stems = vocabulary(vocab_size)
        self.V = len(self.words)
        tids = np.array([term_id(s) for s in self.stems], dtype=np.int64)
        # hashed term space: two stems with the same id are one term, in the database and here
        self.col_tid, self.col_of_rank = np.unique(tids, return_inverse=True)
        self.C = len(self.col_tid)
        p = 1.0 / (np.arange(1, self.V + 1) + ZIPF_Q) ** ZIPF_S
        self.p = p / p.sum()
        self.cdf = np.cumsum(self.p)
        rng = np.random.default_rng(seed)
        self.lengths = rng.integers(30, 81, n)  # words per chunk = BM25 tokens per chunk
        self.n_docs = -(-n // CHUNKS_PER_DOC)
        self.doc_internal = rng.random(self.n_docs) < INTERNAL_SHARE
        self.chunk_internal = np.repeat(self.doc_internal, CHUNKS_PER_DOC)[:n]
        self.avgdl = float(self.lengths.sum()) / n  # every label is live (none reserved "_...")
        self.seed = seed

    def doc_name(self, d: int) -> str:
        return f"d{d:07d}"

    def chunk_row(self, cid: str) -> int:
        doc, _, idx = cid.partition("#")
        return int(doc[1:]) * CHUNKS_PER_DOC + int(idx)

    def label(self, row: int) -> str:
        return "internal" if self.chunk_internal[row] else "public"

    def batches(self, size: int):
        """Per batch: (lo, hi, ranks per chunk (list of arrays), unique (chunk, col) with tf)."""
        rng = np.random.default_rng(self.seed + 1)
        for lo in range(0, self.n, size):
            hi = min(lo + size, self.n)
            L = self.lengths[lo:hi]
            ranks = np.searchsorted(self.cdf, rng.random(int(L.sum())))
            ranks = np.minimum(ranks, self.V - 1)
            bounds = np.concatenate([[0], np.cumsum(L)])
            local = np.repeat(np.arange(hi - lo), L)
            key = local.astype(np.int64) * self.C + self.col_of_rank[ranks]
            uniq, tf = np.unique(key, return_counts=True)
            yield lo, hi, ranks, bounds, uniq // self.C, uniq % self.C, tf

    def queries(self, nq: int, seed: int = 5) -> list[str]:
        rng = np.random.default_rng(seed)
        out = []
        for _ in range(nq):
            k = int(rng.integers(2, 6))
            picked: list[int] = []
            while len(picked) < k:
                r = (int(min(np.searchsorted(self.cdf, rng.random()), self.V - 1)) if rng.random() < 0.5
                     else int(rng.integers(0, self.V)))
                if r not in picked:
                    picked.append(r)
            out.append(" ".join(self.words[r] for r in picked))
        return out


# ------------------------------------------------------------------ server settings


def set_shared_buffers(uri: str, value: str) -> str:
    """Restart the (throw-away) server with ``shared_buffers = value``; returns what it runs with."""
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        now = conn.execute("SHOW shared_buffers").fetchone()[0]
        if not value or now.lower() == value.lower():
            return now
        datadir = conn.execute("SHOW data_directory").fetchone()[0]
        conn.execute(f"ALTER SYSTEM SET shared_buffers = '{value}'")
    cmd = [str(PGBIN / "pg_ctl"), "-D", datadir, "-m", "fast", "-w", "-t", "300", "-l",
           str(Path(datadir).parent / "server.log"), "restart"]  # options as before (postmaster.opts)
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    try:
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"warning: could not restart PostgreSQL with shared_buffers={value}: {exc}", flush=True)
    for _ in range(60):
        try:
            with psycopg.connect(uri, autocommit=True) as conn:
                return conn.execute("SHOW shared_buffers").fetchone()[0]
        except psycopg.OperationalError:
            time.sleep(1)
    raise SystemExit("PostgreSQL did not come back after the restart")


# ------------------------------------------------------------------ build


def build(uri: str, corpus: Corpus, x: np.ndarray, args) -> dict:
    """Load the corpus into schema SCHEMA; returns timings, sizes and the exact-BM25 matrix."""
    import psycopg
    import scipy.sparse as sp

    from microrag_engine.config import Settings
    from microrag_engine.store.base import bound_meta
    from microrag_engine.store.postgres import PG_FORMAT, PostgresStore, bm25_doc_weights, sparse_literal, term_id, vector_literal
    from microrag_engine.text import bm25_tokens

    settings = Settings()
    k1, b = settings.k1, settings.b
    res: dict = {}
    conn = psycopg.connect(uri, autocommit=True)
    conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    store = PostgresStore(uri, schema=SCHEMA, k1=k1, b=b, pool_size=2)
    store._create_chunks(DIM)  # the table and indexes exactly as the store makes them
    conn.execute(f"SET search_path TO {SCHEMA}, public")
    defs = dict(conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND indexname IN "
                             "('chunks_hnsw', 'chunks_terms', 'chunks_label')", (SCHEMA,)).fetchall())
    assert len(defs) == 3, defs
    for name in defs:
        conn.execute(f"DROP INDEX {name}")
    store.close()

    t0 = time.perf_counter()
    now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    with conn.cursor() as cur, cur.copy("COPY documents (doc, content_hash, label, principal, origin, ingested_at, "
                                        "n_chunks, collection, meta) FROM STDIN") as cp:
        lines = []
        for d in range(corpus.n_docs):
            name = corpus.doc_name(d)
            nch = min(CHUNKS_PER_DOC, corpus.n - d * CHUNKS_PER_DOC)
            lines.append(f"{name}\t{hashlib.sha256(name.encode()).hexdigest()}\t"
                         f"{'internal' if corpus.doc_internal[d] else 'public'}\toperator\tsynthetic/{name}\t{now}\t"
                         f"{nch}\t\t{{}}\n")
            if len(lines) >= 50_000:
                cp.write("".join(lines))
                lines = []
        cp.write("".join(lines))
    rows_all, cols_all, w_all = [], [], []
    words = corpus.words
    checked = 0
    gen_s = 0.0
    with conn.cursor() as cur, cur.copy('COPY chunks (id, doc, idx, start, "end", text, text_hash, label, page, '
                                        "embedding, terms, tfs, dl, bm25) FROM STDIN") as cp:
        for lo, hi, ranks, bounds, ch, col, tf in corpus.batches(args.batch):
            tg = time.perf_counter()
            starts = np.searchsorted(ch, np.arange(hi - lo + 1))  # ch is sorted: slice per chunk
            tid = corpus.col_tid[col]
            lines = []
            pos = 0
            for j in range(hi - lo):
                row = lo + j
                d, idx = divmod(row, CHUNKS_PER_DOC)
                if idx == 0:
                    pos = 0
                text = " ".join([words[r] for r in ranks[bounds[j]:bounds[j + 1]].tolist()])
                a, z = starts[j], starts[j + 1]
                tfd = dict(zip(tid[a:z].tolist(), tf[a:z].tolist()))
                dl = int(corpus.lengths[row])
                if checked < 300:  # the generator agrees with the store's tokenizer and hashing
                    tokens = bm25_tokens(text)
                    assert Counter(term_id(t) for t in tokens) == tfd and len(tokens) == dl, row
                    checked += 1
                weights = bm25_doc_weights(tfd, dl, corpus.avgdl, k1, b)
                terms = ",".join(map(str, tfd))
                tfs = ",".join(map(str, tfd.values()))
                lines.append(f"{corpus.doc_name(d)}#{idx}\t{corpus.doc_name(d)}\t{idx}\t{pos}\t{pos + len(text)}\t{text}\t"
                             f"{hashlib.sha256(text.encode()).hexdigest()}\t{corpus.label(row)}\t0\t"
                             f"{vector_literal(x[row])}\t{{{terms}}}\t{{{tfs}}}\t{dl}\t{sparse_literal(weights)}\n")
                pos += len(text) + 1
            gen_s += time.perf_counter() - tg
            cp.write("".join(lines))
            # the exact-BM25 matrix, from the same tf, lengths and mean length
            dl = corpus.lengths[lo + ch].astype(np.float64)
            norm = k1 * (1 - b + b * dl / corpus.avgdl)
            rows_all.append((lo + ch).astype(np.int32))
            cols_all.append(col.astype(np.int32))
            w_all.append((tf / (tf + norm)).astype(np.float32))
            if hi % (args.batch * 10) == 0 or hi == corpus.n:
                print(f"  loaded {hi:,} chunks, {time.perf_counter() - t0:.0f} s", flush=True)
    res["load_s"] = time.perf_counter() - t0
    res["generate_s"] = gen_s
    rows = np.concatenate(rows_all)
    cols = np.concatenate(cols_all)
    w = np.concatenate(w_all)
    del rows_all, cols_all, w_all
    internal = corpus.chunk_internal
    df = {"public": np.bincount(cols[~internal[rows]], minlength=corpus.C),
          "internal": np.bincount(cols[internal[rows]], minlength=corpus.C)}
    t = time.perf_counter()
    with conn.cursor() as cur, cur.copy("COPY term_df (term, label, df) FROM STDIN") as cp:
        for label, counts in df.items():
            nz = np.nonzero(counts)[0]
            cp.write("".join(f"{corpus.col_tid[c]}\t{label}\t{counts[c]}\n" for c in nz.tolist()))
    for label, mask in (("public", ~internal), ("internal", internal)):
        conn.execute("INSERT INTO label_stats VALUES (%s, %s, %s)",
                     (label, int(mask.sum()), int(corpus.lengths[mask].sum())))
    meta = {**bound_meta(settings, DIM), "format_version": str(PG_FORMAT), "generation": "1",
            "avgdl": repr(corpus.avgdl)}
    for k, v in meta.items():
        conn.execute("INSERT INTO meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value", (k, v))
    res["stats_s"] = time.perf_counter() - t
    print(f"  rows and statistics written: {res['load_s']:.0f} s (of which Python generation {gen_s:.0f} s)", flush=True)

    conn.execute(f"SET maintenance_work_mem = '{args.maintenance_work_mem}'")
    conn.execute(f"SET max_parallel_maintenance_workers = {args.workers}")
    for name in ("chunks_terms", "chunks_label", "chunks_hnsw"):
        t = time.perf_counter()
        conn.execute(defs[name])
        res[f"{name}_build_s"] = time.perf_counter() - t
        print(f"  {defs[name]}: {res[f'{name}_build_s']:.1f} s", flush=True)
    t = time.perf_counter()
    conn.execute("VACUUM ANALYZE chunks")
    conn.execute("VACUUM ANALYZE documents")
    conn.execute("VACUUM ANALYZE term_df")
    res["vacuum_analyze_s"] = time.perf_counter() - t
    res["index_defs"] = defs
    sizes = dict(conn.execute(
        "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'i')", (SCHEMA,)).fetchall())
    sizes["chunks (TOAST)"] = conn.execute(
        "SELECT pg_total_relation_size(reltoastrelid) FROM pg_class WHERE oid = 'chunks'::regclass").fetchone()[0]
    sizes["chunks (total incl. indexes)"] = conn.execute("SELECT pg_total_relation_size('chunks')").fetchone()[0]
    sizes["schema total"] = conn.execute(
        "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'r'", (SCHEMA,)).fetchone()[0]
    res["sizes"] = {k: int(v) for k, v in sizes.items()}
    conn.close()
    t = time.perf_counter()
    res["bm25_matrix"] = sp.csc_matrix((w, (rows, cols)), shape=(corpus.n, corpus.C))
    res["df"] = df
    print(f"  exact BM25 matrix: {time.perf_counter() - t:.0f} s, nnz {res['bm25_matrix'].nnz:,}", flush=True)
    return res


# ------------------------------------------------------------------ exact BM25


def exact_bm25(corpus: Corpus, W, df: dict, query: str, labels: list[str] | None, k: int = 10):
    """Exact top-``k`` BM25 (row ids, scores) and the scorer for any row, as ``search`` defines it:
    unique hashed query terms, IDF from the df and chunk count of ``labels`` only."""
    from microrag_engine.index.keyword import lucene_idf
    from microrag_engine.store.postgres import term_id
    from microrag_engine.text import bm25_tokens

    labels = labels or ["public", "internal"]
    dfl = sum(df[lab] for lab in labels)
    mask = None if len(labels) == 2 else (corpus.chunk_internal if labels == ["internal"] else ~corpus.chunk_internal)
    n_chunks = int(corpus.n if mask is None else mask.sum())
    score = np.zeros(corpus.n, np.float64)
    hit = np.zeros(corpus.n, bool)
    for t in sorted({term_id(s) for s in bm25_tokens(query)}):
        c = int(np.searchsorted(corpus.col_tid, t))
        if c >= corpus.C or corpus.col_tid[c] != t or dfl[c] <= 0:
            continue
        lo, hi = W.indptr[c], W.indptr[c + 1]
        r = W.indices[lo:hi]
        score[r] += lucene_idf(int(dfl[c]), n_chunks) * W.data[lo:hi]
        hit[r] = True
    if mask is not None:
        hit &= mask
    cand = np.nonzero(hit)[0]
    if len(cand) == 0:
        return np.zeros(0, np.int64), np.zeros(0), score, 0
    top = cand[np.argsort(-score[cand], kind="stable")[:k]]
    return top, score[top], score, len(cand)


# ------------------------------------------------------------------ queries


STATEMENTS = (("dense floor (farthest chunk)", "SELECT 1 - (embedding <=>"), ("dense leg", "ORDER BY embedding <=>"),
              ("BM25 leg", "ORDER BY bm25 <#>"),
              ("fetch both scores", "WHERE id = ANY"), ("df lookup", "FROM term_df"),
              ("chunk count", "FROM label_stats"), ("SET LOCAL", "SET LOCAL"))


def kind(sql: str) -> str:
    return next((name for name, needle in STATEMENTS if needle in sql), "other")


def dense_recall(x, ids: list[int], v: np.ndarray, tr: np.ndarray) -> float:
    """The leg's ids ranked by exact score, first 10, against the exact top-10 under the same filter."""
    if not ids:
        return 0.0
    a = np.array(ids)
    first = a[np.argsort(-(x[a] @ v))][:10]
    return len(set(tr[:10].tolist()) & set(first.tolist())) / 10


def bm25_recall(corpus: Corpus, W, df, q: str, labels, ids: list[int]) -> tuple[float | None, float | None, int]:
    """(tie-aware recall@10, strict recall@10, chunks matching a term) of a BM25 leg's ordered ids."""
    top, tops, score, n_match = exact_bm25(corpus, W, df, q, labels)
    if not len(top):
        return None, None, n_match
    first = ids[:10]
    kth = tops[-1]
    ties = sum(1 for r in first if score[r] >= kth - 1e-5 * max(1.0, abs(kth)))
    return min(ties, len(top)) / len(top), len(set(top.tolist()) & set(first)) / len(top), n_match


def pct(a, p: float) -> float:
    return float(np.percentile(a, p)) if len(a) else float("nan")


def leg(conn, sql: str, params, jit: bool = True) -> tuple[list, float]:
    """One statement in a read transaction set up as ``search`` sets it up; (rows, ms)."""
    with conn.transaction():
        conn.execute("SET LOCAL hnsw.ef_search = 200")
        conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        if not jit:
            conn.execute("SET LOCAL jit = off")
        t = time.perf_counter()
        rows = conn.execute(sql, params).fetchall()
        return rows, (time.perf_counter() - t) * 1000


def measure(uri: str, corpus: Corpus, x, qtexts, qvecs, truth, build_res, args) -> tuple[list[dict], dict, list[str]]:
    import psycopg

    from microrag_engine.store.postgres import PostgresStore

    store = PostgresStore(uri, schema=SCHEMA, pool_size=2)
    log: list[tuple[str, object, float, list]] = []
    orig = store.x

    def timed_x(sql, params=None, read=False):
        t = time.perf_counter()
        rows = orig(sql, params, read)
        log.append((sql, params, (time.perf_counter() - t) * 1000, rows))
        return rows

    store.x = timed_x  # every statement search() runs, timed, with its rows
    with psycopg.connect(uri, autocommit=True) as conn:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
            for rel in ("chunks", "chunks_terms", "chunks_label", "chunks_pkey", "chunks_hnsw"):
                conn.execute("SELECT pg_prewarm(%s)", (f"{SCHEMA}.{rel}",))
            prewarm = "pg_prewarm of the heap, then chunks_terms, chunks_label, chunks_pkey, chunks_hnsw (in that order)"
        except psycopg.Error as exc:
            prewarm = f"no pg_prewarm ({exc.__class__.__name__})"
    W, df = build_res["bm25_matrix"], build_res["df"]
    rows_out, explains = [], []
    captured: dict[tuple[str, str, int], tuple[str, object]] = {}
    filters = (("none", None), ("internal (10%)", ["internal"]))
    for fname, labels in filters:
        for q, v in zip(qtexts[-args.warmup:], qvecs[-args.warmup:]):  # warm-up, not measured
            store.search(q, v, labels, n=N_FIRST)
        lat, parts, dense_rec, bm_rec, bm_strict, matched, bm_ms, union_sizes = [], [], [], [], [], [], [], []
        floor_gaps: list[float] = []
        for i, (q, v) in enumerate(zip(qtexts, qvecs)):
            log.clear()
            t = time.perf_counter()
            found = store.search(q, v, labels, n=N_FIRST)
            lat.append((time.perf_counter() - t) * 1000)
            got = found.rows
            # the dense floor (the farthest chunk HNSW finds) against the least cosine under the filter
            exact_least = float(((x[corpus.chunk_internal] if labels else x) @ v).min())
            floor_gaps.append(found.floors[1] - exact_least if found.floors[1] is not None else float("nan"))
            union_sizes.append(len(got))
            per: dict[str, float] = {}
            dense_ids, bm_ids = [], []
            for sql, params, ms, rows in log:
                k = kind(sql)
                per[k] = per.get(k, 0.0) + ms
                if k == "dense leg":
                    dense_ids = [corpus.chunk_row(r[0]) for r in rows]
                    captured[(fname, "dense", i)] = (sql, params)
                elif k == "BM25 leg":
                    bm_ids = [corpus.chunk_row(r[0]) for r in rows]
                    captured[(fname, "bm25", i)] = (sql, params)
                elif k == "fetch both scores":
                    captured[(fname, "fetch", i)] = (sql, params)
            per["statements total"] = sum(ms for *_, ms, _ in log)
            parts.append(per)
            dense_rec.append(dense_recall(x, dense_ids, v, truth[fname][i]))
            tie, strict, n_match = bm25_recall(corpus, W, df, q, labels, bm_ids)
            matched.append(n_match)
            bm_ms.append(per.get("BM25 leg", 0.0))
            if tie is not None:
                bm_rec.append(tie)
                bm_strict.append(strict)
        part_names = [n for n, _ in STATEMENTS if any(n in p for p in parts)] + ["statements total"]
        row = dict(filter=fname, p50_ms=pct(lat, 50), p99_ms=pct(lat, 99), mean_ms=float(np.mean(lat)),
                   dense_recall10=float(np.mean(dense_rec)), bm25_recall10=float(np.mean(bm_rec)) if bm_rec else None,
                   bm25_recall10_strict=float(np.mean(bm_strict)) if bm_strict else None,
                   bm25_queries=len(bm_rec), union_mean=float(np.mean(union_sizes)),
                   parts={n: (pct([p.get(n, 0.0) for p in parts], 50), pct([p.get(n, 0.0) for p in parts], 99))
                          for n in part_names},
                   matched_p50=pct(matched, 50), matched_max=int(max(matched)), matched=matched,
                   floor_gap_p50=pct(floor_gaps, 50), floor_gap_max=float(np.max(floor_gaps)),
                   floor_exact=float(np.mean(np.array(floor_gaps) < 1e-4)))
        # BM25 leg time by how many chunks match any query term (what the GIN bitmap hands the scorer)
        buckets = []
        m, bms = np.array(matched), np.array(bm_ms)
        for lo, hi in ((0, 1_000), (1_000, 10_000), (10_000, 100_000), (100_000, 10**9)):
            sel = (m >= lo) & (m < hi)
            if sel.any():
                buckets.append(dict(range=f"{lo:,}-{hi:,}" if hi < 10**9 else f">= {lo:,}", queries=int(sel.sum()),
                                    p50_ms=pct(bms[sel], 50), p99_ms=pct(bms[sel], 99)))
        row["bm25_by_matched"] = buckets
        row["prewarm"] = prewarm
        rows_out.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "matched"}, default=str), flush=True)
        # EXPLAIN (ANALYZE, BUFFERS): the slowest BM25 leg (also with JIT off), a median dense leg and fetch
        slow = int(np.argmax(bms))
        med = int(np.argsort(lat)[len(lat) // 2])
        for what, qi, jit in (("bm25", slow, True), ("bm25", slow, False), ("dense", med, True), ("fetch", med, True)):
            if (fname, what, qi) in captured:
                sql, params = captured[(fname, what, qi)]
                explains.append(f"-- {fname}, {what} statement{'' if jit else ' with SET LOCAL jit = off'}, query {qi} "
                                f"({qtexts[qi]!r}, {matched[qi]:,} chunks match a term)\n" + explain(uri, sql, params, jit))
    store.close()
    variants = measure_variants(uri, corpus, x, qtexts, qvecs, truth, W, df, captured, filters, rows_out, explains, args)
    return rows_out, variants, explains


def measure_variants(uri, corpus, x, qtexts, qvecs, truth, W, df, captured, filters, rows_out, explains, args) -> dict:
    """Candidate fixes, statement level, on the same queries and truth (search() itself is unchanged).

    A. BM25 leg, MaxScore split: candidates only from chunks holding a query term with df <= ``--common-df``
       of the visible chunks, scored with every term; exact whenever the 100th score is at least the sum of
       the common terms' IDF (a chunk holding only common terms scores below that, as every weight is < 1);
       otherwise the statement ``search`` runs now.
    B. dense leg, filtered: a partial HNSW index per label (``WHERE label = 'internal'``), same statement.
    """
    import psycopg

    from microrag_engine.index.keyword import lucene_idf
    from microrag_engine.store.postgres import sparse_literal, term_id
    from microrag_engine.text import bm25_tokens

    out: dict = {"common_df": args.common_df, "A": [], "B": {}}
    conn = psycopg.connect(uri, autocommit=True)
    conn.execute(f"SET search_path TO {SCHEMA}, public")
    for (fname, labels), base in zip(filters, rows_out):
        labs = labels or ["public", "internal"]
        dfl = sum(df[lab] for lab in labs)
        n_chunks = int(sum((corpus.chunk_internal if lab == "internal" else ~corpus.chunk_internal).sum() for lab in labs))
        label_sql, label_args = ("AND label = ANY(%s)", [labels]) if labels is not None else ("", [])
        lat, rec, strict, exact, fallback, none = [], [], [], 0, 0, 0
        lat_cur = []  # the current statement, re-run on this connection (the like-for-like baseline)
        lat2, rec2 = [], []  # A2: the split alone, without the proof or the fallback (approximate)
        for i, q in enumerate(qtexts):
            dfs = {}
            for t in sorted({term_id(s) for s in bm25_tokens(q)}):
                c = int(np.searchsorted(corpus.col_tid, t))
                if c < corpus.C and corpus.col_tid[c] == t and dfl[c] > 0:
                    dfs[t] = int(dfl[c])
            if not dfs:
                none += 1
                continue
            idf = {t: lucene_idf(d, n_chunks) for t, d in dfs.items()}
            q_sparse = sparse_literal(idf)
            common = [t for t, d in dfs.items() if d > args.common_df * n_chunks]
            rare = [t for t in dfs if t not in common]
            ms = 0.0
            rows = None
            if rare and common:
                rows, ms = leg(conn, f"SELECT id, -(bm25 <#> %s::sparsevec) FROM chunks WHERE terms && %s::bigint[] "
                                     f"{label_sql} ORDER BY bm25 <#> %s::sparsevec, id LIMIT %s",
                               (q_sparse, rare, *label_args, q_sparse, N_FIRST))
                lat2.append(ms)
                tie2, _, _ = bm25_recall(corpus, W, df, q, labels, [corpus.chunk_row(r[0]) for r in rows])
                if len(rows) == N_FIRST and rows[-1][1] >= sum(idf[t] for t in common):
                    exact += 1
                else:
                    rows = None
            sql, params = captured[(fname, "bm25", i)]  # the statement search() runs, on this connection too
            rows_cur, ms_cur = leg(conn, sql, params)
            lat_cur.append(ms_cur)
            if rows is None:
                rows = rows_cur
                ms += ms_cur
                fallback += 1 if (rare and common) else 0
            lat.append(ms)
            tie, st, _ = bm25_recall(corpus, W, df, q, labels, [corpus.chunk_row(r[0]) for r in rows])
            if not (rare and common):
                lat2.append(ms)
                tie2 = tie
            if tie is not None:
                rec.append(tie)
                strict.append(st)
                rec2.append(tie2)
        out["A"].append(dict(filter=fname, p50_ms=pct(lat, 50), p99_ms=pct(lat, 99), recall10=float(np.mean(rec)),
                             strict=float(np.mean(strict)), split_exact=exact, fallback=fallback,
                             single=len(lat) - exact - fallback, queries=len(lat), base_p50=base["parts"]["BM25 leg"][0],
                             base_p99=base["parts"]["BM25 leg"][1], a2_p50=pct(lat2, 50), a2_p99=pct(lat2, 99),
                             a2_recall10=float(np.mean(rec2)), cur_p50=pct(lat_cur, 50), cur_p99=pct(lat_cur, 99)))
        print(json.dumps(out["A"][-1]), flush=True)
    # B: partial HNSW index for the 10% label; first the current statement again on this connection
    fname = filters[1][0]
    lat_cur = []
    for i in range(len(qvecs)):
        sql, params = captured[(fname, "dense", i)]
        lat_cur.append(leg(conn, sql, params)[1])
    conn.execute(f"SET maintenance_work_mem = '{args.maintenance_work_mem}'")
    conn.execute(f"SET max_parallel_maintenance_workers = {args.workers}")
    t = time.perf_counter()
    conn.execute("CREATE INDEX chunks_hnsw_internal ON chunks USING hnsw (embedding vector_cosine_ops) "
                 "WITH (m = 16, ef_construction = 100) WHERE label = 'internal'")
    build_s = time.perf_counter() - t
    size = conn.execute("SELECT pg_relation_size('chunks_hnsw_internal')").fetchone()[0]
    conn.execute("ANALYZE chunks")
    for j in range(min(args.warmup, len(qtexts))):  # warm-up
        sql, params = captured[(fname, "dense", len(qtexts) - 1 - j)]
        leg(conn, sql, params)
    lat, rec = [], []
    for i, v in enumerate(qvecs):
        sql, params = captured[(fname, "dense", i)]
        rows, ms = leg(conn, sql, params)
        lat.append(ms)
        rec.append(dense_recall(x, [corpus.chunk_row(r[0]) for r in rows], v, truth[fname][i]))
    out["B"] = dict(filter=fname, build_s=build_s, size=int(size), p50_ms=pct(lat, 50), p99_ms=pct(lat, 99),
                    recall10=float(np.mean(rec)), base_p50=rows_out[1]["parts"]["dense leg"][0],
                    base_p99=rows_out[1]["parts"]["dense leg"][1], base_recall10=rows_out[1]["dense_recall10"],
                    cur_p50=pct(lat_cur, 50), cur_p99=pct(lat_cur, 99))
    print(json.dumps(out["B"]), flush=True)
    sql, params = captured[(fname, "dense", 0)]
    explains.append(f"-- variant B: {fname}, dense statement with the partial index, query 0\n" + explain(uri, sql, params))
    conn.execute("DROP INDEX chunks_hnsw_internal")
    conn.close()
    return out


def sanitize(plan: str) -> str:
    """Long literals (query vectors, id lists) shortened so the plans stay readable."""
    plan = re.sub(r"'\[([^\]']{40})[^\]']*\]'", r"'[\1...]'", plan)
    return re.sub(r"'\{([^}']{80})[^}']*\}'", r"'{\1...}'", plan)


def explain(uri: str, sql: str, params, jit: bool = True) -> str:
    import psycopg

    with psycopg.connect(uri) as conn:
        conn.execute(f"SET search_path TO {SCHEMA}, public")
        conn.execute("SET LOCAL hnsw.ef_search = 200")
        conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        if not jit:
            conn.execute("SET LOCAL jit = off")
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params).fetchall())
        conn.rollback()
    return sanitize(plan)


# ------------------------------------------------------------------ report


def versions(uri: str) -> dict[str, str]:
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        out = {"postgres": conn.execute("SHOW server_version").fetchone()[0],
               "pgvector": conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]}
        for s in ("shared_buffers", "work_mem", "jit", "max_worker_processes", "max_parallel_workers", "fsync",
                  "effective_cache_size", "random_page_cost"):
            out[s] = conn.execute(f"SHOW {s}").fetchone()[0]
    return out


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def mb(v: int) -> str:
    return f"{v / 2**20:,.0f}"


def section(n: int, corpus: Corpus, b: dict, rows: list[dict], variants: dict, explains: list[str], info: dict, args,
            started: float, load_start: str, checked: str) -> str:
    cmd = "python scripts/pg_loopback.py run -- python " + " ".join(["benchmarks/pg_scale.py", *sys.argv[1:]])
    s = b["sizes"]
    L = [f"## {n:,} chunks", "",
         f"Generated by `{cmd}` on {time.strftime('%Y-%m-%d')} ({machine()}; 23 GiB RAM), "
         f"{(time.time() - started) / 60:.0f} min for this size; load average (1/5/15 min) {load_start} at the start, "
         f"{loadavg()} at the end (other benchmarks were sharing the machine). PostgreSQL {info['postgres']}, "
         f"pgvector {info['pgvector']}; server: fsync={info['fsync']} (throw-away loopback server), "
         f"shared_buffers={info['shared_buffers']}, work_mem={info['work_mem']}, jit={info['jit']}, "
         f"random_page_cost={info['random_page_cost']}, effective_cache_size={info['effective_cache_size']}.", "",
         f"Corpus: {n:,} chunks in {corpus.n_docs:,} documents of {CHUNKS_PER_DOC}; {corpus.V:,} word types "
         f"({corpus.C:,} distinct hashed term ids), 30-80 words per chunk (mean {corpus.avgdl:.1f}), Zipf-Mandelbrot "
         f"p(r) ~ 1/(r+{ZIPF_Q:g})^{ZIPF_S:g}; {corpus.chunk_internal.mean():.1%} of chunks `internal`, the rest "
         f"`public`. Vectors: `scale.py` `clustered()` (384-d). `store.check()`: {checked}.", "",
         "### Build", "",
         f"Index build settings (session): `maintenance_work_mem = '{args.maintenance_work_mem}'`, "
         f"`max_parallel_maintenance_workers = {args.workers}` (2 cores: the leader plus {args.workers} worker(s)); "
         f"max_worker_processes={info['max_worker_processes']}, max_parallel_workers={info['max_parallel_workers']}. "
         "Indexes as the store defines them, dropped for the load and re-created from their own definitions:", ""]
    L += [f"- `{d}`" for d in b["index_defs"].values()]
    L += ["", "| step | seconds | size MB |", "|---|---|---|",
          f"| COPY documents + chunks (Python generation {b['generate_s']:.0f} s of it) | {b['load_s']:.0f} | "
          f"heap {mb(s.get('chunks', 0))}, TOAST {mb(s.get('chunks (TOAST)', 0))} |",
          f"| primary key + UNIQUE (doc, idx) (kept during the load) | - | {mb(s.get('chunks_pkey', 0))} + "
          f"{mb(s.get('chunks_doc_idx_key', 0))} |",
          f"| term_df + label_stats + meta | {b['stats_s']:.1f} | term_df {mb(s.get('term_df', 0))} + "
          f"pkey {mb(s.get('term_df_pkey', 0))} |",
          f"| GIN chunks_terms | {b['chunks_terms_build_s']:.1f} | {mb(s.get('chunks_terms', 0))} |",
          f"| B-tree chunks_label | {b['chunks_label_build_s']:.1f} | {mb(s.get('chunks_label', 0))} |",
          f"| HNSW chunks_hnsw (m=16, ef_construction=100) | {b['chunks_hnsw_build_s']:.1f} | "
          f"{mb(s.get('chunks_hnsw', 0))} |",
          f"| VACUUM ANALYZE | {b['vacuum_analyze_s']:.1f} | |",
          f"| chunks total (heap + TOAST + all indexes) | | {mb(s.get('chunks (total incl. indexes)', 0))} |",
          f"| schema total | | {mb(s.get('schema total', 0))} |", "",
          "### Search", "",
          f"`store.search(query, qvec, labels, n={N_FIRST})` (ef_search 200, iterative scan relaxed_order: the "
          f"method's defaults), {args.queries} queries, one at a time on one connection, after {args.warmup} warm-up "
          f"queries per filter; {rows[0]['prewarm']}. Latency is the whole call as the caller sees it (6 statements + "
          "SET LOCALs in one read transaction). Recall@10 as described in the script's docstring (BM25: a returned "
          "chunk tying the 10th exact score counts; strict set overlap in brackets; queries with no matching chunk "
          "under the filter are left out).", "",
          "| filter | p50 ms | p99 ms | mean ms | dense recall@10 | BM25 recall@10 (strict) | "
          "chunks matching a query term, p50 / max | candidates (union) mean |",
          "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        bm = f"{r['bm25_recall10']:.3f} ({r['bm25_recall10_strict']:.3f}), {r['bm25_queries']} q" if r["bm25_recall10"] is not None else "-"
        L.append(f"| {r['filter']} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['mean_ms']:.1f} | "
                 f"{r['dense_recall10']:.3f} | {bm} | {r['matched_p50']:,.0f} / {r['matched_max']:,} | {r['union_mean']:.0f} |")
    L += ["", "The dense leg's floor (`Candidates.floors`: the cosine of the chunk the HNSW index finds nearest to "
          "-q, which min-max fusion scales the candidates from) against the exact least cosine under the filter: "
          + "; ".join(f"{r['filter']}: exact on {r['floor_exact']:.0%} of queries, above it by p50 {r['floor_gap_p50']:.4f}, "
                      f"max {r['floor_gap_max']:.4f}" for r in rows if "floor_exact" in r) + "."]
    L += ["", "Time per statement of `search` (p50 / p99 ms; measured around `store.x`, so each includes its "
          "round trip):", "", "| filter | " + " | ".join(rows[0]["parts"]) + " |",
          "|---" * (len(rows[0]["parts"]) + 1) + "|"]
    for r in rows:
        L.append(f"| {r['filter']} | " + " | ".join(f"{a:.1f} / {z:.1f}" for a, z in r["parts"].values()) + " |")
    L += ["", "BM25 leg time by the number of chunks that contain any query term (p50 / p99 ms):", "",
          "| filter | chunks matching | queries | p50 ms | p99 ms |", "|---|---|---|---|---|"]
    for r in rows:
        for bk in r["bm25_by_matched"]:
            L.append(f"| {r['filter']} | {bk['range']} | {bk['queries']} | {bk['p50_ms']:.1f} | {bk['p99_ms']:.1f} |")
    L += ["", "### Candidate fixes (statement level, same queries and exact truth; `search` itself unchanged)", "",
          f"A. BM25 leg as a MaxScore split: candidates only from chunks holding a query term with df <= "
          f"{variants['common_df']:.0%} of the visible chunks, scored with all terms; the result is exact when the "
          "100th score >= the sum of the common terms' IDF (a chunk with only common terms scores below it, every "
          "weight being < 1), else the current statement runs as well. Queries with only rare or only common terms "
          "run the current statement alone. A2: the split alone, without the proof or the fallback (approximate: "
          "a chunk holding only common terms is never a candidate when the query has a rare term).", "",
          "| filter | p50 ms | p99 ms | recall@10 (strict) | split proved exact | split + fallback | current statement "
          "only | current statement p50 / p99 ms (same connection; inside search) | A2 p50 / p99 ms | A2 recall@10 |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for a in variants["A"]:
        L.append(f"| {a['filter']} | {a['p50_ms']:.1f} | {a['p99_ms']:.1f} | {a['recall10']:.3f} ({a['strict']:.3f}) | "
                 f"{a['split_exact']} | {a['fallback']} | {a['single']} | {a['cur_p50']:.1f} / {a['cur_p99']:.1f} "
                 f"({a['base_p50']:.1f} / {a['base_p99']:.1f}) | "
                 f"{a['a2_p50']:.1f} / {a['a2_p99']:.1f} | {a['a2_recall10']:.3f} |")
    B = variants["B"]
    L += ["", f"B. Filtered dense leg with a partial HNSW index `WHERE label = 'internal'` (m=16, ef_construction=100): "
          f"built in {B['build_s']:.1f} s, {mb(B['size'])} MB; the same dense statement: p50 {B['p50_ms']:.1f} ms, "
          f"p99 {B['p99_ms']:.1f} ms, recall@10 {B['recall10']:.3f} (with the full index only: p50 {B['cur_p50']:.1f} ms, "
          f"p99 {B['cur_p99']:.1f} ms on the same connection just before; inside `search`: "
          f"p50 {B['base_p50']:.1f} ms, p99 {B['base_p99']:.1f} ms, recall@10 {B['base_recall10']:.3f}).", ""]
    L += ["", "<details><summary>EXPLAIN (ANALYZE, BUFFERS) of sample legs</summary>", "", "```"]
    for e in explains:
        L += [e, ""]
    L += ["```", "", "</details>", ""]
    return "\n".join(L)


def write_report(sections: dict[int, str]) -> None:
    OUT.mkdir(exist_ok=True)
    path = OUT / "pg_scale.md"
    old = path.read_text() if path.exists() else ""
    kept = {}
    for m in re.finditer(r"^## ([\d,]+) chunks\n.*?(?=^## [\d,]+ chunks\n|\Z)", old, re.S | re.M):
        kept[int(m.group(1).replace(",", ""))] = m.group(0).rstrip() + "\n"
    kept.update(sections)
    head = ["# PostgreSQL backend at scale: database-side first passes", "",
            "BM25 + HNSW first passes run inside PostgreSQL by `PostgresStore.search` (issue 20, item 3), on a "
            "synthetic corpus built by `benchmarks/pg_scale.py` (see its docstring for the corpus, the load and how "
            "recall is computed). Every figure below was measured; sections for other sizes come from earlier runs "
            "of the script.", ""]
    path.write_text("\n".join(head) + "\n" + "\n".join(kept[k] for k in sorted(kept)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--vocab", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=10_000, help="chunks per generated COPY batch")
    ap.add_argument("--maintenance-work-mem", default="6GB")
    ap.add_argument("--workers", type=int, default=1, help="max_parallel_maintenance_workers for the index builds")
    ap.add_argument("--shared-buffers", default="4GB", help="restart the loopback server with this ('' keeps it)")
    ap.add_argument("--check-max", type=int, default=200_000, help="largest size to run store.check() on")
    ap.add_argument("--common-df", type=float, default=0.01,
                    help="variant A: terms in more than this share of the visible chunks are 'common'")
    ap.add_argument("--keep", action="store_true", help="keep the schema afterwards")
    ap.add_argument("--pg", default=os.environ.get("MICRORAG_TEST_PG"))
    args = ap.parse_args()
    if not args.pg:
        raise SystemExit("no PostgreSQL: run under scripts/pg_loopback.py or pass --pg")
    set_shared_buffers(args.pg, args.shared_buffers)
    info = versions(args.pg)
    print(json.dumps(info), flush=True)
    sections = {}
    for n in args.sizes:
        started, load_start = time.time(), loadavg()
        print(f"== {n:,} chunks (load {load_start})", flush=True)
        corpus = Corpus(n, args.vocab)
        x, centres = clustered(n)
        qvecs = queries(centres, args.queries)
        qtexts = corpus.queries(args.queries)
        b = build(args.pg, corpus, x, args)
        checked = "not run (above --check-max)"
        if n <= args.check_max:
            from microrag_engine.store.postgres import PostgresStore

            st = PostgresStore(args.pg, schema=SCHEMA, pool_size=2)
            t = time.perf_counter()
            problems = st.check()
            st.close()
            checked = (f"passed ({time.perf_counter() - t:.0f} s)" if not problems
                       else f"FAILED: {'; '.join(problems[:5])}")
            print(f"  store.check(): {checked}", flush=True)
        t = time.perf_counter()
        truth = exact_truth(x, qvecs, {"none": None, "internal (10%)": corpus.chunk_internal})
        print(f"  exact dense truth: {time.perf_counter() - t:.0f} s", flush=True)
        rows, variants, explains = measure(args.pg, corpus, x, qtexts, qvecs, truth, b, args)
        sections[n] = section(n, corpus, b, rows, variants, explains, info, args, started, load_start, checked)
        write_report(sections)  # after every size: the server's data dies with the loopback command
        print(sections[n], flush=True)
        if not args.keep:
            import psycopg

            with psycopg.connect(args.pg, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        del x, b


if __name__ == "__main__":
    main()
