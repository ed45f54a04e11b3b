"""How long opening an index takes, and a whole `microrag retrieve`, at 2.5k / 100k / 1M chunks.

    python benchmarks/open_index.py                 # 2500 and 100000 chunks
    python benchmarks/open_index.py --sizes 1000000 # add the 1M row (builds a ~2.5 GB store; minutes)

Each size gets a SQLite store written straight through ``Store.apply`` (texts are three
random SciFact sentences, vectors random unit rows: opening does not care what the
vectors mean, and embedding a million chunks is not what is measured here). Then, side
by side in one run:
  * derive: the first open of a generation - read the store's snapshot, fit BM25, save
    the derived files (this is what every open cost before the saved index);
  * open: ``Engine.from_store`` on the saved files (the embedder already loaded), median of 7;
  * first query: the first ``retrieve`` after an open (pages the columns in), median of 7;
  * CLI: ``microrag retrieve`` wall time in a fresh process, median of 7 (Python start,
    imports, model load, open, query, print).
Writes benchmarks/results/open.md and .json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact" / "corpus.jsonl.gz"
OUT = ROOT / "benchmarks" / "results"
QUERY = "vitamin D deficiency and the risk of fractures"
CHUNKS_PER_DOC = 10


def sentences() -> list[str]:
    out = []
    with gzip.open(SCIFACT, "rt", encoding="utf-8") as f:
        for line in f:
            out += [s.strip() + "." for s in json.loads(line)["text"].split(". ") if len(s) > 30]
    return out


def build(folder: Path, n: int, pool: list[str]) -> None:
    from microrag_engine.config import preset
    from microrag_engine.store.base import DocRecord, DocUpdate, bound_meta
    from microrag_engine.store.sqlite import SQLiteStore
    from microrag_engine.types import Chunk

    rng = random.Random(n)
    vec_rng = np.random.default_rng(n)
    store = SQLiteStore(folder)
    meta = bound_meta(preset("default"), 384)
    batch: list[DocUpdate] = []
    for d in range(n // CHUNKS_PER_DOC):
        doc = f"synthetic/doc{d:07}.md"
        chunks, at = [], 0
        for k in range(CHUNKS_PER_DOC):
            text = " ".join(rng.choice(pool) for _ in range(3))
            chunks.append(Chunk(f"{doc}#{k}", doc, k, at, at + len(text), text))
            at += len(text) + 1
        vectors = vec_rng.standard_normal((CHUNKS_PER_DOC, 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        label = "internal" if d % 10 == 0 else "public"
        batch.append(DocUpdate(DocRecord(doc, f"h{d}", label, n_chunks=CHUNKS_PER_DOC, collection="synthetic"), chunks,
                               vectors, [str(hash(c.text)) for c in chunks]))
        if len(batch) >= 2000:
            store.apply(batch, [], meta)
            batch = []
    store.apply(batch, [], meta)
    store.close()


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def measure(folder: Path, repeats: int) -> dict:
    from microrag_engine.config import preset
    from microrag_engine.engine import Engine
    from microrag_engine.index.embed import make_embedder
    from microrag_engine.store.sqlite import SQLiteStore

    settings = preset("default")
    make_embedder(settings.embedder)  # the model loads once per process: not part of opening an index
    store = SQLiteStore(folder)
    for old in folder.glob("derived-*"):
        shutil.rmtree(old)
    hnsw_cached = any(folder.glob("hnsw-*.faiss"))  # else derive also builds the graph (a first open ever)
    t0 = time.perf_counter()
    Engine.from_store(store, settings)
    derive = time.perf_counter() - t0
    open_s, _ = timed(lambda: Engine.from_store(store, settings), repeats)

    def open_and_query():
        e = Engine.from_store(store, settings)
        t = time.perf_counter()
        e.retrieve(QUERY)
        return time.perf_counter() - t

    firsts = [open_and_query() for _ in range(repeats)]
    store.close()
    cli = []
    env = {**os.environ, "MICRORAG_INDEX": str(folder)}
    for _ in range(repeats):
        t0 = time.perf_counter()
        done = subprocess.run([str(Path(sys.executable).with_name("microrag")), "retrieve", QUERY], env=env, check=True,
                              capture_output=True, text=True)
        cli.append(time.perf_counter() - t0)
        # it really ranked: hits, or the gate's refusal (the vectors are random, so the gate may refuse)
        assert "chunk" in done.stdout or "REFUSE" in done.stdout, done.stdout + done.stderr
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return {"derive_s": derive, "hnsw_cached": hnsw_cached, "open_s": open_s, "first_query_s": statistics.median(firsts),
            "cli_retrieve_s": statistics.median(cli), "cli_all_s": cli, "disk_bytes": size, "repeats": repeats}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[2500, 100_000])
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "microrag-open-bench")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--report", action="store_true", help="only rewrite open.md from open.json")
    args = ap.parse_args()
    pool = sentences()
    results = {}
    for n in [] if args.report else args.sizes:
        folder = args.work / f"ix-{n}"
        if not (folder / "index.sqlite").exists():
            t0 = time.perf_counter()
            build(folder, n, pool)
            print(f"{n}: built in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        results[n] = measure(folder, args.repeats)
        print(n, json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in results[n].items()
                             if k != "cli_all_s"}), file=sys.stderr)
    previous = json.loads((OUT / "open.json").read_text()) if (OUT / "open.json").exists() else {}
    rows = {**previous.get("results", {}), **{str(k): v for k, v in results.items()}}
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    flags = open("/proc/cpuinfo").read()
    context = {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), "avx512_vnni": "avx512_vnni" in flags,
               "python": platform.python_version(), "command": "python benchmarks/open_index.py --sizes " +
               " ".join(str(s) for s in sorted(int(k) for k in rows))}
    (OUT / "open.json").write_text(json.dumps({"context": context, "results": rows}, indent=1))
    lines = ["# Opening an index", "", f"`{context['command']}` on {cpu}, {context['cores']} cores "
             f"(AVX-512 VNNI: {context['avx512_vnni']}). Medians of " +
             "/".join(sorted({str(r.get("repeats", args.repeats)) for r in rows.values()})) + " runs (`repeats` in open.json).", "",
             "| chunks | derive from the store (first open of a generation) | open the saved index | first query after open "
             "| `microrag retrieve`, whole process | on disk |",
             "|---|---|---|---|---|---|"]
    for n in sorted(rows, key=int):
        r = rows[n]
        graph = "" if r.get("hnsw_cached", True) or int(n) < 50_000 else " (incl. building the HNSW graph)"
        lines.append(f"| {int(n):,} | {r['derive_s']:.2f} s{graph} | {1000 * r['open_s']:.1f} ms | {1000 * r['first_query_s']:.0f} ms "
                     f"| {r['cli_retrieve_s']:.2f} s | {r['disk_bytes'] / 2**20:,.0f} MiB |")
    lines += ["", "Before the saved index, every open cost the *derive* column. The CLI column includes "
              "Python's start, imports, loading the embedding model and embedding the query."]
    (OUT / "open.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
