"""Does our cross-encoder reranker (built by training/, not shipped) earn its latency? SciFact test + HotpotQA held-out half.

    .venv/bin/python benchmarks/rerank_report.py [--depth 20] [--out benchmarks/results/rerank.md]

Ranks with our hybrid (BM25 + MiniLM, min-max, w_kw 0.4; committed document
vectors), then reranks the top ``depth`` with the reranker, blended at
``w_rerank`` 0.5 and alone (1.0). HotpotQA: questions 50-99 only (0-49 trained it).
The reranker never saw the SciFact test split.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "datasets"


def reranked_runs(ds, scorer, model, depth: int, weights: list[float]):
    from microrag_engine.retrieve.rerank import blend, relevance

    base = scorer.run("minmax", 0.4, depth=100)
    text = dict(zip(ds.doc_ids, ds.texts))
    runs = {w: {} for w in weights}
    latency = []
    for q, docs in base.items():
        ranked = sorted(docs, key=lambda d: -docs[d])
        top = ranked[:depth]
        t = time.perf_counter()
        p = relevance(model, ds.queries[q], [text[d] for d in top])
        latency.append(time.perf_counter() - t)
        hybrid = np.array([docs[d] for d in ranked], dtype=np.float64)
        hybrid = (hybrid - hybrid.min()) / (hybrid.max() - hybrid.min() or 1.0)
        for w in weights:
            s = blend(hybrid, list(range(len(top))), p, w)
            order = np.argsort(-s, kind="stable")
            runs[w][q] = {ranked[i]: float(len(ranked) - r) for r, i in enumerate(order)}
    return base, runs, latency


def main(argv: list[str] | None = None) -> int:
    from microrag_engine.config import PRESETS
    from microrag_engine.eval.retrieval import Dataset, Scorer, load_beir, load_hotpot, measure, recall_at
    from microrag_engine.retrieve.rerank import load_reranker

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=Path("build/rerank"),
                    help="the reranker folder (built by training/, see training/RERANKER.md; none ships)")
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    model = load_reranker(args.model)
    weights = [0.5, 1.0]
    lines = [f"Rerank depth {args.depth}; model {model.folder.name} (max {model.max_length} tokens); "
             "p50 = reranker time per query on 2 cores.", ""]

    sf = load_beir(SHARED / "scifact", "test")
    scorer = Scorer(sf, PRESETS["default"], HERE / "data" / "scifact-corpus.minilm.npz")
    base, runs, lat = reranked_runs(sf, scorer, model, args.depth, weights)
    lines += ["| SciFact test (300 queries) | nDCG@10 | Recall@10 | rerank p50 |", "|---|---|---|---|",
              f"| hybrid (shipped default) | {measure(sf.qrels, base)['ndcg@10']:.4f} | {measure(sf.qrels, base)['recall@10']:.4f} | - |"]
    for w in weights:
        m = measure(sf.qrels, runs[w])
        lines.append(f"| hybrid + rerank, w_rerank {w} | {m['ndcg@10']:.4f} | {m['recall@10']:.4f} | "
                     f"{1000 * statistics.median(lat):.0f} ms |")

    hp = load_hotpot(SHARED / "hotpotqa-100")
    held = list(hp.queries)[50:]
    hp = Dataset(hp.name, hp.doc_ids, hp.texts, {q: hp.queries[q] for q in held}, {q: hp.qrels[q] for q in held})
    scorer = Scorer(hp, PRESETS["default"], HERE / "data" / "hotpotqa-100.minilm.npz")
    base, runs, lat = reranked_runs(hp, scorer, model, args.depth, weights)
    lines += ["", "| HotpotQA-100, questions 50-99 | Recall@2 | Recall@5 | rerank p50 |", "|---|---|---|---|",
              f"| hybrid (shipped default) | {recall_at(hp.qrels, base, 2):.3f} | {recall_at(hp.qrels, base, 5):.3f} | - |"]
    for w in weights:
        lines.append(f"| hybrid + rerank, w_rerank {w} | {recall_at(hp.qrels, runs[w], 2):.3f} | "
                     f"{recall_at(hp.qrels, runs[w], 5):.3f} | {1000 * statistics.median(lat):.0f} ms |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text("# Reranker measurements\n\nCommand: `.venv/bin/python benchmarks/rerank_report.py "
                            f"--model {args.model} --depth {args.depth} --out {args.out}`\n\n{text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
