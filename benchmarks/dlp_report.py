"""DLP benchmark: recall on a planted-secrets corpus and on the red-team lab corpus, false findings
on public documentation, and what DLP costs at ingest. Writes ``benchmarks/results/dlp.md`` and
``benchmarks/results/dlp.json``.

    python benchmarks/dlp_report.py [--planted DIR] [--no-cost] [--quick]

* Planted corpus (benchmarks/dlp/make_planted.py; generated into DIR when absent): every document
  goes through ``ingest.apply_dlp(Document(path, text), "redact")``. A planted value is caught when
  its NFKC form no longer occurs in the redacted text and, for a multi-line or long value, neither
  does any of its probes (the key body's lines; segments of the value).
  Findings are mapped back through the redacted output, not through ``Finding`` spans (those refer
  to the detector's internal text, which is not always ``guard.canonical(text)``): each
  ``[REDACTED:kind]`` is placed in the NFKC/stored form of the text between the literal text left
  and right of it (``align``). A finding is true when its span overlaps a planted value,
  "incidental" when it overlaps only a name/address/date of birth/role mailbox/id that is neither
  planted nor a negative, false otherwise. A hard negative is falsely flagged when a finding
  overlaps one of its occurrences outside planted values, or fewer intact copies are left.
* lab-kb (../shared/fixtures/lab-kb): the backticked EXAMPLE-... tokens and the e-mail addresses,
  listed below, on the file text and on the text the loader makes of it.
* Negatives: the Python 3.11 HTML docs (``load.load_documents``, chunked with ``chunk.chunk_documents``
  and the default Settings, token counter ``text.approx_tokens``) and ~150 public Markdown files
  found on this machine: findings per 1,000 chunks by kind, each finding judged genuine (an e-mail
  address, a documented example credential) or false by the rules in ``judge`` below.
* Cost: ``microrag ingest`` of 155 Python-doc pages with ``--dlp off`` and ``--dlp redact``, twice
  each, wall time and peak RSS from ``/usr/bin/time -v``.

Planted values are synthetic but format-valid (GitHub tokens carry a correct CRC32, cards pass Luhn):
the report and JSON show them masked, so that secret scanners do not fire on the results.
The output is deterministic except for timings and the date.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import dataclasses
import json
import logging
import multiprocessing
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path

from microrag_engine import guard
from microrag_engine.chunk import chunk_documents
from microrag_engine.config import Settings
from microrag_engine.ingest import apply_dlp
from microrag_engine.load import load_documents
from microrag_engine.types import Document

ROOT = Path(__file__).resolve().parents[1]


def portable(text: str) -> str:
    """Paths as any machine reads them: relative to the repository, or under ~."""
    return text.replace(str(ROOT) + "/", "").replace(str(Path.home()), "~")
RESULTS = ROOT / "benchmarks" / "results"
GENERATOR = ROOT / "benchmarks" / "dlp" / "make_planted.py"
DEFAULT_PLANTED = Path.home() / ".cache" / "microrag" / "dlp-planted-v1"
PYDOC = Path.home() / ".cache" / "microrag" / "corpora" / "python3.11-doc"
LAB_KB = ROOT.parent / "shared" / "fixtures" / "lab-kb"
MICRORAG = ROOT / ".venv" / "bin" / "microrag"

GOALS = {
    "false_per_1k_chunks": 1.0,  # on each negative corpus
    "planted_recall": 0.99,
    "lab_kb_recall": 1.0,
    "dlp_time_overhead": 0.25,
    "peak_rss_bytes": 1 << 30,
}

# The lab corpus's secrets, read off the files: (file, kind, value).
LAB_VALUES = [
    ("contact_list.md", "email", "maria.chen@megacorpai.com"),
    ("contact_list.md", "email", "james.park@megacorpai.com"),
    ("contact_list.md", "email", "sarah.kim@megacorpai.com"),
    ("contact_list.md", "email", "tom.davis@megacorpai.com"),
    ("contact_list.md", "email", "lisa.wong@megacorpai.com"),
    ("contact_list.md", "email", "emma.wilson@megacorpai.com"),
    ("contact_list.md", "email", "alex.rivera@megacorpai.com"),
    ("contact_list.md", "email", "helpdesk@megacorpai.com"),
    ("it_inventory.md", "password", "EXAMPLE-svc-backup-pw"),
    ("it_inventory.md", "password", "EXAMPLE-svc-monitor-pw"),
    ("it_inventory.md", "password", "EXAMPLE-svc-pipeline-pw"),
    ("it_inventory.md", "api key", "EXAMPLE-stripe-key-000"),
    ("it_inventory.md", "api key", "EXAMPLE-sendgrid-key-000"),
    ("it_inventory.md", "api key", "EXAMPLE-aws-key-000"),
    ("it_inventory.md", "password", "EXAMPLE-default-onboarding-pw"),
    ("network_help.md", "password", "EXAMPLE-default-onboarding-pw"),
]

# Flagged strings in the public negatives that are real credential shapes in documented examples: a DLP cannot
# tell them from real ones, so they are judged genuine, not false alarms. Read off the flagged samples.
EXAMPLE_CREDENTIALS = {
    "kadidd!ehopper": "password in urllib's HTTPBasicAuthHandler example",
    "joe:password@example.com": "user:password in a URL (urllib HOWTO)",
    "joe:password@python.org": "user:password in a URL (urllib.request docs)",
    "Drmhze6EPcv0fN_81Bj-nA": "output of secrets.token_urlsafe in the secrets docs",
    "G9GtHFE1YluXY1zWPlYk1e/nWfu0WSEb0KRcjhDeP/o=": "example key in the hashlib docs",
    "Rm5EPJai72qcK3RGBpW3vPNfZy5OZothY+kHY6h21KM=": "example key in the hashlib docs",
    "rbPb15S/Z9t+agffno5wuhB77VbRi6F9Iv2qIxU7WHw=": "example key in the hashlib docs",
    "SuperSecretToken": "token value in undici's mocking example",
    "deadbeef": "token in libnpmorg's example",
    "deadbeefcafebad": "token in arborist's config example",
    "blahblahblah": "token in arborist's config example",
    "myregistrytoken": "token in libnpmteam's example",
    "i-am-the-worst": "token in libnpmpublish's example",
    "bm90IG15IHJlYWwgcGFzc3dvcmQ=": "base64 password in arborist's config example",
    "aXNhYWNzOm5vdCBteSByZWFsIHBhc3N3b3Jk": "base64 user:password in arborist's config example",
    "he//o": "password in pip's authentication docs",
    "he%2F%2Fo": "percent-encoded password in an index URL, pip's authentication docs",
    "jwt_abc123": "token value in playwright's storage-state example",
    "0123456789abcdef@pypi.company.com": "token in an index URL, pip docs (reported as e-mail)",
    "he%2F%2Fo@pypi.company.com": "password in an index URL, pip docs (reported as e-mail)",
    "password@pypi.company.com": "password in an index URL, pip docs (reported as e-mail)",
}
_NANP = re.compile(r"^\(?\d{3}\)?[ .-]\d{3}[ .-]\d{4}$")

_EMAIL = re.compile(r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}$")


def nfkc(s: str) -> str:
    return unicodedata.normalize("NFKC", s)


def mask(value: str) -> str:
    """Enough to recognise the shape, not enough to trip a secret scanner."""
    v = value.replace("\n", " ")
    return f"{v[:4] if len(v) >= 16 else v[:2]}… ({len(value)} chars)"


def oneline(s: str) -> str:
    return s.replace("\n", "⏎").replace("|", "\\|").replace("`", "ˋ")


# ----------------------------------------------------------------------------- mapping findings

_PLACEHOLDER = re.compile(r"\[REDACTED:([^\]]+)\]")


def bases(text: str) -> list[str]:
    """Texts the redacted output may have been cut from: the stored form, the canonical form, NFKC, raw."""
    out = []
    for name in ("visible", "canonical"):
        fn = getattr(guard, name, None)
        if fn is not None:
            try:
                out.append(fn(text))
            except Exception:  # noqa: BLE001 - a changed helper must not stop the benchmark
                pass
    out += [nfkc(text), text]
    return list(dict.fromkeys(out))


def _span_of(base: str, cursor: int, left: str, right: str, last: bool) -> tuple[int, int] | None:
    """Where the text between the literal ``left`` (found at/after ``cursor``) and ``right`` sits in ``base``."""
    if base.startswith(left, cursor):
        s = cursor + len(left)
    else:
        s = -1
        for n in (40, 16, 6):
            a = left[-n:]
            i = base.find(a, cursor) if a else cursor
            if i >= 0:
                s = i + len(a)
                break
        if s < 0:
            return None
    if last:
        e = len(base) - len(right)
        return (s, e) if e > s and base.endswith(right) else None
    for n in (40, 16, 6, 1):
        b = right[:n]
        if not b:
            return None
        j = base.find(b, s + 1)
        if j >= 0:
            return s, j
    return None


def align(text: str, redacted: str) -> tuple[str, list[dict]]:
    """(base text, findings) recovered from the redacted output: each ``[REDACTED:kind]`` becomes a span of the base
    text found between the literal text around it. Adjacent placeholders share one span (the boundary is unknown);
    a span that cannot be placed has start None."""
    parts = _PLACEHOLDER.split(redacted)
    lits, kinds = parts[0::2], parts[1::2]
    best: tuple[int, str, list[dict]] | None = None
    for base in bases(text):
        found, cursor, k = [], 0, 0
        while k < len(kinds):
            group = [kinds[k]]
            while k + len(group) < len(kinds) and lits[k + len(group)] == "":
                group.append(kinds[k + len(group)])
            left, right = lits[k], lits[k + len(group)]
            sp = _span_of(base, cursor, left, right, last=k + len(group) == len(kinds))
            for kind in group:
                found.append({"kind": kind, "start": sp[0] if sp else None, "end": sp[1] if sp else None, "shared": len(group) > 1})
            if sp:
                cursor = sp[1]
            k += len(group)
        placed = sum(f["start"] is not None for f in found)
        if best is None or placed > best[0]:
            best = (placed, base, found)
        if placed == len(found):
            break
    assert best is not None
    return best[1], best[2]


def red_context(redacted: str, nth: int, width: int = 40) -> str:
    m = list(_PLACEHOLDER.finditer(redacted))[nth]
    return oneline(f"{redacted[max(0, m.start() - width) : m.start()]}⟦{m.group(0)}⟧{redacted[m.end() : m.end() + width]}")


def occurrences(hay: str, needle: str) -> list[tuple[int, int]]:
    out, i = [], hay.find(needle)
    while needle and i >= 0:
        out.append((i, i + len(needle)))
        i = hay.find(needle, i + 1)
    return out


class Spans:
    """Sorted, merged intervals with an overlap test."""

    def __init__(self, spans):
        merged: list[list[int]] = []
        for s, e in sorted(spans):
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        self.starts = [m[0] for m in merged]
        self.spans = merged

    def overlaps(self, s: int, e: int) -> bool:
        i = bisect.bisect_right(self.starts, e - 1) - 1
        return i >= 0 and self.spans[i][1] > s


# ----------------------------------------------------------------------------- planted corpus


def ensure_planted(path: Path) -> dict:
    """The manifest of the corpus in ``path``, generated (again) when absent or made by another generator version."""
    version = int(re.search(r"^VERSION = (\d+)", GENERATOR.read_text(), re.M).group(1))
    manifest = path / "manifest.json"
    if not manifest.exists() or json.loads(manifest.read_text(encoding="utf-8")).get("version") != version:
        subprocess.run([sys.executable, str(GENERATOR), str(path)], check=True)
    return json.loads(manifest.read_text(encoding="utf-8"))


def run_planted(path: Path) -> dict:
    m = ensure_planted(path)
    by_doc: dict[str, dict[str, list]] = defaultdict(lambda: {"planted": [], "negatives": [], "incidental": []})
    for key in ("planted", "negatives", "incidental"):
        for e in m[key]:
            by_doc[e["doc"]][key].append(e)
    results, neg_results, findings_rows, unmapped = [], [], [], 0
    t0 = time.perf_counter()
    for doc in sorted(by_doc):
        text = (path / doc).read_text(encoding="utf-8")
        out, _restricted, _counts = apply_dlp(Document(path=doc, text=text), "redact")
        red = out.text
        redn = nfkc(red)  # values are compared NFKC to NFKC: the stored form need not be NFKC (NBSP survives guard.visible)
        base, found = align(text, red)
        lab = by_doc[doc]
        for p in lab["planted"]:
            v = nfkc(p["value"])
            probes = [nfkc(x) for x in p["probes"]]
            if not probes and len(v) >= 120:
                probes = [v[:24], v[len(v) // 2 : len(v) // 2 + 24], v[-24:]]
            gone = v not in redn
            survivors = [x for x in probes if x in redn]
            results.append(
                {
                    "id": p["id"],
                    "doc": doc,
                    "type": p["type"],
                    "family": p["family"],
                    "note": p["note"],
                    "caught": gone and not survivors,
                    "partial": gone and bool(survivors),
                    "masked": mask(p["value"]),
                    "context": masked_context(text, lab["planted"], p),
                }
            )
        planted_spans = Spans(
            [sp for p in lab["planted"] for x in [p["value"], *p["probes"]] for y in {x, nfkc(x)} for sp in occurrences(base, y)]
        )
        incidental = Spans([sp for i in lab["incidental"] for y in {i["value"], nfkc(i["value"])} for sp in occurrences(base, y)])
        placed = [f for f in found if f["start"] is not None]
        neg_spans = []
        for n in lab["negatives"]:
            v = nfkc(n["value"])
            occ = [sp for sp in occurrences(base, v) if not planted_spans.overlaps(*sp)]
            neg_spans.append((n, occ))
            hit = any(f["start"] < e and s < f["end"] for s, e in occ for f in placed)
            # a negative also counts as damaged when fewer intact copies are left than there were outside planted values
            damaged = redn.count(v) < len(occ)
            neg_results.append({"doc": doc, "type": n["type"], "value": n["value"], "flagged": hit or damaged})
        for nth, f in enumerate(found):
            if f["start"] is None:
                unmapped += 1
                findings_rows.append(
                    {"doc": doc, "kind": f["kind"], "verdict": "unmapped", "negative": "", "text": "", "context": red_context(red, nth)}
                )
                continue
            if planted_spans.overlaps(f["start"], f["end"]):
                verdict = "true"
            elif incidental.overlaps(f["start"], f["end"]):
                verdict = "incidental"
            else:
                verdict = "false"
            negs = sorted({n["type"] for n, occ in neg_spans for s, e in occ if f["start"] < e and s < f["end"]})
            findings_rows.append(
                {
                    "doc": doc,
                    "kind": f["kind"],
                    "verdict": verdict,
                    "negative": ",".join(negs),
                    "text": base[f["start"] : f["end"]] if verdict != "true" else "",
                    "context": context(base, f["start"], f["end"]) if verdict != "true" else "",
                }
            )
    return {
        "manifest": {k: m[k] for k in ("generator", "version", "seed", "documents")},
        "families": m["families"],
        "values": results,
        "negatives": neg_results,
        "findings": findings_rows,
        "unmapped_findings": unmapped,
        "seconds": time.perf_counter() - t0,
    }


def masked_context(text: str, planted: list[dict], target: dict, width: int = 36) -> str:
    """The value's surroundings with every planted value replaced by «type»."""
    first = {}
    for p in planted:
        first.setdefault(p["value"], p["id"])
    t = text
    for value, pid in sorted(first.items(), key=lambda kv: -len(kv[0])):
        t = t.replace(value, f"\x00{pid}\x01")
    marker = f"\x00{first[target['value']]}\x01"
    i = t.find(marker)
    if i < 0:
        return ""
    left, right = t[max(0, i - width) : i], t[i + len(marker) :][:width]
    types = {p["id"]: p["type"] for p in planted}

    def unmark(s: str) -> str:
        return re.sub("\x00(\\d+)\x01", lambda mm: f"«{types[int(mm.group(1))]}»", s).split("\x00")[0].split("\x01")[-1]

    return oneline(f"{unmark(left)}«{target['type']}»{unmark(right)}")


def context(canon: str, s: int, e: int, width: int = 40) -> str:
    flagged = canon[s:e] if e - s <= 100 else f"{canon[s : s + 60]}…{canon[e - 20 : e]}"
    return oneline(f"{canon[max(0, s - width) : s]}⟦{flagged}⟧{canon[e : e + width]}")


# ----------------------------------------------------------------------------- lab-kb


def run_lab(kb: Path) -> dict:
    rows, other = [], []
    for name in sorted({f for f, _, _ in LAB_VALUES} | {p.name for p in kb.glob("*.md")}):
        path = kb / name
        raw = path.read_text(encoding="utf-8")
        loaded = load_documents([path])[0]
        red_raw = apply_dlp(Document(path=name, text=raw), "redact")[0].text
        red_loaded = apply_dlp(dataclasses.replace(loaded, path=name), "redact")[0].text
        values = [(k, v) for f, k, v in LAB_VALUES if f == name]
        for k, v in values:
            rows.append(
                {
                    "file": name,
                    "kind": k,
                    "value": v,
                    "caught_raw": v not in nfkc(red_raw),
                    "in_loaded": v in nfkc(loaded.text),
                    "caught_loaded": v in nfkc(loaded.text) and v not in nfkc(red_loaded),
                }
            )
        base, found = align(raw, red_raw)
        for nth, f in enumerate(found):
            if f["start"] is None:
                other.append({"file": name, "kind": f["kind"], "text": "?", "context": red_context(red_raw, nth)})
                continue
            flagged = base[f["start"] : f["end"]]
            if not any(flagged in v or v in flagged for _, v in values):
                other.append({"file": name, "kind": f["kind"], "text": flagged, "context": context(base, f["start"], f["end"])})
    return {"values": rows, "other_findings": other}


# ----------------------------------------------------------------------------- negatives


def judge(kind: str, flagged: str, ctx: str) -> str:
    """'genuine: why' or 'false'. Rules written after reading every flagged string of the full negative corpora;
    anything they do not cover counts as false."""
    s = flagged.strip().strip("'\"`")
    before = ctx.split("⟦", 1)[0]
    after = ctx.split("⟧", 1)[-1]
    if s in EXAMPLE_CREDENTIALS:
        return "genuine: example credential"
    if _EMAIL.match(s):
        if before.endswith("://") or (s.startswith("git@") and after.startswith(":")):
            return "false"  # user@host of a git/ssh/https URL, not an e-mail address
        if re.fullmatch(r"[0-9A-Fa-f]{8,}\.[0-9A-Za-z]+", s.split("@")[0]):
            return "false"  # a Message-ID
        return "genuine: e-mail address"
    if kind == "phone" and _NANP.match(s):
        return "genuine: phone number format (example data)"
    return "false"


def _scan_file(job: tuple[Path, Path | None]) -> tuple[list[Document], list[dict]]:
    """Load one file as ingest does and scan it with apply_dlp (runs in a worker process)."""
    path, root = job
    logging.disable(logging.WARNING)
    try:
        loaded = load_documents([path])
    except Exception:  # noqa: BLE001 - an unreadable file is skipped
        return [], []
    rel = str(path.relative_to(root)) if root else str(path)
    docs = [dataclasses.replace(d, path=rel) for d in loaded]
    rows = []
    for d in docs:
        red = apply_dlp(d, "redact")[0].text
        base, found = align(d.text, red)
        for nth, f in enumerate(found):
            if f["start"] is None:  # placed nowhere: shown with the redacted output's context, counted false
                rows.append({"doc": d.path, "kind": f["kind"], "text": "?", "context": red_context(red, nth), "verdict": "false"})
                continue
            flagged = base[f["start"] : f["end"]]
            ctx = context(base, f["start"], f["end"])
            rows.append({"doc": d.path, "kind": f["kind"], "text": flagged, "context": ctx, "verdict": judge(f["kind"], flagged, ctx)})
    return docs, rows


def scan_files(paths: list[Path], root: Path | None, jobs: int) -> dict:
    """Load + apply_dlp every file (``jobs`` processes, results in input order), chunk as the product does."""
    t0 = time.perf_counter()
    if jobs > 1:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            results = pool.map(_scan_file, [(p, root) for p in paths], chunksize=2)
    else:
        results = [_scan_file((p, root)) for p in paths]
    docs = [d for ds, _ in results for d in ds]
    rows = [r for _, rs in results for r in rs]
    s = Settings()
    chunks = chunk_documents(docs, s.chunker, s.size, s.overlap, s.max_tokens)
    return {
        "documents": len(docs),
        "chunks": len(chunks),
        "characters": sum(len(d.text) for d in docs),
        "findings": rows,
        "seconds": time.perf_counter() - t0,
        "jobs": jobs,
    }


def evenly(items: list, k: int) -> list:
    if len(items) <= k:
        return list(items)
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)] if k > 1 else items[:1]


def pydoc_pages(limit: int | None) -> list[Path]:
    if not PYDOC.exists():
        subprocess.run(["bash", str(ROOT / "scripts" / "install-pydoc.sh")], check=True, cwd=ROOT)
    pages = sorted(p for p in PYDOC.rglob("*.html") if p.is_file())
    return evenly(pages, limit) if limit else pages


def md_project(p: str) -> str:
    for pat in (
        r"site-packages/([^/]+)/",
        r"node_modules/npm/node_modules/((?:@[^/]+/)?[^/]+)/",
        r"/usr/share/doc/([^/]+)/",
        r"node_modules/((?:@[^/]+/)?[^/]+)/",
    ):
        m = re.search(pat, p)
        if m:
            return re.sub(r"-[\d.]+\.dist-info$", "", m.group(1))
    return str(Path(p).parent)


def markdown_sample(total: int = 150, per_project: int = 30) -> list[Path]:
    roots = [
        Path("/usr/share/doc"),
        *sorted(Path("/usr/lib").glob("python3*")),
        ROOT / ".venv" / "lib",
        Path("/usr/lib/node_modules"),
        Path("/usr/local/lib/node_modules"),
        Path("/usr/local/lib"),
    ]
    found: set[str] = set()
    for r in roots:
        if not r.exists():
            continue
        for dirpath, _dirs, files in os.walk(r):
            for f in files:
                p = os.path.join(dirpath, f)
                if f.endswith(".md") and os.path.isfile(p) and not os.path.islink(p) and os.path.getsize(p) > 2048:
                    found.add(os.path.realpath(p))
    by_proj: dict[str, list[str]] = defaultdict(list)
    for p in sorted(found):
        if p.startswith(str(ROOT) + os.sep) and not p.startswith(str(ROOT / ".venv") + os.sep):
            continue  # the repository's own docs are not public negatives
        by_proj[md_project(p)].append(p)
    picked = sorted(p for ps in by_proj.values() for p in evenly(ps, per_project))
    return [Path(p) for p in evenly(picked, total)]


def summarize_negatives(res: dict, sample: int = 40) -> dict:
    rows = res["findings"]
    n = res["chunks"] or 1
    by_kind = Counter(r["kind"] for r in rows)
    false_by_kind = Counter(r["kind"] for r in rows if r["verdict"] == "false")
    top = {}
    for k in sorted(by_kind):
        top[k] = Counter(r["text"] for r in rows if r["kind"] == k and r["verdict"] == "false").most_common(8)
    # the sample: round-robin over kinds, false alarms first, evenly spread over the corpus
    per_kind = {
        k: evenly(sorted([r for r in rows if r["kind"] == k], key=lambda r: (r["verdict"] != "false", r["doc"], r["context"])), sample)
        for k in sorted(by_kind)
    }
    picked: list[dict] = []
    while len(picked) < sample and any(per_kind.values()):
        for k in sorted(per_kind):
            if per_kind[k] and len(picked) < sample:
                picked.append(per_kind[k].pop(0))
    return {
        "documents": res["documents"],
        "chunks": res["chunks"],
        "characters": res["characters"],
        "findings": len(rows),
        "false": sum(false_by_kind.values()),
        "per_1k": len(rows) / n * 1000,
        "false_per_1k": sum(false_by_kind.values()) / n * 1000,
        "by_kind": dict(sorted(by_kind.items())),
        "false_by_kind": dict(sorted(false_by_kind.items())),
        "genuine": dict(sorted(Counter(r["verdict"].removeprefix("genuine: ") for r in rows if r["verdict"] != "false").items())),
        "top_false": top,
        "sample": picked,
        "seconds": res["seconds"],
        "jobs": res["jobs"],
    }


# ----------------------------------------------------------------------------- cost


def run_group(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own process group; if this script stops (error, Ctrl-C, SIGTERM), the whole group goes too."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def cost(pages: list[Path], reps: int = 2) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="dlp-cost-"))
    corpus = tmp / "corpus"
    for p in pages:
        dst = corpus / p.relative_to(PYDOC)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, dst)
    runs = []
    timer = shutil.which("time") or "/usr/bin/time"
    use_time = os.path.exists("/usr/bin/time")
    try:
        for rep in range(reps):
            for mode in ("off", "redact"):
                idx = tmp / f"index-{mode}-{rep}"
                cmd = [str(MICRORAG), "ingest", str(corpus), "--index", str(idx), "--dlp", mode, "-q", "--json"]
                t0 = time.perf_counter()
                if use_time:
                    proc = run_group(["/usr/bin/time", "-v", *cmd])
                    wall = time.perf_counter() - t0
                    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1)) * 1024
                else:  # a fresh child per run: RUSAGE_CHILDREN's max is this run's
                    code = (
                        "import resource,subprocess,sys;subprocess.run(sys.argv[1:]);"
                        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
                    )
                    proc = run_group([sys.executable, "-c", code, *cmd])
                    wall = time.perf_counter() - t0
                    rss = int(proc.stdout.strip().splitlines()[-1]) * 1024
                if proc.returncode != 0:
                    raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr[-2000:]}")
                out = proc.stdout[: proc.stdout.rfind("}") + 1]
                info = json.loads(out) if out.strip().startswith("{") else {}
                runs.append(
                    {
                        "mode": mode,
                        "rep": rep + 1,
                        "wall_s": wall,
                        "peak_rss": rss,
                        "chunks": info.get("chunks_written"),
                        "docs_with_findings": len(info.get("findings", {})),
                    }
                )
                shutil.rmtree(idx, ignore_errors=True)
        # DLP's own share, free of run-to-run noise: apply_dlp over the same pages, in this process
        docs = load_documents([corpus])
        t0 = time.perf_counter()
        for d in docs:
            apply_dlp(d, "redact")
        dlp_s = time.perf_counter() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    mean = {m: sum(r["wall_s"] for r in runs if r["mode"] == m) / reps for m in ("off", "redact")}
    spread = {m: (max(ws) - min(ws)) / mean[m] for m in mean for ws in [[r["wall_s"] for r in runs if r["mode"] == m]]}
    return {
        "pages": [str(p.relative_to(PYDOC)) for p in pages],
        "runs": runs,
        "timer": timer if use_time else "getrusage",
        "mean_wall": mean,
        "overhead": mean["redact"] / mean["off"] - 1,
        "spread": spread,
        "dlp_seconds": dlp_s,
        "dlp_share": dlp_s / mean["off"],
        "peak_rss": max(r["peak_rss"] for r in runs),
    }


# ----------------------------------------------------------------------------- report


def pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f}%" if b else "-"


def ok(flag: bool) -> str:
    return "**met**" if flag else "**not met**"


def machine() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), platform.processor())
    except OSError:
        model = platform.processor()
    return f"{model}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def git_rev() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
        return rev + (" (src/ has uncommitted changes)" if dirty else "")
    except OSError:
        return "?"


def write_report(args, planted: dict, lab: dict, negs: dict, cost_res: dict | None) -> None:
    vals = planted["values"]
    n_caught = sum(v["caught"] for v in vals)
    recall = n_caught / len(vals)
    lab_raw = sum(r["caught_raw"] for r in lab["values"]) / len(lab["values"])
    lab_loaded = sum(r["caught_loaded"] for r in lab["values"]) / max(1, sum(r["in_loaded"] for r in lab["values"]))
    cmd = "python benchmarks/dlp_report.py" + "".join(f" {a}" for a in sys.argv[1:])
    L = [
        f"# DLP benchmark{' (quick)' if args.quick else ''}",
        "",
        f"`{cmd}` - {time.strftime('%Y-%m-%d')}, {machine()}, commit {git_rev()}.",
        "",
        "Produced by `benchmarks/dlp_report.py` (method in its docstring); the planted corpus comes from "
        f"`benchmarks/dlp/make_planted.py` (seed {planted['manifest']['seed']}, {planted['manifest']['documents']} documents, "
        f"{len(vals)} planted values, {len(planted['negatives'])} hard negatives), generated into `{args.planted}` - outside the "
        "repository, as its values are format-valid. Values below are masked.",
        "",
        "## Goals",
        "",
        "| goal | measured | |",
        "|---|---|---|",
        f"| >= 99% of planted values caught | {pct(n_caught, len(vals))} ({n_caught}/{len(vals)}) | "
        f"{ok(recall >= GOALS['planted_recall'])} |",
        f"| 100% of lab-kb's values caught | file text {100 * lab_raw:.0f}%, loaded text {100 * lab_loaded:.0f}% | "
        f"{ok(min(lab_raw, lab_loaded) >= GOALS['lab_kb_recall'])} |",
    ]
    for name, s in negs.items():
        L.append(
            f"| <= 1 false finding per 1,000 chunks: {name} | {s['false_per_1k']:.2f} ({s['false']} false of {s['findings']} findings, "
            f"{s['chunks']} chunks) | {ok(s['false_per_1k'] <= GOALS['false_per_1k_chunks'])} |"
        )
    if cost_res:
        L.append(
            f"| DLP adds <= 25% to ingest time | wall time {100 * cost_res['overhead']:+.0f}% (run-to-run spread up to "
            f"{100 * max(cost_res['spread'].values()):.0f}%); apply_dlp alone {100 * cost_res['dlp_share']:+.0f}% | "
            f"{ok(max(cost_res['overhead'], cost_res['dlp_share']) <= GOALS['dlp_time_overhead'])} |"
        )
        L.append(
            f"| peak memory <= 1 GB | {cost_res['peak_rss'] / 2**20:.0f} MiB | {ok(cost_res['peak_rss'] <= GOALS['peak_rss_bytes'])} |"
        )
    else:
        L.append("| DLP adds <= 25% to ingest time; peak memory <= 1 GB | not measured (`--no-cost`) | |")
    if planted["unmapped_findings"]:
        L += ["", f"Note: {planted['unmapped_findings']} findings could not be mapped onto the text (spans not reproducible)."]

    # -- planted: recall per family and type
    L += [
        "",
        "## Planted corpus: recall",
        "",
        "A value is caught when it (NFKC) no longer occurs in the redacted text and none of its probes "
        "(key-body lines; start/middle/end of values >= 120 chars) survive; *partial* = the full value is gone but a probe is left.",
        "",
        "| family | planted | caught | recall |",
        "|---|---|---|---|",
    ]
    for fam in planted["families"]:
        vs = [v for v in vals if v["family"] == fam]
        if vs:
            L.append(f"| {fam} | {len(vs)} | {sum(v['caught'] for v in vs)} | {pct(sum(v['caught'] for v in vs), len(vs))} |")
    L += [
        f"| **all** | {len(vals)} | {n_caught} | **{pct(n_caught, len(vals))}** |",
        "",
        "| type | planted | caught | partial | recall | missed in (syntax of the misses) |",
        "|---|---|---|---|---|---|",
    ]
    for types in planted["families"].values():
        for t in types:
            vs = [v for v in vals if v["type"] == t]
            if not vs:
                continue
            missed = Counter(v["note"] for v in vs if not v["caught"])
            L.append(
                f"| {t} | {len(vs)} | {sum(v['caught'] for v in vs)} | {sum(v['partial'] for v in vs)} | "
                f"{pct(sum(v['caught'] for v in vs), len(vs))} | {oneline('; '.join(f'{k} ×{c}' for k, c in missed.most_common()))} |"
            )
    missed = [v for v in vals if not v["caught"]]
    if missed:
        L += [
            "",
            f"### Missed values ({len(missed)}; up to 120 listed, by type)",
            "",
            "| type | document | value (masked) | context |",
            "|---|---|---|---|",
        ]
        for v in sorted(missed, key=lambda v: (v["type"], v["doc"], v["id"]))[:120]:
            L.append(f"| {v['type']}{' (partial)' if v['partial'] else ''} | {v['doc']} | `{oneline(v['masked'])}` | `{v['context']}` |")

    # -- planted: precision and negatives
    rows = planted["findings"]
    kinds = sorted({r["kind"] for r in rows})
    L += [
        "",
        "## Planted corpus: precision by finding kind",
        "",
        "Each `[REDACTED:kind]` of `apply_dlp`'s output is placed back in the text between the literal text around it. "
        "*true* = overlaps a planted value; *incidental* = overlaps only a person name, address, date of birth, role mailbox or "
        "an id that is neither planted nor a hard negative (not counted against precision); *false* = anything else.",
        "",
        "| kind | findings | true | incidental | false | precision |",
        "|---|---|---|---|---|---|",
    ]
    for k in kinds:
        c = Counter(r["verdict"] for r in rows if r["kind"] == k)
        L.append(f"| {k} | {sum(c.values())} | {c['true']} | {c['incidental']} | {c['false']} | {pct(c['true'], c['true'] + c['false'])} |")
    c = Counter(r["verdict"] for r in rows)
    L.append(
        f"| **all** | {sum(c.values())} | {c['true']} | {c['incidental']} | {c['false']} | **{pct(c['true'], c['true'] + c['false'])}** |"
    )
    false_rows = [r for r in rows if r["verdict"] == "false"]
    if false_rows:
        L += [
            "",
            f"False findings on the planted corpus ({len(false_rows)}; up to 40 shown):",
            "",
            "| kind | on hard negative | context |",
            "|---|---|---|",
        ]
        for r in evenly(sorted(false_rows, key=lambda r: (r["kind"], r["doc"], r["context"])), 40):
            L.append(f"| {r['kind']} | {r.get('negative') or '-'} | `{r['context']}` |")
    nr = planted["negatives"]
    L += [
        "",
        "### Hard negatives",
        "",
        "A hard negative is falsely flagged when a finding overlaps one of its occurrences.",
        "",
        "| type | planted | falsely flagged | examples flagged |",
        "|---|---|---|---|",
    ]
    for t in sorted({n["type"] for n in nr}):
        ns = [n for n in nr if n["type"] == t]
        fl = [n for n in ns if n["flagged"]]
        ex = "; ".join(sorted({f"`{oneline(n['value'])}`" for n in fl})[:4])
        L.append(f"| {t} | {len(ns)} | {len(fl)} ({pct(len(fl), len(ns))}) | {ex} |")

    # -- lab-kb
    L += [
        "",
        "## Red-team lab corpus (lab-kb)",
        "",
        "On the file text (`raw`) and on what `load_documents` makes of it (`loaded`, the ingest path).",
        "",
        "| file | kind | value | caught (raw) | caught (loaded) |",
        "|---|---|---|---|---|",
    ]
    for r in lab["values"]:
        loaded = ("yes" if r["caught_loaded"] else "**no**") if r["in_loaded"] else "n/a (not in loaded text)"
        L.append(f"| {r['file']} | {r['kind']} | `{r['value']}` | {'yes' if r['caught_raw'] else '**no**'} | {loaded} |")
    if lab["other_findings"]:
        L += ["", "Other findings on lab-kb (not one of the listed values):", ""]
        L += [f"- {r['file']}: {r['kind']} `{r['context']}`" for r in lab["other_findings"]]

    # -- negatives
    for name, s in negs.items():
        L += [
            "",
            f"## Negatives: {name}",
            "",
            f"{s['documents']} documents, {s['characters']:,} characters, {s['chunks']} chunks (default Settings: chunker "
            f"`{Settings().chunker}`, max_tokens {Settings().max_tokens}, token counter `approx_tokens`). "
            f"Load + scan time {s['seconds']:.0f} s ({s['jobs']} processes).",
            "",
            f"All findings: {s['findings']} ({s['per_1k']:.2f} per 1,000 chunks); judged false: {s['false']} "
            f"(**{s['false_per_1k']:.2f} per 1,000 chunks**); judged genuine: "
            + (", ".join(f"{k} {v}" for k, v in s["genuine"].items()) or "none")
            + ".",
            "",
            "| kind | findings | per 1,000 chunks | judged false | false per 1,000 chunks |",
            "|---|---|---|---|---|",
        ]
        for k, v in s["by_kind"].items():
            fk = s["false_by_kind"].get(k, 0)
            L.append(f"| {k} | {v} | {v / s['chunks'] * 1000:.2f} | {fk} | {fk / s['chunks'] * 1000:.2f} |")
        tops = [(k, t) for k, t in s["top_false"].items() if t]
        if tops:
            L += ["", "Most frequent false-alarm strings by kind:", ""]
            for k, t in tops:
                L.append(f"- {k}: " + ", ".join(f"`{oneline(x)}` ×{c}" for x, c in t))
        if s["sample"]:
            L += [
                "",
                f"Sample of flagged strings ({len(s['sample'])}; ±40 characters, ⟦flagged⟧):",
                "",
                "| kind | verdict | document | context |",
                "|---|---|---|---|",
            ]
            for r in s["sample"]:
                L.append(f"| {r['kind']} | {r['verdict']} | {r['doc']} | `{r['context']}` |")
        if s.get("files"):
            L += ["", "<details><summary>Files</summary>", "", *[f"- {f}" for f in s["files"]], "", "</details>"]

    # -- cost
    if cost_res:
        L += [
            "",
            "## Cost",
            "",
            f"`microrag ingest <155 Python-doc pages> --index <fresh tmp dir> --dlp off|redact -q --json`, timed with "
            f"{cost_res['timer']} -v (wall time incl. start-up and model load; peak RSS of the process).",
            "",
            "| run | dlp | wall (s) | peak RSS (MiB) | chunks | docs with findings |",
            "|---|---|---|---|---|---|",
        ]
        for r in cost_res["runs"]:
            L.append(
                f"| {r['rep']} | {r['mode']} | {r['wall_s']:.1f} | {r['peak_rss'] / 2**20:.0f} | {r['chunks']} | "
                f"{r['docs_with_findings']} |"
            )
        L += [
            "",
            f"Mean wall time: off {cost_res['mean_wall']['off']:.1f} s, redact {cost_res['mean_wall']['redact']:.1f} s "
            f"({100 * cost_res['overhead']:+.0f}%); the two runs of one setting differ by up to "
            f"{100 * max(cost_res['spread'].values()):.0f}%, so the wall-time difference is within noise unless it is larger. "
            f"Measured directly, `apply_dlp` over the same pages (loaded once, in-process, one CPU) takes "
            f"{cost_res['dlp_seconds']:.1f} s = {100 * cost_res['dlp_share']:.0f}% of the mean `--dlp off` ingest; the goal is judged "
            "on the larger of the two figures.",
            "",
            "<details><summary>The 155 pages</summary>",
            "",
            ", ".join(cost_res["pages"]),
            "",
            "</details>",
        ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "dlp.md").write_text(portable("\n".join(L) + "\n"), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--planted", type=Path, default=DEFAULT_PLANTED, help="planted corpus folder (generated when absent)")
    ap.add_argument("--lab-kb", type=Path, default=LAB_KB)
    ap.add_argument("--no-cost", action="store_true", help="skip the ingest timing runs (minutes)")
    ap.add_argument("--quick", action="store_true", help="fewer negatives: at most 300 Python doc pages")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes for scanning the negatives (default: all CPUs)")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: temporary folders and child processes are cleaned up

    t0 = time.perf_counter()
    planted = run_planted(args.planted)
    print(
        f"planted: {sum(v['caught'] for v in planted['values'])}/{len(planted['values'])} caught ({planted['seconds']:.0f} s)", flush=True
    )
    lab = run_lab(args.lab_kb)
    print(f"lab-kb: {sum(r['caught_raw'] for r in lab['values'])}/{len(lab['values'])} caught (raw)", flush=True)

    negs = {}
    pages = pydoc_pages(300 if args.quick else None)
    s = summarize_negatives(scan_files(pages, PYDOC, args.jobs))
    negs[f"Python 3.11 docs ({len(pages)} HTML pages{', quick sample' if args.quick else ''})"] = s
    print(f"python docs: {s['findings']} findings, {s['false_per_1k']:.2f} false / 1k chunks", flush=True)
    md = markdown_sample()
    s = summarize_negatives(scan_files(md, None, args.jobs))
    s["files"] = [str(p) for p in md]
    negs[f"public Markdown on this machine ({len(md)} files)"] = s
    print(f"markdown: {s['findings']} findings, {s['false_per_1k']:.2f} false / 1k chunks", flush=True)

    cost_res = None
    if not args.no_cost:
        all_pages = pydoc_pages(None)
        cost_res = cost(evenly(all_pages, 155))
        print(f"cost: overhead {100 * cost_res['overhead']:+.0f}%, peak {cost_res['peak_rss'] / 2**20:.0f} MiB", flush=True)

    write_report(args, planted, lab, negs, cost_res)
    out = {
        "command": "python benchmarks/dlp_report.py" + "".join(f" {a}" for a in sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "goals": GOALS,
        "planted": {
            "manifest": planted["manifest"],
            "recall": sum(v["caught"] for v in planted["values"]) / len(planted["values"]),
            "by_type": {
                t: {"planted": len(vs), "caught": sum(v["caught"] for v in vs), "partial": sum(v["partial"] for v in vs)}
                for t in sorted({v["type"] for v in planted["values"]})
                for vs in [[v for v in planted["values"] if v["type"] == t]]
            },
            "missed": [
                {k: v[k] for k in ("id", "type", "doc", "note", "masked", "context", "partial")}
                for v in planted["values"]
                if not v["caught"]
            ],
            "precision_by_kind": {
                k: dict(Counter(r["verdict"] for r in planted["findings"] if r["kind"] == k))
                for k in sorted({r["kind"] for r in planted["findings"]})
            },
            "negatives_flagged": [n for n in planted["negatives"] if n["flagged"]],
            "negatives_total": len(planted["negatives"]),
        },
        "lab_kb": lab,
        "negatives": {k: {kk: vv for kk, vv in v.items() if kk != "seconds"} for k, v in negs.items()},
        "cost": cost_res,
        "seconds": time.perf_counter() - t0,
    }
    (RESULTS / "dlp.json").write_text(portable(json.dumps(out, indent=1, ensure_ascii=False) + "\n"), encoding="utf-8")
    print(f"wrote {RESULTS / 'dlp.md'} and dlp.json ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
