"""Training pairs for the reranker: (query, passage) -> relevant / irrelevant.

* SciFact *train* qrels (never the test split): each judged abstract is a positive;
  two hard negatives each are drawn from the ten best-ranked unjudged abstracts of our own hybrid first pass.
* HotpotQA-100, the first 50 questions only (the last 50 are the held-out half
  ``benchmarks/rerank_report.py`` measures): supporting passages positive, the
  hybrid's other top passages negative.
Licences: SciFact is CC BY-NC 2.0 and HotpotQA CC BY-SA 4.0, so the reranker
inherits a non-commercial restriction; the model card says so.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "datasets"
HOTPOT_TRAIN = 50  # questions [0, 50) train, [50, 100) are held out


CACHE = REPO / "build" / "rerank-pairs.jsonl"


def _pairs(ds, scorer, rng: random.Random, negatives: int, qids) -> list[dict]:
    run = scorer.run("minmax", 0.4, depth=30)
    text = dict(zip(ds.doc_ids, ds.texts))
    rows = []
    for q in qids:
        rel = ds.qrels[q]
        for d in rel:
            rows.append({"premise": ds.queries[q], "hypothesis": text[d], "label": "relevant"})
        ranked = [d for d, _ in sorted(run[q].items(), key=lambda kv: -kv[1]) if d not in rel]
        hard = ranked[:10]
        for d in rng.sample(hard, min(negatives, len(hard))):
            rows.append({"premise": ds.queries[q], "hypothesis": text[d], "label": "irrelevant"})
    return rows


def training_pairs(seed: int = 13) -> list[dict]:
    """The pairs, mined once with the project venv (BM25 + MiniLM) and cached in build/."""
    if CACHE.exists():
        return [json.loads(line) for line in CACHE.read_text().splitlines()]
    from microrag_engine.config import PRESETS
    from microrag_engine.eval.retrieval import Scorer, load_beir, load_hotpot

    rng = random.Random(seed)
    settings = PRESETS["default"]
    sf = load_beir(SHARED / "scifact", "train")
    rows = _pairs(sf, Scorer(sf, settings, REPO / "benchmarks" / "data" / "scifact-corpus.minilm.npz"), rng, 2,
                  sorted(sf.queries))
    hp = load_hotpot(SHARED / "hotpotqa-100")
    train_q = list(hp.queries)[:HOTPOT_TRAIN]
    rows += _pairs(hp, Scorer(hp, settings, REPO / "benchmarks" / "data" / "hotpotqa-100.minilm.npz"), rng, 4, train_q)
    rng.shuffle(rows)
    CACHE.parent.mkdir(exist_ok=True)
    CACHE.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


if __name__ == "__main__":
    from collections import Counter

    rows = training_pairs()
    print(len(rows), Counter(r["label"] for r in rows))
