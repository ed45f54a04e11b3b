"""One retrieval system, measured on SciFact test in a fresh process (see run.py).

    python benchmarks/peers.py SYSTEM      # microrag | seed | rank_bm25 | bm25s | langchain | llamaindex

Every system gets the same documents (title + abstract), the same queries and,
where it has an embedding leg, the same all-MiniLM-L6-v2 vectors (from the
committed cache, so nobody pays 9 minutes of embedding). Prints one JSON line:
nDCG@10 and Recall@100 (pytrec_eval), single-query latency p50/p99 with the
query vector precomputed (retrieval only) and with live query embedding, build
time of the system's own structures, and the process's peak RSS.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import resource
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

warnings.filterwarnings("ignore")
ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT.parent / "shared" / "datasets" / "scifact"
CACHE = ROOT / "benchmarks" / "data" / "scifact-corpus.minilm.npz"
DEPTH = 100
LIVE_QUERIES = 100  # the live-embedding pass uses the first 100 queries


def load():
    from microrag_engine.eval.retrieval import embed_cached, load_beir
    from microrag_engine.index.embed import make_embedder

    ds = load_beir(DATASET, "test")
    emb = make_embedder("minilm")
    vecs = embed_cached(emb, ds.texts, CACHE)
    qids = sorted(ds.queries)
    qvecs = dict(zip(qids, emb.embed([ds.queries[q] for q in qids])))
    return ds, emb, vecs, qids, qvecs


# ---------------------------------------------------------------- systems
# Each builder returns search(query_text, query_vector_or_None) -> ranked doc ids.


def sys_microrag(ds, emb, vecs):
    from microrag_engine.config import override, preset
    from microrag_engine.index import Index
    from microrag_engine.index.keyword import make_keyword
    from microrag_engine.retrieve import retrieve
    from microrag_engine.types import Chunk

    s = override(preset("default"), top_k=DEPTH, gate="none", max_per_source=0)
    chunks = [Chunk(d, d, 0, 0, len(t), t) for d, t in zip(ds.doc_ids, ds.texts)]
    index = Index(chunks, make_keyword("bm25", s.k1, s.b).fit(ds.texts), emb, vecs)
    state = {}
    index.query_vector = lambda q: state["v"] if state.get("v") is not None else emb.embed([q])[0]

    def search(q, v):
        state["v"] = v
        return [h.chunk.doc for h in retrieve(index, q, s, safeguards=False).hits]
    return search


_SEED = re.compile(r"[a-zA-Z][a-zA-Z']+")


def sys_seed(ds, emb, vecs):
    """The walkthrough's retriever as written: pure-Python TF-IDF + hashed embedding, min-max, w 0.5."""
    toks = [[t.lower() for t in _SEED.findall(x)] for x in ds.texts]
    n = len(toks)
    df = Counter(t for ts in toks for t in set(ts))
    idf = {t: math.log((n + 1) / (c + 1)) + 1 for t, c in df.items()}

    def tfidf(ts):
        return {t: c * idf.get(t, math.log(n + 1) + 1) for t, c in Counter(ts).items()}

    def hashed(ts):
        v = [0.0] * 128
        for t in ts:
            v[int(hashlib.md5(t.encode()).hexdigest(), 16) % 128] += 1.0
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / norm for x in v]

    dv = [tfidf(ts) for ts in toks]
    dn = [math.sqrt(sum(w * w for w in d.values())) for d in dv]
    de = [hashed(ts) for ts in toks]

    def search(q, v):
        qt = [t.lower() for t in _SEED.findall(q)]
        qv, qe = tfidf(qt), hashed(qt)
        qn = math.sqrt(sum(w * w for w in qv.values()))
        kw = [sum(w * d.get(t, 0.0) for t, w in qv.items()) / (qn * n_ + 1e-9) for d, n_ in zip(dv, dn)]
        em = [sum(a * b for a, b in zip(qe, e)) for e in de]

        def mm(xs):
            lo, hi = min(xs), max(xs)
            return [0.0] * len(xs) if hi == lo else [(x - lo) / (hi - lo) for x in xs]
        h = [0.5 * a + 0.5 * b for a, b in zip(mm(kw), mm(em))]
        order = sorted(range(n), key=lambda i: -h[i])[:DEPTH]
        return [ds.doc_ids[i] for i in order]
    return search


def sys_rank_bm25(ds, emb, vecs):
    from rank_bm25 import BM25Okapi

    tok = lambda x: re.findall(r"\w\w+", x.lower())  # noqa: E731
    bm = BM25Okapi([tok(t) for t in ds.texts])

    def search(q, v):
        s = bm.get_scores(tok(q))
        return [ds.doc_ids[i] for i in np.argsort(-s)[:DEPTH]]
    return search


def sys_bm25s(ds, emb, vecs):
    import bm25s
    import Stemmer

    stem = Stemmer.Stemmer("english")
    r = bm25s.BM25(k1=0.9, b=0.4)
    r.index(bm25s.tokenize(ds.texts, stopwords="en", stemmer=stem, show_progress=False), show_progress=False)

    def search(q, v):
        res, _ = r.retrieve(bm25s.tokenize([q], stopwords="en", stemmer=stem, show_progress=False), k=DEPTH,
                            show_progress=False)
        return [ds.doc_ids[i] for i in res[0]]
    return search


def _vector_lookup(ds, emb, vecs):
    by_text = {t: v for t, v in zip(ds.texts, vecs)}
    state = {}

    def embed_query(q):
        return state["v"] if state.get("v") is not None else emb.embed([q])[0]
    return by_text, state, embed_query


def sys_langchain(ds, emb, vecs):
    from langchain_classic.retrievers import EnsembleRetriever
    from langchain_community.retrievers import BM25Retriever
    from langchain_community.vectorstores import FAISS
    from langchain_core.embeddings import Embeddings

    by_text, state, embed_query = _vector_lookup(ds, emb, vecs)

    class Shared(Embeddings):
        def embed_documents(self, texts):
            return [by_text[t].tolist() for t in texts]

        def embed_query(self, text):
            return embed_query(text).tolist()

    metas = [{"id": d} for d in ds.doc_ids]
    bm = BM25Retriever.from_texts(ds.texts, metadatas=metas, k=DEPTH)
    store = FAISS.from_embeddings(list(zip(ds.texts, (v.tolist() for v in vecs))), Shared(), metadatas=metas)
    ens = EnsembleRetriever(retrievers=[bm, store.as_retriever(search_kwargs={"k": DEPTH})], weights=[0.5, 0.5])

    def search(q, v):
        state["v"] = v
        return [d.metadata["id"] for d in ens.invoke(q)][:DEPTH]
    return search


def sys_llamaindex(ds, emb, vecs):
    from llama_index.core import Settings, VectorStoreIndex
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.core.llms import MockLLM
    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.core.schema import TextNode
    from llama_index.retrievers.bm25 import BM25Retriever

    by_text, state, embed_query = _vector_lookup(ds, emb, vecs)

    class Shared(BaseEmbedding):
        def _get_query_embedding(self, query):
            return embed_query(query).tolist()

        async def _aget_query_embedding(self, query):
            return self._get_query_embedding(query)

        def _get_text_embedding(self, text):
            return by_text[text].tolist()

    Settings.embed_model = Shared()
    Settings.llm = MockLLM()
    nodes = [TextNode(text=t, id_=d, embedding=v.tolist()) for d, t, v in zip(ds.doc_ids, ds.texts, vecs)]
    index = VectorStoreIndex(nodes, embed_model=Settings.embed_model)
    bm = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=DEPTH)
    fusion = QueryFusionRetriever([index.as_retriever(similarity_top_k=DEPTH), bm], similarity_top_k=DEPTH,
                                  num_queries=1, mode="relative_score", use_async=False, llm=MockLLM())

    def search(q, v):
        state["v"] = v
        return [n.node.node_id for n in fusion.retrieve(q)][:DEPTH]
    return search


SYSTEMS = {"microrag": sys_microrag, "seed": sys_seed, "rank_bm25": sys_rank_bm25, "bm25s": sys_bm25s,
           "langchain": sys_langchain, "llamaindex": sys_llamaindex}
USES_VECTORS = {"microrag", "langchain", "llamaindex"}


def main(name: str) -> None:
    from microrag_engine.eval.retrieval import measure

    ds, emb, vecs, qids, qvecs = load()
    t = time.perf_counter()
    search = SYSTEMS[name](ds, emb, vecs)
    build = time.perf_counter() - t
    lat, run = [], {}
    for q in qids:
        t = time.perf_counter()
        ranked = search(ds.queries[q], qvecs[q])
        lat.append((time.perf_counter() - t) * 1000)
        run[q] = {d: float(DEPTH - r) for r, d in enumerate(ranked)}
    live = []
    for q in qids[:LIVE_QUERIES]:  # with the query embedded inside the call
        t = time.perf_counter()
        search(ds.queries[q], None)
        live.append((time.perf_counter() - t) * 1000)
    if name not in USES_VECTORS:
        live = lat[:LIVE_QUERIES]  # no embedding leg: nothing to embed
    m = measure(ds.qrels, run)
    print(json.dumps({"system": name, "ndcg@10": m["ndcg@10"], "recall@100": m["recall@100"],
                      "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
                      "p50_live_ms": float(np.percentile(live, 50)), "p99_live_ms": float(np.percentile(live, 99)),
                      "build_s": build, "docs": len(ds.texts), "queries": len(qids),
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main(sys.argv[1])
