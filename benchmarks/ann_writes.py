"""Writes above ``ann_threshold``: the label-partitioned HNSW updated in place vs rebuilt.

    python benchmarks/ann_writes.py --sizes 100000 --writes 10000
    python benchmarks/ann_writes.py --sizes 1000000 --writes 500

The vectors, labels and queries are ``scale.py``'s (clustered 384-d, labels A-D at
1/9/40/50%). A write is what one upload does to the index, as ``Engine.updated`` lays it
out: a new document of 1-20 chunks placed among the rows (40%), a document of 1-20 chunks
deleted (30%), or one relabelled (30%, its chunks move to another label's partition). For
each size: the build, one full rebuild after a write (what every write cost before), the
time ``HNSW.updated`` takes per write over ``--writes`` writes (p50 / p99 / max: the max
includes compactions, a partition rebuilt once a quarter of its slots are tombstones), the
same plus saving the graphs to a cache folder (``--saved`` writes; the server saves in the background), and recall@10 of the
top-100 first pass against exact search (unfiltered and at 10% visible) after all the
writes, with its query latency before and after. The vectors' own copy per write (the
engine's ``interleave``) is timed apart: it is not the ANN's. Writes
benchmarks/results/ann_writes.md and .json. Run by hand, never in CI.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from hostinfo import machine  # benchmarks/ is the script's folder
from scale import DIM, FIRST_PASS, LABELS, clustered, exact_topk, queries, recall, timed

from microrag_engine.engine import _remap
from microrag_engine.index import ann
from microrag_engine.index.ann import HNSW
from microrag_engine.index.saved import interleave

OUT = Path(__file__).parent / "results"


def one_write(x: np.ndarray, labels: np.ndarray, rng: np.random.Generator, centres: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(vectors, labels, remap) after one upload-sized write, and the seconds its vector copy took."""
    size = int(rng.integers(1, 21))
    kind = rng.choice(3, p=[0.4, 0.3, 0.3])
    keep = np.ones(len(x), dtype=bool)
    start = int(rng.integers(0, len(x) - size))
    if kind == 2:  # relabel: the same rows, another label
        labels = labels.copy()
        labels[start:start + size] = rng.choice(list(LABELS))
        return x, labels, np.arange(len(x)), 0.0
    if kind == 1:
        keep[start:start + size] = False
        add = np.zeros((0, DIM), dtype=np.float32)
    else:
        add = centres[rng.integers(0, len(centres), size)] + 0.5 * rng.standard_normal((size, DIM)).astype(np.float32) / np.sqrt(DIM)
        add = (add / np.linalg.norm(add, axis=1, keepdims=True)).astype(np.float32)
    n = int(keep.sum()) + len(add)
    at = np.arange(start, start + len(add)) if len(add) else np.zeros(0, dtype=np.int64)  # a document: one run
    t = time.perf_counter()
    x2 = interleave(x, keep, add, at)
    copy = time.perf_counter() - t
    labels2 = interleave(labels, keep, np.full(len(add), rng.choice(list(LABELS)), dtype=object), at)
    return x2, labels2, _remap(keep, at, n), copy


def truth_and_recall(h: HNSW, x: np.ndarray, labels: np.ndarray, qs: np.ndarray) -> dict[str, float]:
    out = {}
    for name, visible in (("none", None), ("10%", ["A", "B"])):
        mask = None if visible is None else np.isin(labels, visible)
        if mask is not None:
            mask.setflags(write=False)
        truth = exact_topk(x, qs, 10, mask)
        h.top(qs[0], FIRST_PASS, mask)
        res, p50, p99 = timed(lambda q: h.top(q, FIRST_PASS, mask), qs)  # noqa: B023
        out[f"recall10_{name}"] = recall(truth, res)
        out[f"p50_ms_{name}"], out[f"p99_ms_{name}"] = p50, p99
    return out


def run(n: int, writes: int, saved: int, n_queries: int) -> dict:
    x, centres = clustered(n)
    qs = queries(centres, n_queries)
    labels = np.random.default_rng(3).choice(list(LABELS), size=n, p=list(LABELS.values())).astype(object)
    rng = np.random.default_rng(4)
    row: dict = {"n": n, "writes": writes}
    t = time.perf_counter()
    h = HNSW(x, labels)
    row["build_s"] = time.perf_counter() - t
    row["before"] = truth_and_recall(h, x, labels, qs)
    print(json.dumps(row), flush=True)

    x1, labels1, remap, _ = one_write(x, labels, rng, centres)
    t = time.perf_counter()
    HNSW(x1, labels1)  # what a write cost before: every partition built again
    row["rebuild_after_one_write_s"] = time.perf_counter() - t
    print(f"rebuild after one write: {row['rebuild_after_one_write_s']:.1f} s", flush=True)

    compactions: list[int] = []
    real = ann._build
    ann._build = lambda v, *a: compactions.append(len(v)) or real(v, *a)  # type: ignore[assignment]
    times, copies = [], []
    try:
        for i in range(writes):
            x, labels, remap, copy = one_write(x, labels, rng, centres)
            copies.append(copy)
            t = time.perf_counter()
            h = h.updated(x, remap, labels)
            times.append(time.perf_counter() - t)
            if (i + 1) % max(1, writes // 10) == 0:
                print(f"{i + 1} writes, p50 {np.percentile(times, 50) * 1000:.1f} ms, "
                      f"{len(compactions)} compactions", flush=True)
        folder = Path(tempfile.mkdtemp(prefix="ann-writes-"))
        try:
            saves = []
            for g in range(saved):
                x, labels, remap, _ = one_write(x, labels, rng, centres)
                t = time.perf_counter()
                h = h.updated(x, remap, labels)
                h.save(folder / f"ix.hnsw-{g}.faiss")  # what the server's background save adds
                saves.append(time.perf_counter() - t)
                shutil.rmtree(folder / f"ix.hnsw-{g}.faiss", ignore_errors=True)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        ann._build = real  # type: ignore[assignment]
    ms = np.array(times) * 1000
    row.update(update_p50_ms=float(np.percentile(ms, 50)), update_p99_ms=float(np.percentile(ms, 99)),
               update_max_ms=float(ms.max()), compactions=len(compactions),
               compacted_vectors=int(sum(compactions)), copy_p50_ms=float(np.percentile(copies, 50) * 1000),
               saved_p50_s=float(np.median(saves)) if saves else None,
               tombstones=int(sum(p.dead for p in h.parts)),
               partitions=", ".join(f"{p.label} {p.ids.size:,} {'graph' if p.graph is not None else 'exact'}"
                                    for p in h.parts))
    row["after"] = truth_and_recall(h, x, labels, qs)
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    ap.add_argument("--writes", type=int, default=10_000)
    ap.add_argument("--saved", type=int, default=5, help="writes whose graphs are saved, timed apart")
    ap.add_argument("--queries", type=int, default=300)
    args = ap.parse_args()
    started = time.time()
    rows = [run(n, args.writes, args.saved, args.queries) for n in args.sizes]
    OUT.mkdir(exist_ok=True)
    cmd = "python " + " ".join(["benchmarks/ann_writes.py", *sys.argv[1:]])
    path = OUT / "ann_writes.json"
    old = json.loads(path.read_text()) if path.exists() else []
    keep = [r for r in old if r["n"] not in {r["n"] for r in rows}]
    for r in rows:
        r.update(command=cmd, cpu=machine(), date=time.strftime("%Y-%m-%d"), minutes=round((time.time() - started) / 60, 1))
    allrows = sorted(keep + rows, key=lambda r: r["n"])
    path.write_text(json.dumps(allrows, indent=1))
    lines = ["# Writes above ann_threshold: HNSW updated in place", "",
             "Generated by `benchmarks/ann_writes.py` (each row's command below; run by hand). A write is one upload "
             "as `Engine.updated` lays it out: a document of 1-20 chunks added (40%), deleted (30%) or relabelled "
             "(30%). *Update* is `HNSW.updated` per write (graphs kept, ids remapped, new vectors added, removed ones "
             "tombstoned; max includes compactions, a partition rebuilt once a quarter of it is tombstones); *rebuild* "
             "is what one write cost before (every partition built again). Recall@10 of the top-100 first pass "
             "against exact search after all the writes; query p50 before and after them. *Copy* is the engine's "
             "vector copy per write (not the ANN's; #35 item 2).", "",
             "| n | writes | build s | rebuild after 1 write s | update p50 · p99 · max ms | compactions | "
             "saved write s | copy p50 ms | recall@10 none · 10% after | query p50 ms before → after (none) | CPU · date |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in allrows:
        saved = f"{r['saved_p50_s']:.2f}" if r.get("saved_p50_s") is not None else "-"
        lines.append(
            f"| {r['n']:,} | {r['writes']:,} | {r['build_s']:.1f} | {r['rebuild_after_one_write_s']:.1f} | "
            f"{r['update_p50_ms']:.1f} · {r['update_p99_ms']:.1f} · {r['update_max_ms']:.0f} | {r['compactions']} | "
            f"{saved} | {r['copy_p50_ms']:.1f} | {r['after']['recall10_none']:.3f} · {r['after']['recall10_10%']:.3f} | "
            f"{r['before']['p50_ms_none']:.2f} → {r['after']['p50_ms_none']:.2f} | {r['cpu']} · {r['date']} |")
    lines += ["", "Commands: " + "; ".join(sorted({f"`{r['command']}`" for r in allrows}))]
    (OUT / "ann_writes.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
