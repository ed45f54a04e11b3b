"""Training mixes for the shipped NLI model and reranker (training only, never imported by the package).

Only sets whose licence allows shipping a derived model are used (see
``training/MODEL_CARD.md``): SICK and ANLI are non-commercial, Climate-FEVER and
COVID-Fact carry no licence file, and every test split (``mnli_m_gold``,
``snli_test``, ``healthver_test``, ``scitail_test``) is held out. ``mnli_m_noisy``
is also held out: it is the headline test's own pairs with another annotator.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import perturb

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"
NLI = SHARED / "nli"
LABELS = ("entailment", "neutral", "contradiction")

# file -> expected copies of each row (2.0 = two passes, 0.5 = half the rows).
# Training here runs at about 1,000 tokens/s on 2 cores, so the budget is
# tokens: short SNLI/MNLI pairs get two passes, long evidence sets a sample.
LICENSED = {
    "snli_dev.jsonl": 2.0,          # CC BY-SA 4.0
    "mnli_mm_noisy.jsonl": 2.0,     # MultiNLI mismatched dev, OANC / CC texts
    "mpe_train.jsonl": 0.45,        # MIT collection
    "cb_train.jsonl": 1.0,
    "rte_train.jsonl": 1.0,         # 2-way: only its entailment rows are used
    "healthver_dev.jsonl": 1.0,     # evidence -> health claim
    "healthver_mv_train.jsonl": 0.3,
    "fever_dev_sr.jsonl": 0.45,     # CC BY-SA 3.0 (Wikipedia)
}


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def nli_rows(rng: random.Random) -> list[dict]:
    """The licensed public NLI rows, 3-way labels only."""
    rows: list[dict] = []
    for name, copies in LICENSED.items():
        for r in read_jsonl(NLI / name):
            n = int(copies) + (rng.random() < copies - int(copies))
            for _ in range(n if r["label"] in LABELS else 0):
                rows.append({"premise": r["premise"], "hypothesis": r["hypothesis"], "label": r["label"], "src": name})
    return rows


def augment(rows: list[dict], rng: random.Random) -> list[dict]:
    """Cheap extra pairs from the same data.

    * contradiction is symmetric: swap premise and hypothesis of short pairs;
    * a claim next to evidence for another claim is unsupported: neutral (FEVER
      has no NEI rows, and RAG needs "the chunk never says this").
    """
    out: list[dict] = []
    for r in rows:
        if r["label"] == "contradiction" and len(r["premise"]) < 200 and rng.random() < 0.15:
            out.append({**r, "premise": r["hypothesis"], "hypothesis": r["premise"], "src": "swap"})
    fever = [r for r in rows if r["src"] == "fever_dev_sr.jsonl"]
    for r in rng.sample(fever, min(2000, len(fever))):
        other = rng.choice(fever)
        if other["premise"] != r["premise"]:
            out.append({"premise": other["premise"], "hypothesis": r["hypothesis"], "label": "neutral", "src": "fever_neutral"})
    return out


def hotpot_passages() -> list[list[str]]:
    corpus = json.loads((SHARED / "hotpotqa-100" / "hotpotqa_train_corpus.json").read_text())
    return [list(s) for s in corpus.values()]


def windows(sentences: list[str], size: int = 3) -> list[list[str]]:
    """Runs of ``size`` sentences: the verifier scores chunks in windows this long."""
    return [sentences[i : i + size] for i in range(0, max(1, len(sentences) - 1), size)]


def synthetic_rows(rng: random.Random) -> list[dict]:
    """RAG-shaped pairs from Wikipedia passages (HotpotQA corpus, FEVER and RTE premises).

    None of these passages is used by the RAG-shaped evaluation, which draws on
    the demo handbook and SciFact test abstracts instead.
    """
    passages = [w for p in hotpot_passages() for w in windows(p)]
    for name in ("fever_dev_sr.jsonl", "rte_train.jsonl"):
        premises = sorted({r["premise"] for r in read_jsonl(NLI / name) if len(r["premise"]) > 120})
        rng.shuffle(premises)
        passages += [[s + "." for s in p.split(". ") if s] for p in premises[:1200]]
    rows = perturb.rag_pairs(passages, rng, per_passage=2)
    return [{"premise": r["premise"], "hypothesis": r["hypothesis"], "label": r["label"], "src": "rag_" + r["kind"]} for r in rows]


def training_mix(seed: int = 13) -> list[dict]:
    rng = random.Random(seed)
    rows = nli_rows(rng)
    rows += augment(rows, rng)
    rows += synthetic_rows(rng)
    rng.shuffle(rows)
    return rows


if __name__ == "__main__":
    from collections import Counter

    mix = training_mix()
    print(len(mix), Counter(r["label"] for r in mix))
    print(Counter(r["src"] for r in mix))
