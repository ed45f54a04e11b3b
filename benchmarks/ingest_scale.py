"""End-to-end ingest on one machine: `microrag ingest` of a folder of N chunks' worth of files.

    python benchmarks/ingest_scale.py --chunks 100000          # ~the issue's 100k row (tens of minutes)
    python benchmarks/ingest_scale.py --chunks 5000 --chunks 20000   # memory stays flat as N grows

The corpus: markdown files of five paragraphs, each three random SciFact sentences
(seeded); each file makes about 2.8 chunks of ~200 tokens with the default preset. Per size it
reports the wall time of the real CLI (load, DLP, chunk, embed, write, in one process),
chunks per second, the process's peak resident memory, and - on a sample of the same
chunks, in the same run - the embedder's own passages/s: ingest throughput close to the
embedder's means loading and writing overlap embedding instead of adding to it.
Writes benchmarks/results/ingest.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from open_index import sentences  # the same SciFact sentence pool (benchmarks/ is on the path)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"
# Measured with the default preset: a file of five three-sentence paragraphs makes 2.8
# sentence chunks of ~200 tokens on average (the report gives the exact count).
CHUNKS_PER_FILE = 2.8


def write_corpus(folder: Path, files: int, pool: list[str]) -> None:
    rng = random.Random(files)
    for i in range(files):
        sub = folder / f"part{i // 1000:03}"
        sub.mkdir(parents=True, exist_ok=True)
        paras = [" ".join(rng.choice(pool) for _ in range(3)) for _ in range(5)]
        (sub / f"doc{i:06}.md").write_text(f"# Document {i}\n\n" + "\n\n".join(paras) + "\n", encoding="utf-8")


def embed_rate(corpus: Path, preset_name: str, files: int = 150) -> float:
    """The embedder's own passages/s on real chunks of ``corpus`` (its first ``files`` files,
    chunked as ingest chunks them): what ingest would reach if loading, DLP and writing
    cost nothing."""
    from microrag_engine.chunk import chunk_documents
    from microrag_engine.config import preset
    from microrag_engine.index.embed import make_embedder
    from microrag_engine.load import iter_files, load_documents

    settings = preset(preset_name)
    emb = make_embedder(settings.embedder)
    paths = [path for path, _ in zip((p for p, _ in iter_files(corpus)), range(files))]
    docs = load_documents(paths)
    texts = [c.text for c in chunk_documents(docs, settings.chunker, settings.size, settings.overlap, settings.max_tokens,
                                             emb)]
    emb.embed(texts[:8])
    t0 = time.perf_counter()
    emb.embed(texts)
    return len(texts) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, action="append", help="chunks' worth of files (repeatable)")
    ap.add_argument("--preset", default="default")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "microrag-ingest-bench")
    ap.add_argument("--keep", action="store_true", help="keep the corpora and indexes")
    ap.add_argument("--rate-only", action="store_true", help="re-measure only the embedder-alone column (corpora kept)")
    args = ap.parse_args()
    sizes = args.chunks or [100_000]
    pool = sentences()
    rows = {}
    previous = json.loads((OUT / "ingest.json").read_text()) if (OUT / "ingest.json").exists() else {}
    for n in sizes:
        corpus, index = args.work / f"corpus-{n}", args.work / f"ix-{n}"
        if args.rate_only:
            rows[str(n)] = {**previous["results"][str(n)], "embedder_alone_per_s": embed_rate(corpus, args.preset)}
            continue
        shutil.rmtree(index, ignore_errors=True)
        if not corpus.exists():
            write_corpus(corpus, max(1, round(n / CHUNKS_PER_FILE)), pool)
        t0 = time.perf_counter()
        done = subprocess.run(["/usr/bin/time", "-f", "maxrss_kib=%M", str(Path(sys.executable).with_name("microrag")), "ingest",
                               str(corpus), "--index", str(index), "--preset", args.preset, "--json"],
                              capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if done.returncode:
            sys.exit(f"ingest failed: {done.stderr[-2000:]}")
        peak = int(done.stderr.rsplit("maxrss_kib=", 1)[1].split()[0])  # GNU time: the ingest process's peak
        report = json.loads(done.stdout)
        chunks = int(report.get("chunks_written", 0))
        rate = embed_rate(corpus, args.preset)
        rows[str(n)] = {"files": max(1, round(n / CHUNKS_PER_FILE)), "chunks": chunks, "wall_s": wall, "chunks_per_s": chunks / wall,
                        "peak_rss_mib": peak / 1024, "embedder_alone_per_s": rate}
        print(n, json.dumps(rows[str(n)]), file=sys.stderr)
        if not args.keep:
            shutil.rmtree(index, ignore_errors=True)
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    merged = {**previous.get("results", {}), **rows} if previous.get("preset") == args.preset else rows
    (OUT / "ingest.json").write_text(json.dumps({"preset": args.preset, "cpu": cpu, "cores": len(os.sched_getaffinity(0)),
                                                 "results": merged}, indent=1))
    lines = ["# End-to-end ingest on one machine", "",
             f"`python benchmarks/ingest_scale.py --chunks N` (preset `{args.preset}`) on {cpu}, "
             f"{len(os.sched_getaffinity(0))} cores.", "",
             "| chunks | files | wall | chunks/s | embedder alone on the same chunks, passages/s | peak RSS |", "|---|---|---|---|---|---|"]
    for n in sorted(merged, key=int):
        r = merged[n]
        lines.append(f"| {r['chunks']:,} | {r['files']:,} | {r['wall_s']:.0f} s | {r['chunks_per_s']:.1f} | "
                     f"{r['embedder_alone_per_s']:.1f} | {r['peak_rss_mib']:.0f} MiB |")
    lines += ["", "Peak RSS is the ingest process's high-water mark (GNU time's %M). The embedder column embeds "
              "the chunks of the corpus's first 150 files alone (`embed_rate`): the gap to chunks/s is what "
              "loading, DLP, chunking and writing cost beyond what overlaps with embedding."]
    (OUT / "ingest.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
