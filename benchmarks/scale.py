"""Dense-search scale benchmark: exact numpy vs faiss HNSW vs pgvector HNSW.

    python benchmarks/scale.py --sizes 100000 1000000 [--pg postgresql://...] [--pg-max 100000]

Synthetic *clustered* 384-d unit vectors (iid random vectors defeat every ANN and
say nothing about real embeddings): 2,000 random unit centres, each point a centre
plus isotropic Gaussian noise of norm 0.3-0.8 (per cluster), re-normalised;
queries are centres plus small noise. For each backend and size:
build time, index memory, single-query latency p50/p99 and recall@10 against
exact search, unfiltered and with a 10% label filter. Settings are the ones the
engine uses (HNSW M=16, ef_construction=100; ef_search 128 / iterative scan).
Writes benchmarks/results/scale.md and scale.json. Run by hand, never in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

OUT = Path(__file__).parent / "results"
DIM = 384


def clustered(n: int, n_clusters: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_clusters, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    assign = rng.integers(0, n_clusters, n)
    spread = rng.uniform(0.3, 0.8, n_clusters).astype(np.float32)
    x = np.empty((n, DIM), np.float32)
    for lo in range(0, n, 100_000):  # chunked to bound peak memory
        a = assign[lo : lo + 100_000]
        noise = rng.standard_normal((len(a), DIM)).astype(np.float32) / np.sqrt(DIM)
        x[lo : lo + len(a)] = centres[a] + spread[a, None] * noise
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, centres


def queries(centres: np.ndarray, n: int = 300, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q = centres[rng.integers(0, len(centres), n)] + rng.standard_normal((n, DIM)).astype(np.float32) * 0.04
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def exact_topk(x: np.ndarray, qs: np.ndarray, k: int, mask: np.ndarray | None = None) -> list[np.ndarray]:
    out = []
    for q in qs:
        s = x @ q
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        idx = np.argpartition(-s, k)[:k]
        out.append(idx[np.argsort(-s[idx])])
    return out


def recall(truth: list[np.ndarray], got: list[np.ndarray], k: int = 10) -> float:
    return float(np.mean([len(set(t[:k]) & set(g[:k])) / k for t, g in zip(truth, got)]))


def timed(fn, qs):
    lat, res = [], []
    for q in qs:
        t = time.perf_counter()
        res.append(fn(q))
        lat.append((time.perf_counter() - t) * 1000)
    return res, float(np.percentile(lat, 50)), float(np.percentile(lat, 99))


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def bench_numpy(x, qs, mask, truth, truth_f):
    rows = []
    res, p50, p99 = timed(lambda q: exact_topk(x, q[None], 10)[0], qs)
    rows.append(dict(backend="numpy exact", filter="none", build_s=0.0, mem_mb=x.nbytes / 2**20, p50_ms=p50, p99_ms=p99,
                     recall10=recall(truth, res)))
    res, p50, p99 = timed(lambda q: exact_topk(x, q[None], 10, mask)[0], qs)
    rows.append(dict(backend="numpy exact", filter="10%", build_s=0.0, mem_mb=x.nbytes / 2**20, p50_ms=p50, p99_ms=p99,
                     recall10=recall(truth_f, res)))
    return rows


def bench_faiss(x, qs, mask, truth, truth_f):
    from microrag_engine.index.ann import HNSW

    before = rss_mb()
    t = time.perf_counter()
    h = HNSW(x)
    build = time.perf_counter() - t
    mem = rss_mb() - before
    rows = []
    for ef in (64, 128, 256):
        h.ef_search = ef  # filtered queries: exact on the 10% subset, or a beam widened by 1/share
        res, p50, p99 = timed(lambda q: h.top(q, 10), qs)
        rows.append(dict(backend=f"faiss HNSW ef{ef}", filter="none", build_s=build, mem_mb=mem, p50_ms=p50, p99_ms=p99,
                         recall10=recall(truth, res)))
        res, p50, p99 = timed(lambda q: h.top(q, 10, mask), qs)
        rows.append(dict(backend=f"faiss HNSW ef{ef}", filter="10%", build_s=build, mem_mb=mem, p50_ms=p50, p99_ms=p99,
                         recall10=recall(truth_f, res)))
    return rows


def bench_pg(uri, x, qs, mask, truth, truth_f):
    import psycopg

    from microrag_engine.store.postgres import vector_literal

    conn = psycopg.connect(uri, autocommit=True)
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    conn.execute("DROP TABLE IF EXISTS bench")
    conn.execute(f"CREATE TABLE bench (id int PRIMARY KEY, label text, embedding vector({DIM}))")
    t = time.perf_counter()
    with conn.cursor() as cur, cur.copy("COPY bench (id, label, embedding) FROM STDIN") as copy:
        for i, v in enumerate(x):
            copy.write_row((i, "a" if mask[i] else "b", vector_literal(v)))
    load = time.perf_counter() - t
    conn.execute("SET maintenance_work_mem = '4GB'")
    conn.execute("SET max_parallel_maintenance_workers = 2")
    t = time.perf_counter()
    conn.execute("CREATE INDEX ON bench USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 100)")
    conn.execute("CREATE INDEX ON bench (label)")
    build = time.perf_counter() - t
    size = conn.execute("SELECT pg_relation_size(indexrelid) FROM pg_index WHERE indrelid = 'bench'::regclass "
                        "ORDER BY 1 DESC LIMIT 1").fetchone()[0] / 2**20
    rows = []
    for ef in (64, 128, 256):
        conn.execute(f"SET hnsw.ef_search = {ef}")
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        q1 = lambda q: np.array([r[0] for r in conn.execute(  # noqa: E731
            "SELECT id FROM bench ORDER BY embedding <=> %s::vector LIMIT 10", (vector_literal(q),)).fetchall()])
        res, p50, p99 = timed(q1, qs)
        rows.append(dict(backend=f"pgvector HNSW ef{ef}", filter="none", build_s=build, load_s=load, mem_mb=size,
                         p50_ms=p50, p99_ms=p99, recall10=recall(truth, res)))
        q2 = lambda q: np.array([r[0] for r in conn.execute(  # noqa: E731
            "SELECT id FROM bench WHERE label = 'a' ORDER BY embedding <=> %s::vector LIMIT 10",
            (vector_literal(q),)).fetchall()])
        res, p50, p99 = timed(q2, qs)
        rows.append(dict(backend=f"pgvector HNSW ef{ef}", filter="10%", build_s=build, load_s=load, mem_mb=size,
                         p50_ms=p50, p99_ms=p99, recall10=recall(truth_f, res)))
    conn.execute("DROP TABLE bench")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--pg", default=os.environ.get("MICRORAG_TEST_PG"), help="PostgreSQL URI (pgvector) to include")
    ap.add_argument("--pg-max", type=int, default=100_000, help="largest size to run on Postgres")
    args = ap.parse_args()
    all_rows = []
    for n in args.sizes:
        x, centres = clustered(n)
        qs = queries(centres, args.queries)
        mask = np.random.default_rng(2).random(n) < 0.10
        truth, truth_f = exact_topk(x, qs, 10), exact_topk(x, qs, 10, mask)
        rows = bench_numpy(x, qs, mask, truth, truth_f) + bench_faiss(x, qs, mask, truth, truth_f)
        if args.pg and n <= args.pg_max:
            rows += bench_pg(args.pg, x, qs, mask, truth, truth_f)
        for r in rows:
            r["n"] = n
            print(json.dumps(r), flush=True)
        all_rows += rows
        del x
    OUT.mkdir(exist_ok=True)
    (OUT / "scale.json").write_text(json.dumps(all_rows, indent=1))
    lines = ["# Dense search at scale", "",
             f"Generated by `python benchmarks/scale.py {' '.join(f'--sizes {n}' for n in args.sizes[:1])} ...` "
             f"on this machine ({os.cpu_count()} cores); {args.queries} single queries, recall@10 against exact search.",
             "", "| n | backend | filter | build s | index MB | p50 ms | p99 ms | recall@10 |",
             "|---|---|---|---|---|---|---|---|"]
    for r in all_rows:
        lines.append(f"| {r['n']:,} | {r['backend']} | {r['filter']} | {r['build_s']:.1f} | {r['mem_mb']:.0f} | "
                     f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['recall10']:.3f} |")
    (OUT / "scale.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
