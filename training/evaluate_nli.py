"""Measuring the verifier: public NLI test sets, SciFact claims, RAG-shaped checks.

In:  an NLI backend (``nli.load_nli``) and ``../shared/datasets``.
Out: one dict of figures; ``benchmarks/verify_report.py`` prints it as a table
     and ``benchmarks/expected/nli.json`` keeps it for the regression test.

Sets:
  * ``mnli_m_gold``, ``snli_test``, ``healthver_test`` - 3-way accuracy and per-class F1 (argmax);
  * ``scitail_test`` - 2-way (entailment vs not): neutral and contradiction count as "not";
  * SciFact claims of the *test* qrels split: the cited abstract is the chunk, the
    claim the answer sentence, scored as ``verify`` scores it (windows, thresholds);
    SUPPORT should be entailed, CONTRADICT flagged, an unrelated abstract neutral;
  * RAG-shaped, synthetic: sentences copied or paraphrased from, or perturbed
    against, chunks of the demo handbook and SciFact test abstracts (``perturb``),
    each checked against its chunk plus three distractor chunks;
  * RAG-shaped, hand-written: ``training/eval-data/rag-checks.jsonl`` against the demo
    handbook's top-4 retrieved chunks.
It changes nothing the engine does; thresholds are calibrated by ``calibrate``.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path

import numpy as np

from microrag_engine.eval.retrieval import _jsonl
from microrag_engine.verify import CONTRADICTED, ENTAILED, NEUTRAL, decide, unsupported_facts

EVAL_DATA = Path(__file__).parent / "eval-data"  # dev-only data, not in the wheel

LABELS = ("entailment", "neutral", "contradiction")
THREE_WAY = ("mnli_m_gold", "snli_test", "healthver_test")
TWO_WAY = ("scitail_test",)


def read_jsonl(path: Path) -> list[dict]:
    return list(_jsonl(Path(path)))


def sample(rows: list, limit: int | None, seed: int = 0) -> list:
    """A fixed random subset (the regression test measures subsets, the report all)."""
    if not limit or limit >= len(rows):
        return rows
    return random.Random(seed).sample(rows, limit)


def prf(gold: Sequence[str], pred: Sequence[str], labels: Sequence[str]) -> dict:
    """Accuracy and per-class F1."""
    out = {"n": len(gold), "accuracy": float(np.mean([g == p for g, p in zip(gold, pred)])) if gold else 0.0}
    for lab in labels:
        tp = sum(g == p == lab for g, p in zip(gold, pred))
        fp = sum(p == lab != g for g, p in zip(gold, pred))
        fn = sum(g == lab != p for g, p in zip(gold, pred))
        out[f"f1_{lab}"] = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    return out


def nli_set(nli, rows: list[dict], two_way: bool = False) -> dict:
    """Argmax predictions of a model backend on premise/hypothesis rows."""
    probs = nli.predict([(r["premise"], r["hypothesis"]) for r in rows])
    pred = [LABELS[i] for i in probs.argmax(axis=1)]
    gold = [r["label"] for r in rows]
    if two_way:
        pred = ["entailment" if p == "entailment" else "neutral" for p in pred]
        return prf(gold, pred, ("entailment", "neutral"))
    return prf(gold, pred, LABELS)


def _verdicts(nli, items: list[tuple[list[str], str]]) -> dict[str, list[str]]:
    """``verify``'s verdict per (chunks, sentence): by the model alone, and with the fact check."""
    model, system = [], []
    for chunks, sentence in items:
        grid = nli.score_grid(chunks, [sentence])[0] if chunks else [(0.0, 1.0, 0.0)]
        verdict = decide(grid, nli.min_entail, nli.min_contra)[0]
        model.append(verdict)
        system.append(NEUTRAL if verdict == ENTAILED and unsupported_facts(sentence, chunks) else verdict)
    return {"model": model, "system": system}


def scifact_items(shared: Path, split: str, limit: int | None = None, seed: int = 0) -> list[tuple[list[str], str, str]]:
    """(chunks, claim, expected) from SciFact: the cited abstract, or an unrelated one."""
    folder = shared / "scifact"
    qids = {line.split("\t")[0] for line in (folder / "qrels" / f"{split}.tsv").read_text().splitlines()[1:]}
    corpus = {d["_id"]: d["text"] for d in read_jsonl(folder / "corpus.jsonl.gz")}
    ids = sorted(corpus)
    rng = random.Random(seed)
    items = []
    for q in read_jsonl(folder / "queries.jsonl"):
        if q["_id"] not in qids or not q.get("metadata"):
            continue
        doc, ev = next(iter(q["metadata"].items()))
        label = ev[0]["label"]
        if doc in corpus:
            items.append(([corpus[doc]], q["text"], ENTAILED if label == "SUPPORT" else CONTRADICTED))
            other = rng.choice(ids)
            if other not in q["metadata"]:
                items.append(([corpus[other]], q["text"], NEUTRAL))
    return sample(items, limit, seed)


def _scifact_figures(items: list, got: list[str]) -> dict:
    out: dict = {}
    for want, name in ((ENTAILED, "support"), (CONTRADICTED, "contradict"), (NEUTRAL, "unrelated")):
        idx = [i for i, it in enumerate(items) if it[2] == want]
        out[f"{name}_n"] = len(idx)
        out[f"{name}_{want}"] = float(np.mean([got[i] == want for i in idx])) if idx else 0.0
        if want != ENTAILED:
            out[f"{name}_flagged"] = float(np.mean([got[i] != ENTAILED for i in idx])) if idx else 0.0
    return out


def scifact(nli, shared: Path, split: str = "test", limit: int | None = None) -> dict:
    """Model-only figures at the top level; ``with_fact_check`` as ``verify`` runs by default."""
    items = scifact_items(shared, split, limit)
    got = _verdicts(nli, [(c, s) for c, s, _ in items])
    return {**_scifact_figures(items, got["model"]), "with_fact_check": _scifact_figures(items, got["system"])}


def _passages(shared: Path, split: str = "test") -> list[list[str]]:
    """Held-out passages as sentence lists: SciFact abstracts cited by ``split``
    (plus the demo handbook's chunks for the test split)."""
    from microrag_engine.chunk import chunk_documents
    from microrag_engine.config import PRESETS
    from microrag_engine.load import load_documents
    from microrag_engine.text import sentence_spans

    texts = []
    if split == "test":
        demo = Path(str(files("microrag_engine") / "data" / "demo-corpus"))
        # The files as written: an evaluation set must not move when the product's loader learns to render markup.
        texts = [c.text for c in chunk_documents(load_documents([demo], markup="raw"), PRESETS["default"])]
    qids = {line.split("\t")[1] for line in (shared / "scifact" / "qrels" / f"{split}.tsv").read_text().splitlines()[1:]}
    texts += [d["text"] for d in read_jsonl(shared / "scifact" / "corpus.jsonl.gz") if d["_id"] in qids]
    out = []
    for t in texts:
        sents = [t[s:e].strip() for s, e in sentence_spans(t)]
        sents = [s for s in sents if len(s.split()) >= 5 and not s.startswith("#")]
        if sents:
            out.append(sents)
    return out


def rag_items(shared: Path, limit: int | None = None, seed: int = 0, split: str = "test") -> list[tuple[list[str], str, str, str]]:
    """(chunks, sentence, expected, kind): each passage plus three distractor passages."""
    from perturb import rag_pairs

    rng = random.Random(seed)
    passages = _passages(shared, split)
    items = []
    for row in rag_pairs(passages, rng, per_passage=2):
        others = [" ".join(p) for p in rng.sample(passages, 4) if " ".join(p) != row["premise"]][:3]
        chunks = [row["premise"], *others]
        rng.shuffle(chunks)
        want = ENTAILED if row["label"] == "entailment" else "flagged"
        items.append((chunks, row["hypothesis"], want, row["kind"]))
    return sample(items, limit, seed)


def _rag_figures(items: list, got: list[str]) -> dict:
    out: dict = {}
    for kind, n in sorted(Counter(it[3] for it in items).items()):
        idx = [i for i, it in enumerate(items) if it[3] == kind]
        ok = [got[i] == ENTAILED if items[i][2] == ENTAILED else got[i] != ENTAILED for i in idx]
        out[f"{kind}_ok"] = float(np.mean(ok))
        out[f"{kind}_n"] = n
    pos = [i for i, it in enumerate(items) if it[2] == ENTAILED]
    neg = [i for i, it in enumerate(items) if it[2] != ENTAILED]
    out["supported_entailed"] = float(np.mean([got[i] == ENTAILED for i in pos])) if pos else 0.0
    out["unsupported_flagged"] = float(np.mean([got[i] != ENTAILED for i in neg])) if neg else 0.0
    return out


def _rag_both(nli, items: list) -> dict:
    """``verify`` as shipped (fact check on) at the top level; ``model_only`` without it."""
    got = _verdicts(nli, [(c, s) for c, s, _, _ in items])
    return {**_rag_figures(items, got["system"]), "model_only": _rag_figures(items, got["model"])}


def rag_synthetic(nli, shared: Path, limit: int | None = None) -> dict:
    return _rag_both(nli, rag_items(shared, limit))


def rag_handwritten(nli, engine) -> dict:
    """The hand-written checks against the demo engine's top-4 chunks for their query."""
    rows = read_jsonl(Path(str(EVAL_DATA / "rag-checks.jsonl")))
    items = []
    for r in rows:
        hits = engine.retrieve(r["query"], safeguards=False).hits  # the gate is not under test here
        items.append(([h.chunk.text for h in hits], r["sentence"], r["expect"] if r["expect"] == ENTAILED else "flagged",
                      r["kind"]))
    return _rag_both(nli, items)


def measure(nli, shared: Path, limit: int | None = None, engine=None) -> dict:
    """Every figure in the report; ``limit`` samples each set (the test's fast path)."""
    nli_dir = shared / "nli"
    out: dict = {}
    for name in THREE_WAY + TWO_WAY:
        out[name] = nli_set(nli, sample(read_jsonl(nli_dir / f"{name}.jsonl"), limit), two_way=name in TWO_WAY)
    out["scifact_test"] = scifact(nli, shared, "test", limit)
    out["rag_synthetic"] = rag_synthetic(nli, shared, limit)
    if engine is not None:
        out["rag_handwritten"] = rag_handwritten(nli, engine)
    return out


def calibrate(nli, shared: Path, limit: int | None = 600) -> dict:
    """Thresholds that maximise balanced accuracy on SciFact *train* claims and
    RAG-shaped items built from SciFact train abstracts.

    Entailed-vs-flagged: the mean of SUPPORT-entailed and (CONTRADICT or
    unrelated)-flagged rates; contradicted-vs-neutral among the flagged ones.
    Never tuned on a set the report measures.
    """
    items = scifact_items(shared, "train", limit, seed=1)
    items += [(c, s, w) for c, s, w, _ in rag_items(shared, limit, seed=1, split="train")]
    grids = [nli.score_grid(c, [s])[0] for c, s, _ in items]
    want = [w for _, _, w in items]
    best = (-1.0, 0.5, 0.5)
    for me in np.arange(0.2, 0.95, 0.05):
        for mc in np.arange(0.2, 0.95, 0.05):
            got = [decide(g, me, mc)[0] for g in grids]
            pos = [got[i] == ENTAILED for i, w in enumerate(want) if w == ENTAILED]
            neg = [got[i] != ENTAILED for i, w in enumerate(want) if w != ENTAILED]  # incl. "flagged"
            con = [got[i] == CONTRADICTED for i, w in enumerate(want) if w == CONTRADICTED]
            neu = [got[i] == NEUTRAL for i, w in enumerate(want) if w == NEUTRAL]
            score = (np.mean(pos) + np.mean(neg)) / 2 + 0.1 * (np.mean(con) + np.mean(neu)) / 2
            if score > best[0]:
                best = (float(score), round(float(me), 2), round(float(mc), 2))
    return {"score": best[0], "min_entail": best[1], "min_contra": best[2], "n": len(items)}
