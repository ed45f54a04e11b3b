"""Training pairs for the reranker: (query, passage) -> relevant / irrelevant.

* SciFact *train* qrels (never the test split): each judged abstract is a positive;
  hard negatives are the best-ranked unjudged abstracts of our own hybrid first pass.
* HotpotQA-100, the first 50 questions only (the last 50 are the held-out half
  ``benchmarks/rerank_report.py`` measures): supporting passages positive, the
  hybrid's other top passages negative.
Licences: SciFact is CC BY-NC 2.0 and HotpotQA CC BY-SA 4.0, so the reranker
inherits a non-commercial restriction; the model card says so.
"""

from __future__ import annotations

import random
from pathlib import Path

from microrag.config import PRESETS
from microrag.evaluate import Scorer, load_beir, load_hotpot

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "datasets"
HOTPOT_TRAIN = 50  # questions [0, 50) train, [50, 100) are held out


def _pairs(ds, scorer, rng: random.Random, negatives: int, qids) -> list[dict]:
    run = scorer.run("minmax", PRESETS["default"].w_kw, depth=30)
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
    rng = random.Random(seed)
    settings = PRESETS["default"]
    sf = load_beir(SHARED / "scifact", "train")
    rows = _pairs(sf, Scorer(sf, settings, REPO / "benchmarks" / "data" / "scifact-corpus.minilm.npz"), rng, 3,
                  sorted(sf.queries))
    hp = load_hotpot(SHARED / "hotpotqa-100")
    train_q = list(hp.queries)[:HOTPOT_TRAIN]
    rows += _pairs(hp, Scorer(hp, settings, REPO / "benchmarks" / "data" / "hotpotqa-100.minilm.npz"), rng, 4, train_q)
    rng.shuffle(rows)
    return rows


if __name__ == "__main__":
    from collections import Counter

    rows = training_pairs()
    print(len(rows), Counter(r["label"] for r in rows))
