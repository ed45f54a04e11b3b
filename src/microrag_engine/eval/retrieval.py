"""Evaluation: rank public datasets with our own legs and measure them.

In:  a BEIR-layout folder (``corpus.jsonl[.gz]``, ``queries.jsonl``, ``qrels/<split>.tsv``)
     or the HotpotQA-100 folder; the settings to test.
Out: per-configuration metrics - nDCG@10, Recall@10, Recall@100, MRR@10 (computed
     by pytrec_eval, the TREC reference) - for a leg ablation: keyword only,
     embedding only, min-max at several ``w_kw``, RRF.
A dataset document is one retrieval unit (title + text; MiniLM reads its first
256 tokens), as in the published BEIR baselines; ranking here is pure ranking,
without the grounding gate or the diversity cap. Document vectors can be cached
in a file keyed by the texts' hash and the model, since embedding SciFact takes
minutes on two cores. This module never changes what the engine does.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import Settings
from ..errors import CorpusError, MicroRAGError
from ..index.embed import make_embedder
from ..index.keyword import make_keyword
from ..retrieve.fuse import dynamic_w_kw, fuse_minmax, fuse_rrf

METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")


@dataclass
class Dataset:
    """Documents, queries and graded relevance judgements (qrels)."""

    name: str
    doc_ids: list[str]
    texts: list[str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


# ---------------------------------------------------------------- loading


def _jsonl(path: Path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def load_beir(folder: str | Path, split: str = "test") -> Dataset:
    """A BEIR dataset restricted to the queries judged in ``qrels/<split>.tsv``."""
    folder = Path(folder)
    corpus = next((p for p in (folder / "corpus.jsonl.gz", folder / "corpus.jsonl") if p.exists()), None)
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if corpus is None or not (folder / "queries.jsonl").exists() or not qrels_path.exists():
        raise CorpusError(f"{folder} is not a BEIR dataset with split {split!r}: need corpus.jsonl[.gz], "
                          f"queries.jsonl and qrels/{split}.tsv")
    docs = list(_jsonl(corpus))
    qrels: dict[str, dict[str, int]] = {}
    for line in qrels_path.read_text().splitlines()[1:]:
        qid, did, score = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(score)
    queries = {q["_id"]: q["text"] for q in _jsonl(folder / "queries.jsonl") if q["_id"] in qrels}
    return Dataset(f"{folder.name}/{split}", [d["_id"] for d in docs],
                   [(d.get("title", "") + "\n" + d["text"]).strip() for d in docs], queries, qrels)


def load_hotpot(folder: str | Path) -> Dataset:
    """HotpotQA-100: passages by title; relevant = the supporting-fact titles."""
    folder = Path(folder)
    corpus = json.loads((folder / "hotpotqa_train_corpus.json").read_text())
    items = json.loads((folder / "hotpotqa_train.json").read_text())
    titles = sorted(corpus)
    queries, qrels = {}, {}
    for it in items:
        facts = it["supporting_facts"]
        facts = json.loads(facts.replace("'", '"')) if isinstance(facts, str) else facts
        queries[it["_id"]] = it["question"]
        qrels[it["_id"]] = {title: 1 for title, _ in facts}
    texts = [t + "\n" + "".join(corpus[t]) for t in titles]
    return Dataset("hotpotqa-100", titles, texts, queries, qrels)


def load_dataset(folder: str | Path, split: str = "test") -> Dataset:
    folder = Path(folder)
    if (folder / "hotpotqa_train_corpus.json").exists():
        return load_hotpot(folder)
    return load_beir(folder, split)


# ---------------------------------------------------------------- scoring


def embed_cached(embedder, texts: list[str], cache: Path | None) -> np.ndarray:
    """Embed ``texts``, reusing ``cache`` (.npz) when it holds the same texts and model (name and graph digest)."""
    key = hashlib.sha256(("\x00".join(texts) + "\x01" + embedder.name + "\x01" + embedder.digest).encode()).hexdigest()
    if cache is not None and cache.exists():
        with np.load(cache) as z:
            if str(z["key"]) == key:
                return z["vectors"].astype(np.float32)
    vectors = embedder.embed(texts)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(cache, key=key, vectors=vectors.astype(np.float16))
    return vectors


def query_cache(cache: Path | None, queries: list[str]) -> Path | None:
    """The file beside ``cache`` that holds these queries' vectors (one per query set)."""
    if cache is None:
        return None
    tag = hashlib.sha256("\x00".join(queries).encode()).hexdigest()[:8]
    return cache.with_name(f"{cache.stem}.queries-{tag}.npz")


class Scorer:
    """Both legs over a dataset, fitted once; raw scores per query, cached."""

    def __init__(self, ds: Dataset, settings: Settings, cache: Path | None = None) -> None:
        self.ds = ds
        self.keyword = make_keyword(settings.keyword, settings.k1, settings.b).fit(ds.texts)
        self.embedder = make_embedder(settings.embedder)
        self.vectors = embed_cached(self.embedder, ds.texts, cache)
        qids = sorted(ds.queries)
        qtexts = [ds.queries[q] for q in qids]
        # The queries are cached beside the documents, so a cached run scores the same on
        # every CPU: an int8 graph's kernels differ per instruction set (AVX-512 VNNI vs AVX2),
        # and live query vectors would move the figures by that difference.
        qvecs = embed_cached(self.embedder, qtexts, query_cache(cache, qtexts))
        self.raw = {q: (self.keyword.scores(ds.queries[q]), self.vectors @ v) for q, v in zip(qids, qvecs)}

    def run(self, fusion: str, w_kw: float, rrf_k: int = 60, dynamic: bool = False, depth: int = 100):
        """A TREC run ``{qid: {doc_id: score}}`` with the top ``depth`` documents per query."""
        out = {}
        for q, (kw, em) in self.raw.items():
            w = dynamic_w_kw(self.ds.queries[q], w_kw) if dynamic else w_kw
            s = fuse_rrf(kw, em, w, rrf_k) if fusion == "rrf" else fuse_minmax(kw, em, w)
            top = np.argsort(-s, kind="stable")[:depth]
            # pytrec_eval sorts by score then doc id: give strictly decreasing scores so ranks are ours.
            out[q] = {self.ds.doc_ids[i]: float(depth - r) for r, i in enumerate(top)}
        return out


def measure(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> dict[str, float]:
    """Mean nDCG@10, Recall@10, Recall@100, MRR@10 over judged queries (pytrec_eval)."""
    try:
        import pytrec_eval
    except ImportError:
        raise MicroRAGError("evaluation needs its extra: pip install 'microrag-engine[eval]'") from None

    ev = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.10,100"})
    per_q = ev.evaluate(run)
    top10 = {q: dict(sorted(d.items(), key=lambda kv: -kv[1])[:10]) for q, d in run.items()}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    n = len(qrels)
    mean = lambda key, src: sum(src.get(q, {}).get(key, 0.0) for q in qrels) / n  # noqa: E731
    return {"ndcg@10": mean("ndcg_cut_10", per_q), "recall@10": mean("recall_10", per_q),
            "recall@100": mean("recall_100", per_q), "mrr@10": mean("recip_rank", rr)}


def recall_at(qrels, run, k: int) -> float:
    """Share of relevant documents in the top ``k`` (HotpotQA's supporting-passage recall)."""
    total = 0.0
    for q, rel in qrels.items():
        top = sorted(run.get(q, {}).items(), key=lambda kv: -kv[1])[:k]
        total += len({d for d, _ in top} & set(rel)) / len(rel)
    return total / len(qrels)


ABLATION = [
    ("keyword only", "minmax", 1.0),
    ("embedding only", "minmax", 0.0),
    ("minmax w_kw=0.3", "minmax", 0.3),
    ("minmax w_kw=0.4", "minmax", 0.4),
    ("minmax w_kw=0.5", "minmax", 0.5),
    ("minmax w_kw=0.6", "minmax", 0.6),
    ("minmax w_kw=0.7", "minmax", 0.7),
    ("rrf w_kw=0.5", "rrf", 0.5),
]


def evaluate(ds: Dataset, settings: Settings, cache: Path | None = None, ablation: bool = True) -> list[dict]:
    """Rows of metrics: the configured setting first, then the leg ablation."""
    scorer = Scorer(ds, settings, cache)
    configs = [("configured", settings.fusion, settings.w_kw, settings.dynamic_w_kw)]
    if ablation:
        configs += [(name, fusion, w, False) for name, fusion, w in ABLATION]
        configs.append(("minmax w_kw=0.5 dynamic", "minmax", 0.5, True))
    rows = []
    for name, fusion, w, dyn in configs:
        run = scorer.run(fusion, w, settings.rrf_k, dynamic=dyn)
        row = {"config": name, "fusion": fusion, "w_kw": w, "dynamic": dyn, **measure(ds.qrels, run)}
        row["recall@2"], row["recall@5"] = recall_at(ds.qrels, run, 2), recall_at(ds.qrels, run, 5)
        rows.append(row)
    return rows


# ---------------------------------------------------------------- the grounding gate


def gate_signals(scorer: Scorer, queries: dict[str, str]) -> dict[str, dict[str, float]]:
    """Per query, the raw signals a gate could read: best cosine, best BM25 coverage."""
    qids = sorted(queries)
    qvecs = scorer.embedder.embed([queries[q] for q in qids])
    out = {}
    for q, v in zip(qids, qvecs):
        kw = scorer.keyword.scores(queries[q])
        em = float((scorer.vectors @ v).max())
        cov = scorer.keyword.coverage(queries[q], float(kw.max()))
        out[q] = {"em": em, "kwcov": cov}
    return out


