"""Load and soak: concurrent clients querying real servers while a contributor ingests.

    python scripts/pg_loopback.py run --standby -- python benchmarks/load.py \
        [--clients 50] [--seconds 60] [--soak 600] [--backends embedded,pg1,pg2] [--soak-on embedded,pg2]

Loopback only, bounded in count and time. Corpus: every HotpotQA-100 paragraph
(../shared/datasets/hotpotqa-100, CC BY-SA 4.0; 994 documents), ingested by the operator;
queries: its 100 questions, cycled, through ``POST /search`` (retrieval with the query
embedded, the gate, the cap, the audit row; no model) with a reader key. Backends:

  * ``embedded`` - one ``microrag serve`` on a SQLite index folder;
  * ``pg1``/``pg2`` - one or two ``microrag serve --index <primary> --standby <standby>``
    replicas (needs ``MICRORAG_TEST_PG`` and ``MICRORAG_TEST_PG_STANDBY``, as
    ``scripts/pg_loopback.py run --standby`` exports them); clients alternate replicas.

Meanwhile a trusted contributor re-uploads ``lighthouse.md`` every 5 s, each version's
chunks all saying "version N". One client in ten asks about it and checks that the
chunks it gets back name one version only: a *mixed read* is a response with two.
Per backend: errors (non-200 or no response), p50/p99 latency, requests/s, mixed reads,
uploads. With ``--soak S`` the backends in ``--soak-on`` then run S more seconds under the
same load while the servers' resident memory is sampled every 10 s; the slope of a
least-squares line through the second half of the samples says whether memory grows.
Writes benchmarks/results/load.md and load.json. Run by hand, never in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from hostinfo import machine  # noqa: E402
from poisonedrag import write_corpus  # noqa: E402 - the same HotpotQA folder

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "datasets" / "hotpotqa-100"
OUT = Path(__file__).parent / "results"
CLI = [sys.executable, "-m", "microrag_engine.cli"]
UPLOAD_EVERY_S = 5.0
LIGHTHOUSE_Q = "what does the lighthouse keeper's log record?"
LOG_LINES = ("The lighthouse keeper's log records the lamp lit at dusk and the weather at the rock.",
             "Ships that passed the point in fog are written down with the hour they were heard.",
             "Every delivery of oil and wicks by the supply boat is entered with its weight.",
             "Repairs to the lens, the clockwork and the fog bell are noted with who made them.",
             "The keeper signs each night's entry before the morning relief takes the watch.")


def lighthouse(version: int) -> str:
    """Five paragraphs (several chunks), each naming ``version``: a response holding chunks
    of two versions read half of one ingest and half of another."""
    return "# Lighthouse log\n\n" + "\n\n".join(f"Log version {version}. {line} " * 2 for line in LOG_LINES)


def cli(*args: str, cwd: Path) -> str:
    done = subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise SystemExit(f"microrag {' '.join(args[:2])} failed: {done.stderr[-2000:]}")
    return done.stdout.strip()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica:
    """One ``microrag serve`` process on a loopback port."""

    def __init__(self, index: str, cwd: Path, standby: str | None = None) -> None:
        self.port = free_port()
        cwd.mkdir(parents=True, exist_ok=True)
        extra = ["--standby", standby] if standby else []
        self.log = (cwd / f"serve-{self.port}.log").open("w")
        self.proc = subprocess.Popen([*CLI, "serve", "--index", index, *extra, "--port", str(self.port),
                                      "--rate-per-minute", "1000000", "--no-verify", "-q"],
                                     cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"server exited: {(cwd / f'serve-{self.port}.log').read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise SystemExit("server did not start in 180 s")

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS"))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


async def drive(urls: list[str], reader: str, contributor: str, questions: list[str], clients: int, seconds: float,
                replicas: list[Replica] | None = None) -> dict:
    """``clients`` concurrent query loops and one uploader for ``seconds``; RSS samples if ``replicas``."""
    lat: list[float] = []
    errors: list[str] = []
    mixed = checked = ok = 0
    uploads: list[str] = []
    samples: list[tuple[float, float]] = []
    start = time.monotonic()
    stop_at = start + seconds
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        async def client(i: int) -> None:
            nonlocal mixed, checked, ok
            rng = random.Random(i)
            n = 0
            while time.monotonic() < stop_at:
                n += 1
                probe = n % 10 == 0
                query = LIGHTHOUSE_Q if probe else rng.choice(questions)
                url = urls[(i + n) % len(urls)]
                t0 = time.perf_counter()
                try:
                    r = await http.post(url + "/search", json={"query": query, "top_k": 5},
                                        headers={"Authorization": f"Bearer {reader}"})
                except httpx.HTTPError as exc:
                    errors.append(type(exc).__name__)
                    continue
                lat.append((time.perf_counter() - t0) * 1000)
                if r.status_code != 200:
                    errors.append(f"HTTP {r.status_code}: {r.text[:120]}")
                    continue
                ok += 1
                if probe:
                    versions = {m for h in r.json()["hits"] if h["doc"].endswith("lighthouse.md")
                                for m in re.findall(r"Log version (\d+)\.", h["text"])}
                    checked += bool(versions)  # a check counts only if the document was among the hits
                    mixed += len(versions) > 1

        async def uploader() -> None:
            version = 0
            while time.monotonic() < stop_at:
                version += 1
                try:
                    r = await http.post(urls[version % len(urls)] + "/ingest", json={"source": "lighthouse.md",
                                        "body": lighthouse(version)}, headers={"Authorization": f"Bearer {contributor}"})
                    uploads.append(r.json().get("status", f"HTTP {r.status_code}") if r.status_code == 200
                                   else f"HTTP {r.status_code}: {r.text[:120]}")
                except httpx.HTTPError as exc:
                    uploads.append(type(exc).__name__)
                await asyncio.sleep(UPLOAD_EVERY_S)

        async def sampler() -> None:
            while replicas and time.monotonic() < stop_at:
                samples.append((time.monotonic() - start, sum(r.rss_mb() for r in replicas)))
                await asyncio.sleep(10)

        await asyncio.gather(*(client(i) for i in range(clients)), uploader(), sampler())
    took = time.monotonic() - start
    out = {"clients": clients, "seconds": round(took, 1), "ok": ok, "errors": len(errors),
           "error_kinds": sorted(set(errors))[:5],
           "p50_ms": round(float(np.percentile(lat, 50)), 1) if lat else None,
           "p99_ms": round(float(np.percentile(lat, 99)), 1) if lat else None,
           "per_s": round(ok / took, 1),
           "mixed_reads": mixed, "lighthouse_checks": checked,
           "uploads": {s: uploads.count(s) for s in sorted(set(uploads))}}
    if samples:
        t = np.array([s[0] for s in samples]) / 60
        mb = np.array([s[1] for s in samples])
        half = slice(len(t) // 2, None)
        slope = float(np.polyfit(t[half], mb[half], 1)[0]) if len(t[half]) >= 3 else float("nan")
        out["rss"] = {"samples": [(round(a, 1), round(b, 1)) for a, b in samples], "first_mb": round(float(mb[0]), 1),
                      "last_mb": round(float(mb[-1]), 1), "max_mb": round(float(mb.max()), 1),
                      "slope_second_half_mb_per_min": round(slope, 2)}
    return out


def keys(index: str, cwd: Path) -> tuple[str, str]:
    reader = cli("keys", "add", "loadreader", "--role", "reader", "--index", index, "-q", cwd=cwd)
    contributor = cli("keys", "add", "loadtrusted", "--role", "contributor", "--trusted", "--index", index, "-q", cwd=cwd)
    return reader, contributor


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each backend's load run")
    ap.add_argument("--soak", type=float, default=0.0, help="then this many seconds more, sampling memory (see --soak-on)")
    ap.add_argument("--soak-on", default="embedded,pg2", help="the backends soaked (default: %(default)s)")
    ap.add_argument("--backends", default="embedded,pg1,pg2")
    ap.add_argument("--out", default=str(OUT / "load.md"))
    args = ap.parse_args()
    backends = args.backends.split(",")
    primary, standby = os.environ.get("MICRORAG_TEST_PG", ""), os.environ.get("MICRORAG_TEST_PG_STANDBY", "")
    if any(b.startswith("pg") for b in backends) and not (primary and standby):
        ap.error("the pg backends need MICRORAG_TEST_PG and MICRORAG_TEST_PG_STANDBY "
                 "(run under: python scripts/pg_loopback.py run --standby -- ...)")
    questions = [r["question"] for r in json.loads((DATA / "hotpotqa_train.json").read_text())]
    work = Path(tempfile.mkdtemp(prefix="microrag-load-"))
    results: dict[str, dict] = {}
    try:
        corpus = work / "hotpotqa"
        corpus.mkdir()
        n_docs = write_corpus(corpus)
        pg_index = f"{primary}?schema=load_{os.getpid()}"
        made: dict[str, tuple[str, str]] = {}  # index -> (reader key, contributor key)
        for name in backends:
            if name == "embedded":
                index, stand, n = str(work / "ix"), None, 1
            else:
                index, stand, n = pg_index, f"{standby}?schema=load_{os.getpid()}", int(name[2:])
            if index not in made:  # pg1 and pg2 serve the same database
                t0 = time.monotonic()
                cli("ingest", str(corpus), "--index", index, "--no-screen", "-q", cwd=work)
                print(f"{name}: ingested {n_docs} documents in {time.monotonic() - t0:.0f} s", flush=True)
                made[index] = keys(index, work)
            reader, contributor = made[index]
            replicas = [Replica(index, work / f"{name}-{i}", stand) for i in range(n)]
            try:
                run = asyncio.run(drive([r.url for r in replicas], reader, contributor, questions, args.clients, args.seconds))
                results[name] = run
                print(name, json.dumps(run), flush=True)
                if args.soak and name in args.soak_on.split(","):
                    soak = asyncio.run(drive([r.url for r in replicas], reader, contributor, questions, args.clients,
                                             args.soak, replicas))
                    results[f"{name}-soak"] = soak
                    print(f"{name}-soak", json.dumps(soak), flush=True)
            finally:
                for r in replicas:
                    r.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write(results, args, n_docs)
    return 0


def write(results: dict[str, dict], args: argparse.Namespace, n_docs: int) -> None:
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    label = {"embedded": "embedded (SQLite), 1 server", "pg1": "PostgreSQL, 1 replica", "pg2": "PostgreSQL, 2 replicas"}
    lines = ["# Load and soak", "",
             f"Generated by `python scripts/pg_loopback.py run --standby -- python benchmarks/load.py --clients {args.clients} "
             f"--seconds {args.seconds:g} --soak {args.soak:g} --backends {args.backends} --soak-on {args.soak_on}` "
             f"on {time.strftime('%Y-%m-%d')}; "
             f"{machine()}. Load generator, servers and PostgreSQL (primary + hot standby) share this machine's cores.", "",
             f"{n_docs} HotpotQA-100 paragraphs; {args.clients} concurrent clients send `POST /search` (its 100 questions, "
             f"cycled; one request in ten asks about the document being re-uploaded) while a trusted contributor re-uploads "
             f"a 5-paragraph document every {UPLOAD_EVERY_S:g} s (screened, as in production).", "",
             "| backend | s | requests ok | errors | p50 ms | p99 ms | requests/s | mixed reads / checks | uploads |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        base = name.removesuffix("-soak")
        lines.append(f"| {label.get(base, base)}{' (soak)' if name.endswith('-soak') else ''} | {r['seconds']} | {r['ok']} | "
                     f"{r['errors']} | {r['p50_ms']} | {r['p99_ms']} | {r['per_s']} | {r['mixed_reads']} / "
                     f"{r['lighthouse_checks']} | {', '.join(f'{k} {v}' for k, v in r['uploads'].items())} |")
    if "pg1" in results and "pg2" in results and results["pg1"]["per_s"]:
        lines += ["", f"Throughput, 2 replicas over 1: **{results['pg2']['per_s'] / results['pg1']['per_s']:.2f}x**."]
    for name, r in results.items():
        if "rss" in r:
            rss = r["rss"]
            lines += ["", f"Memory over the soak ({label.get(name.removesuffix('-soak'))}, resident MB of the server "
                      f"processes together, every 10 s): first {rss['first_mb']}, last {rss['last_mb']}, max {rss['max_mb']}; "
                      f"least-squares slope over the second half: **{rss['slope_second_half_mb_per_min']} MB/min**.", "",
                      "Samples (minutes, MB): " + ", ".join(f"({a / 60:.1f}, {b})" for a, b in rss["samples"])]
        if r["error_kinds"]:
            lines += ["", f"Errors ({name}): " + "; ".join(r["error_kinds"])]
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())


if __name__ == "__main__":
    sys.exit(main())
