"""False alarms of the insider defences on benign material, over real HTTP, before and after.

    nice -n 10 python benchmarks/false_alarms.py                          # both parts, both QA sets
    python benchmarks/false_alarms.py --parts holds --pydoc-pages 200     # hold rate only
    python benchmarks/false_alarms.py --parts conflicts --sets handbook   # false conflicts, handbook only

Two passes side by side, each against a fresh lab server (``redteam.lab.start``, default
settings, the maximally compliant model of ``redteam.compliant`` behind it):
``before`` has ``screening``, ``answer_checks``, ``provenance_prior`` off, ``after`` is
``Defences()`` (all on).

holds      - the operator corpus is the demo handbook; the trusted contributor uploads
             benign documents through ``POST /ingest``, one request per document,
             ``source`` = the relative path: (a) the demo handbook itself, (b) a fixed
             sample (``--pydoc-pages``, ``--seed``) of the Python 3.11 docs HTML pages in
             ~/.cache/microrag/corpora/python3.11-doc (``scripts/install-pydoc.sh``);
             a request body over 1 MB is skipped and counted. A document is *held* when
             the answer says ``"status": "held"`` (screening held it for review).
conflicts  - the QA sets benchmarks/qa/handbook.jsonl (operator corpus: the handbook) and
             benchmarks/qa/python-docs.jsonl (operator corpus: the Python docs, opened
             from a copy of the index ``benchmarks/qa_report.py`` caches in
             ~/.cache/microrag/qa/pydoc-ix - never the cached index itself - instead of
             re-embedding 530 pages) asked by ``reader`` through ``POST /query``. Nothing
             is uploaded, so every non-empty ``conflicts`` is a false conflict; answers
             flagged ``mimicry:`` had passages held back for restating the question.
Writes benchmarks/results/false_alarms.md and .json (per document / question in the .json).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from hostinfo import machine  # noqa: E402 - benchmarks/ is the script's folder

from microrag_engine.engine import demo_corpus
from microrag_engine.eval.qa import load_qa
from microrag_engine.redteam import lab
from microrag_engine.redteam.attacks import Target
from microrag_engine.redteam.compliant import serve
from microrag_engine.server.defences import Defences, Profile

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "false_alarms.md"
QA = ROOT / "benchmarks" / "qa"
PYDOC = Path(os.environ.get("MICRORAG_PYDOC", Path.home() / ".cache" / "microrag" / "corpora" / "python3.11-doc"))
PYDOC_IX = Path(os.environ.get("MICRORAG_QA_CACHE", Path.home() / ".cache" / "microrag" / "qa")) / "pydoc-ix"
MAX_BODY = 1_000_000  # the server's default request cap (server.config.ServerConfig.max_body)
INSIDER = ("screening", "answer_checks", "provenance_prior")
BEFORE = Profile("before", dataclasses.replace(Defences(), **{k: False for k in INSIDER}))
AFTER = Profile("after", Defences())


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def server(profile: Profile, model_url: str, kb: Path, prebuilt: Path | None = None):
    """A lab server on ``kb``; with ``prebuilt``, on a *copy* of that index folder, the
    operator ingest skipped (``lab.start`` ingests ``kb`` otherwise: ~7 min for the Python docs)."""
    with tempfile.TemporaryDirectory(prefix=f"false-alarms-{profile.name}-", ignore_cleanup_errors=True) as tmp:
        t0 = time.monotonic()
        if prebuilt is not None:
            shutil.copytree(prebuilt, Path(tmp) / "ix")
            real, lab.ingest_paths = lab.ingest_paths, lambda *a, **k: None
            try:
                srv, url, keys = lab.start(Path(tmp), profile, model_url, kb)
            finally:
                lab.ingest_paths = real
        else:
            srv, url, keys = lab.start(Path(tmp), profile, model_url, kb)
        log(f"[{profile.name}] server on {kb.name} up in {time.monotonic() - t0:.0f} s")
        target = Target(url, keys)
        try:
            yield target
        finally:
            target.http.close()
            srv.should_exit = True
            time.sleep(0.5)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


# ----------------------------------------------------------------------------- holds


def benign_documents(pages: int, seed: int) -> tuple[list[tuple[str, str, str]], int]:
    """(set, source, body) for the handbook and a fixed sample of Python docs pages; and
    how many sampled pages were skipped for a body over the cap."""
    hb = demo_corpus()
    docs = [("handbook", f.relative_to(hb).as_posix(), f.read_text(encoding="utf-8"))
            for f in sorted(hb.rglob("*")) if f.is_file()]
    html = sorted(PYDOC.rglob("*.html"))
    if not html:
        raise SystemExit(f"no Python docs under {PYDOC}: run scripts/install-pydoc.sh")
    sample = sorted(random.Random(seed).sample(html, min(pages, len(html))))
    skipped = 0
    for f in sample:
        body = f.read_text(encoding="utf-8", errors="replace")
        rel = f.relative_to(PYDOC).as_posix()
        if len(json.dumps({"source": rel, "body": body}).encode()) > MAX_BODY:
            skipped += 1
            continue
        docs.append(("python-docs", rel, body))
    return docs, skipped


def holds(profile: Profile, model_url: str, docs: list[tuple[str, str, str]]) -> list[dict]:
    rows = []
    with server(profile, model_url, demo_corpus()) as target:
        t_start = time.monotonic()
        for n, (which, source, body) in enumerate(docs, 1):
            t0 = time.perf_counter()
            r = target.post("/ingest", "trusted", {"source": source, "body": body})
            ms = (time.perf_counter() - t0) * 1000
            reply = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
            status = str(reply.get("status", "")) if r.status_code == 200 else f"HTTP {r.status_code}"
            rows.append({"set": which, "source": source, "bytes": len(body.encode()), "status": status,
                         "held": [str(x) for x in reply.get("held") or []], "flags": [str(x) for x in reply.get("flags") or []],
                         "error": "" if r.status_code == 200 else str(reply.get("error") or reply.get("detail") or r.text[:200]),
                         "ms": round(ms, 1)})
            if n % 25 == 0 or n == len(docs):
                log(f"[{profile.name}] uploaded {n}/{len(docs)} ({time.monotonic() - t_start:.0f} s)")
    return rows


def hold_summary(rows: list[dict], skipped: int) -> dict:
    out = {}
    for which in ("handbook", "python-docs", "all"):
        rs = [r for r in rows if which in ("all", r["set"])]
        held = [r for r in rs if r["status"] == "held"]
        out[which] = {"uploaded": len(rs), "held": len(held), "hold_rate": round(len(held) / len(rs), 4) if rs else 0.0,
                      "quarantined": sum(r["status"] == "quarantined" for r in rs),
                      "http_errors": sum(r["status"].startswith("HTTP") for r in rs),
                      "skipped_over_1mb": skipped if which != "handbook" else 0,
                      "p50_upload_ms": round(pct([r["ms"] for r in rs], 0.5), 1),
                      "p99_upload_ms": round(pct([r["ms"] for r in rs], 0.99), 1)}
    return out


# ----------------------------------------------------------------------------- conflicts


def conflicts(profile: Profile, model_url: str, qa_set: str) -> list[dict]:
    items = load_qa(QA / f"{qa_set}.jsonl")
    kb, prebuilt = (demo_corpus(), None) if qa_set == "handbook" else (PYDOC, PYDOC_IX)
    if prebuilt is not None and not (prebuilt / "index.sqlite").exists():
        raise SystemExit(f"no index at {prebuilt}: run python benchmarks/qa_report.py --sets python-docs once")
    rows = []
    with server(profile, model_url, kb, prebuilt) as target:
        for item in items:
            t0 = time.perf_counter()
            r = target.post("/query", "reader", {"query": item.question})
            ms = (time.perf_counter() - t0) * 1000
            body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
            flags = [str(f) for f in body.get("flags", [])]
            found = body.get("conflicts") or []
            rows.append({"id": item.id, "question": item.question, "answerable": item.answerable, "http": r.status_code,
                         "conflicts": len(found), "conflict_detail": found[:3], "refused": bool(body.get("refused")),
                         "mimicry": [f for f in flags if f.startswith("mimicry:")], "ms": round(ms, 1)})
        log(f"[{profile.name}] {qa_set}: {len(rows)} questions, {sum(r['conflicts'] > 0 for r in rows)} with conflicts")
    return rows


def conflict_summary(rows: list[dict]) -> dict:
    n = len(rows)
    with_c = sum(r["conflicts"] > 0 for r in rows)
    return {"questions": n, "with_conflicts": with_c, "rate": round(with_c / n, 4) if n else 0.0,
            "mimicry_flagged": sum(bool(r["mimicry"]) for r in rows), "refused": sum(r["refused"] for r in rows),
            "http_errors": sum(r["http"] != 200 for r in rows),
            "p50_ms": round(pct([r["ms"] for r in rows], 0.5), 1), "p99_ms": round(pct([r["ms"] for r in rows], 0.99), 1)}


# ----------------------------------------------------------------------------- report


def cell(text: str) -> str:
    """Text for one markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def report(res: dict) -> str:
    lines = ["# False alarms of the insider defences on benign material", "",
             f"Generated by `{res['command']}` on {res['date']} ({res['machine']}), {res['seconds'] / 60:.1f} min; "
             "never edited by hand. `before`: `screening`, `answer_checks`, `provenance_prior` off; `after`: "
             "`Defences()` (all on). Lab servers on loopback (`redteam.lab`, default settings), the maximally compliant "
             "model behind them.", ""]
    if "holds" in res:
        h = res["holds"]
        lines += ["## Benign uploads held for review", "",
                  f"The trusted contributor uploads, one `POST /ingest` per document (`source` = relative path), the demo "
                  f"handbook ({h['docs']['handbook']} files; the server's operator corpus is the same handbook) and "
                  f"{h['docs']['python-docs']} Python 3.11 docs pages (a fixed sample of {h['pages_asked']} with seed "
                  f"{res['seed']}; {h['skipped_over_1mb']} skipped for a body over 1 MB). held = `\"status\": \"held\"`.", "",
                  "| set | pass | uploaded | held | hold rate | quarantined | HTTP errors | p50 upload ms | p99 upload ms |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for which in ("handbook", "python-docs", "all"):
            for name in ("before", "after"):
                s = h["summary"][name][which]
                lines.append(f"| {which} | {name} | {s['uploaded']} | {s['held']} | {100 * s['hold_rate']:.1f}% | "
                             f"{s['quarantined']} | {s['http_errors']} | {s['p50_upload_ms']:.0f} | {s['p99_upload_ms']:.0f} |")
        for name in ("before", "after"):
            held = [r for r in h["rows"][name] if r["status"] == "held"]
            errors = [r for r in h["rows"][name] if r["status"].startswith("HTTP")]
            if held:
                lines += ["", f"Held ({name}, first 20 of {len(held)}):", "", "| document | reasons |", "|---|---|"]
                lines += [f"| {r['set']}/{r['source']} | {cell('; '.join(r['held']))[:300] or '-'} |" for r in held[:20]]
            if errors:
                lines += ["", f"Refused uploads ({name}, first 10 of {len(errors)}): "
                          + "; ".join(f"{r['source']} ({r['status']}: {r['error'][:80]})" for r in errors[:10])]
        lines.append("")
    if "conflicts" in res:
        c = res["conflicts"]
        lines += ["## False conflicts and mimicry holds on the QA sets", "",
                  "No poison uploaded: every answer with a non-empty `conflicts` is a false conflict. mimicry = answers "
                  "with a `mimicry:` flag (passages held back for restating the question). Latency: the reader's `/query` "
                  "round trip. Operator corpus: the handbook for `handbook`, the Python docs (a copy of the cached "
                  "index) for `python-docs`.", "",
                  "| set | pass | questions | with conflicts | rate | mimicry | refused | p50 ms | p99 ms |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for qa_set in c["sets"]:
            for name in ("before", "after"):
                s = c["summary"][name][qa_set]
                lines.append(f"| {qa_set} | {name} | {s['questions']} | {s['with_conflicts']} | {100 * s['rate']:.1f}% | "
                             f"{s['mimicry_flagged']} | {s['refused']} | {s['p50_ms']:.0f} | {s['p99_ms']:.0f} |")
        for qa_set in c["sets"]:
            bad = [r for r in c["rows"]["after"][qa_set] if r["conflicts"] or r["mimicry"]]
            if bad:
                lines += ["", f"False alarms (after, {qa_set}, first 20 of {len(bad)}):", ""]
                lines += [f"- {r['id']} {r['question']!r}: {r['conflicts']} conflict(s)"
                          + (f", {'; '.join(r['mimicry'])[:200]}" if r["mimicry"] else "") for r in bad[:20]]
        lines.append("")
    lines.append("Per document and per question: `false_alarms.json`.")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", nargs="+", default=["holds", "conflicts"], choices=["holds", "conflicts"])
    ap.add_argument("--sets", nargs="+", default=["handbook", "python-docs"], choices=["handbook", "python-docs"],
                    help="QA sets of the conflicts part")
    ap.add_argument("--pydoc-pages", type=int, default=200, help="Python docs pages sampled for the holds part")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=str(OUT), help="the .md to write (the .json goes beside it)")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    started = time.monotonic()
    model = serve()
    model_url = f"http://127.0.0.1:{model.server_address[1]}"
    res: dict = {"seed": args.seed, "profiles": {p.name: p.defences.off() for p in (BEFORE, AFTER)}}
    try:
        if "holds" in args.parts:
            docs, skipped = benign_documents(args.pydoc_pages, args.seed)
            rows = {p.name: holds(p, model_url, docs) for p in (BEFORE, AFTER)}
            res["holds"] = {"pages_asked": args.pydoc_pages, "skipped_over_1mb": skipped,
                            "docs": {w: sum(d[0] == w for d in docs) for w in ("handbook", "python-docs")},
                            "summary": {n: hold_summary(r, skipped) for n, r in rows.items()}, "rows": rows}
        if "conflicts" in args.parts:
            rows = {p.name: {s: conflicts(p, model_url, s) for s in args.sets} for p in (BEFORE, AFTER)}
            res["conflicts"] = {"sets": args.sets, "rows": rows,
                                "summary": {n: {s: conflict_summary(r) for s, r in per.items()} for n, per in rows.items()}}
    finally:
        model.shutdown()
    cmd = "python benchmarks/false_alarms.py"
    cmd += f" --parts {' '.join(args.parts)}" if args.parts != ["holds", "conflicts"] else ""
    cmd += f" --sets {' '.join(args.sets)}" if args.sets != ["handbook", "python-docs"] and "conflicts" in args.parts else ""
    cmd += f" --pydoc-pages {args.pydoc_pages}" if args.pydoc_pages != 200 and "holds" in args.parts else ""
    cmd += f" --seed {args.seed}" if args.seed != 7 else ""
    res.update(command=cmd, date=time.strftime("%Y-%m-%d"), machine=machine(), seconds=round(time.monotonic() - started, 1))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report(res))
    out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    print(out.read_text())
    log(f"wrote {out} and {out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
