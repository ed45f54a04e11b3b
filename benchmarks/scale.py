"""Dense-search scale benchmark: exact numpy vs the engine's label-partitioned ANN (vs pgvector).

    python benchmarks/scale.py --sizes 100000 1000000 [--pg postgresql://...] [--pg-max 100000]

Synthetic *clustered* 384-d unit vectors (iid random vectors defeat every ANN and
say nothing about real embeddings): 2,000 random unit centres, each point a centre
plus isotropic Gaussian noise of norm 0.3-0.8 (per cluster), re-normalised;
queries are centres plus small noise. Every vector gets one of four labels drawn
with shares 1% / 9% / 40% / 50% (A-D), independent of its cluster, and a query's
clearance sees {A} (1% visible), {A, B} (10%), {A, B, C} (50%) or everything; plus a
document filter that is no union of labels (a random 10% of rows, as ``where`` makes).
The ANN is the engine's own ``index.ann.HNSW`` built with those labels, asked as
retrieval asks it: ``top(q, first_pass=100, mask)`` with the mask read-only as
``Engine.mask`` hands it out. For each size and setting: build time (incl. writing
the cache folder), reopen time (memory-mapped), memory, single-query latency p50/p99
and recall@10 (its first 10, ordered by exact score) against exact filtered search.
Writes benchmarks/results/scale.md and scale.json (an "## Earlier runs" section of
scale.md is kept). Run by hand, never in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from hostinfo import machine  # benchmarks/ is the script's folder

OUT = Path(__file__).parent / "results"
DIM = 384
LABELS = {"A": 0.01, "B": 0.09, "C": 0.40, "D": 0.50}
# filter name -> the labels visible (None: all); "10% doc filter" is no union of labels
CLEARANCES: dict[str, list[str] | None] = {"none": None, "1%": ["A"], "10%": ["A", "B"], "50%": ["A", "B", "C"]}
FIRST_PASS = 100  # Settings.first_pass: what retrieval asks the ANN for
EFS = (100, 128, 256)  # ef_search settings measured; below first_pass a search widens to it anyway


BEYOND = "## Beyond the dense first pass"


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


def exact_truth(x: np.ndarray, qs: np.ndarray, masks: dict[str, np.ndarray | None], k: int = 10) -> dict[str, list]:
    """The exact filtered top-``k`` per query for every mask, from one blocked matrix product."""
    best = {name: (np.full((len(qs), 0), -np.inf, np.float32), np.zeros((len(qs), 0), np.int64)) for name in masks}
    for lo in range(0, len(x), 50_000):
        sc = x[lo : lo + 50_000] @ qs.T  # (rows, queries)
        ids = np.arange(lo, lo + len(sc))
        for name, mask in masks.items():
            s = sc if mask is None else np.where(mask[lo : lo + len(sc), None], sc, -np.inf)
            top = np.argpartition(-s, k, axis=0)[:k].T  # (queries, k)
            cand_s = np.concatenate([best[name][0], np.take_along_axis(s.T, top, axis=1)], axis=1)
            cand_i = np.concatenate([best[name][1], ids[top]], axis=1)
            keep = np.argsort(-cand_s, axis=1)[:, :k]
            best[name] = (np.take_along_axis(cand_s, keep, axis=1), np.take_along_axis(cand_i, keep, axis=1))
    return {name: list(b[1]) for name, b in best.items()}


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


def bench_numpy(x, qs, masks, truth):
    rows = []
    for name in ("none", "10%"):
        res, p50, p99 = timed(lambda q: exact_topk(x, q[None], 10, masks[name])[0], qs)  # noqa: B023
        rows.append(dict(backend="numpy exact", filter=name, build_s=0.0, mem_mb=x.nbytes / 2**20, p50_ms=p50,
                         p99_ms=p99, recall10=recall(truth[name], res)))
    return rows


def bench_ann(x, labels, qs, masks, truth):
    """The engine's ANN class itself: built (and cached) as ``Engine.from_store`` builds it."""
    from microrag_engine.index.ann import HNSW

    folder = Path(tempfile.mkdtemp(prefix="scale-ann-"))
    try:
        before = rss_mb()
        t = time.perf_counter()
        built = HNSW(x, labels, cache=folder / "index.hnsw-1.faiss")
        build = time.perf_counter() - t
        mem = rss_mb() - before
        graphs = ", ".join(f"{p.label} {p.ids.size:,} {'graph' if p.graph is not None else 'exact'}" for p in built.parts)
        print(f"partitions: {graphs}", flush=True)
        del built
        t = time.perf_counter()
        h = HNSW(x, labels, cache=folder / "index.hnsw-1.faiss")  # what every later open does
        reopen = time.perf_counter() - t
        rows = []
        for ef in EFS:
            h.ef_search = ef
            for name, mask in masks.items():
                h.top(qs[0], FIRST_PASS, mask)  # a clearance's first query splits its mask; later ones reuse it
                res, p50, p99 = timed(lambda q: h.top(q, FIRST_PASS, mask), qs)  # noqa: B023
                rows.append(dict(backend=f"partitioned ANN ef{ef}", filter=name, build_s=build, open_s=reopen, mem_mb=mem,
                                 p50_ms=p50, p99_ms=p99, recall10=recall(truth[name], res), partitions=graphs))
                print(json.dumps(rows[-1]), flush=True)
        return rows
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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
    started = time.time()
    all_rows = []
    for n in args.sizes:
        x, centres = clustered(n)
        qs = queries(centres, args.queries)
        labels = np.random.default_rng(3).choice(list(LABELS), size=n, p=list(LABELS.values())).astype(object)
        masks: dict[str, np.ndarray | None] = {}
        for name, visible in CLEARANCES.items():
            masks[name] = None if visible is None else np.isin(labels, visible)
        masks["10% doc filter"] = np.random.default_rng(2).random(n) < 0.10
        for m in masks.values():
            if m is not None:
                m.setflags(write=False)
        truth = exact_truth(x, qs, masks)
        rows = bench_numpy(x, qs, masks, truth) + bench_ann(x, labels, qs, masks, truth)
        if args.pg and n <= args.pg_max:
            rows += bench_pg(args.pg, x, qs, masks["10%"], truth["none"], truth["10%"])
        for r in rows:
            r["n"] = n
            r["visible"] = 1.0 if masks[r["filter"]] is None else float(masks[r["filter"]].mean())
        all_rows += rows
        del x
    OUT.mkdir(exist_ok=True)
    (OUT / "scale.json").write_text(json.dumps(all_rows, indent=1))
    cmd = "python " + " ".join(["benchmarks/scale.py", *sys.argv[1:]])
    lines = ["# Dense search at scale", "",
             f"Generated by `{cmd}` on {time.strftime('%Y-%m-%d')} ({machine()}), {(time.time() - started) / 60:.0f} min; "
             f"{args.queries} single queries; recall@10 against exact search under the same filter. "
             f"The ANN rows are the engine's `index.ann.HNSW`, asked for its top-{FIRST_PASS} as retrieval asks "
             "(recall@10: its first 10); labels A/B/C/D hold 1/9/40/50% of the vectors, a filter of k% is a clearance "
             "of the smallest labels summing to k%; \"10% doc filter\" is a random 10% of rows (no union of labels). "
             "Build includes writing the cache folder; open is reopening it (memory-mapped); index MB is the process's "
             "memory growth while building.", ""]
    for n in args.sizes:
        parts = next((r["partitions"] for r in all_rows if r["n"] == n and "partitions" in r), "")
        if parts:
            lines.append(f"- {n:,} vectors, partitions: {parts}")
    lines += ["", "| n | backend | filter | visible | build s | open s | index MB | p50 ms | p99 ms | recall@10 |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in all_rows:
        lines.append(f"| {r['n']:,} | {r['backend']} | {r['filter']} | {r['visible']:.1%} | {r['build_s']:.1f} | "
                     f"{r.get('open_s', 0.0):.2f} | {r['mem_mb']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
                     f"{r['recall10']:.3f} |")
    old = (OUT / "scale.md").read_text() if (OUT / "scale.md").exists() else ""
    # Kept from the previous file: the summary of the other scale benchmarks, and earlier runs.
    mark = next((m for m in (BEYOND, "## Earlier runs") if m in old), "")
    earlier = old[old.index(mark):] if mark else ""
    (OUT / "scale.md").write_text("\n".join(lines) + "\n" + ("\n" + earlier if earlier else ""))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
