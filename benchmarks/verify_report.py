"""Measure the shipped NLI verifier and print the table for docs/asking/verification.md.

    .venv/bin/python benchmarks/verify_report.py                 # full sets (~10 min on 2 cores)
    .venv/bin/python benchmarks/verify_report.py --write         # also refresh benchmarks/expected/nli*.json

Writes nothing unless ``--write``: then ``expected/nli.json`` (full figures,
shown in docs/asking/verification.md) and ``expected/nli-sample.json`` (200-row samples, which
``tests/training/test_evaluate_nli.py`` recomputes on every ``make test``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))  # dev-only tools: evaluate_nli

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "datasets"
SAMPLE = 200

# A 5-sentence answer in the assistant's own words (no verbatim copies, so every
# sentence goes through the model) for the latency figure.
ANSWER = ("Full-time staff get 20 paid vacation days a year in their first three years [1]. "
          "From the fourth year the allowance rises to 25 days [1]. "
          "Up to 5 unused days can be carried into the next year [2]. "
          "Carried-over days expire if they are not used by March 31 [2]. "
          "Employees also get a free company car.")


def timings(nli_spec: str = "shipped") -> dict:
    from microrag_engine.config import PRESETS
    from microrag_engine.engine import Engine, demo_corpus
    from microrag_engine.runtime.crossencoder import CrossEncoder
    from microrag_engine.runtime.onnx import shipped_dir
    from microrag_engine.verify import verify
    from microrag_engine.verify.nli import NLIModel

    t = time.perf_counter()
    nli = NLIModel(CrossEncoder(shipped_dir("nli")))
    nli.predict([("warm", "up")])
    load_s = time.perf_counter() - t
    eng = Engine.from_paths([demo_corpus() / "hr"], PRESETS["default"])
    hits = eng.retrieve("how many vacation days do I get and can I carry them over?").hits
    chunks = [(h.chunk.id, h.chunk.text) for h in hits]
    runs = []
    for _ in range(21):
        t = time.perf_counter()
        v = verify(ANSWER, chunks, nli)
        runs.append(time.perf_counter() - t)
    return {"load_s": round(load_s, 3), "verify_5x4_ms_p50": round(1000 * statistics.median(runs), 1),
            "sentences": len(v.sentences), "chunks": len(chunks), "verdicts": [s.verdict for s in v.sentences]}


def table(fig: dict) -> str:
    rows = ["| set | n | accuracy | F1 entail | F1 neutral | F1 contra |", "|---|---|---|---|---|---|"]
    for name in ("mnli_m_gold", "snli_test", "healthver_test", "scitail_test"):
        r = fig[name]
        rows.append(f"| {name}{' (2-way)' if name == 'scitail_test' else ''} | {r['n']} | {r['accuracy']:.3f} | "
                    f"{r['f1_entailment']:.3f} | {r['f1_neutral']:.3f} | {r.get('f1_contradiction', float('nan')):.3f} |")
    sf = fig["scifact_test"]
    rows += ["", "| SciFact test claims (cited abstract -> claim) | n | rate |", "|---|---|---|",
             f"| SUPPORT judged entailed | {sf['support_n']} | {sf['support_entailed']:.3f} |",
             f"| CONTRADICT judged contradicted | {sf['contradict_n']} | {sf['contradict_contradicted']:.3f} |",
             f"| CONTRADICT flagged (not entailed) | {sf['contradict_n']} | {sf['contradict_flagged']:.3f} |",
             f"| unrelated abstract judged neutral | {sf['unrelated_n']} | {sf['unrelated_neutral']:.3f} |"]
    for key, title in (("rag_synthetic", "RAG-shaped, synthetic (demo handbook + SciFact test abstracts, 4 chunks)"),
                       ("rag_handwritten", "RAG-shaped, hand-written (demo handbook, top-4 retrieved chunks)")):
        if key not in fig:
            continue
        r = fig[key]
        rows += ["", f"| {title} | n | correct |", "|---|---|---|"]
        kinds = sorted(k[:-3] for k in r if k.endswith("_ok"))
        for k in kinds:
            want = "entailed" if k in ("copy", "paraphrase") else "flagged"
            rows.append(f"| {k} -> {want} | {r[k + '_n']} | {r[k + '_ok']:.3f} |")
        rows.append(f"| **all supported -> entailed** | | **{r['supported_entailed']:.3f}** |")
        rows.append(f"| **all perturbed/unsupported -> flagged** | | **{r['unsupported_flagged']:.3f}** |")
    if "timing" in fig:
        t = fig["timing"]
        rows += ["", f"Model load (in process, first call included): {t['load_s']:.2f} s; verifying a "
                 f"{t['sentences']}-sentence answer against {t['chunks']} chunks: {t['verify_5x4_ms_p50']:.0f} ms p50."]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="refresh benchmarks/expected/nli*.json")
    ap.add_argument("--limit", type=int, default=None, help="sample each set (quick look)")
    args = ap.parse_args(argv)
    import evaluate_nli as ev

    from microrag_engine.config import PRESETS
    from microrag_engine.engine import Engine, demo_corpus
    from microrag_engine.verify.nli import load_nli

    nli = load_nli("shipped")
    engine = Engine.from_paths([demo_corpus()], PRESETS["default"])
    t = time.perf_counter()
    fig = ev.measure(nli, SHARED, limit=args.limit, engine=engine)
    fig["timing"] = timings()
    print(table(fig))
    print(f"\n(measured in {time.perf_counter() - t:.0f} s)", file=sys.stderr)
    if args.write:
        command = "python benchmarks/verify_report.py --write"
        (HERE / "expected" / "nli.json").write_text(json.dumps({"command": command, **fig}, indent=1) + "\n")
        sample = ev.measure(nli, SHARED, limit=SAMPLE, engine=engine)
        sampled = {"command": command, "note": "the 200-row sample it writes beside nli.json", "limit": SAMPLE, **sample}
        (HERE / "expected" / "nli-sample.json").write_text(json.dumps(sampled, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
