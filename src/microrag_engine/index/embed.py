"""Step 2, embedding leg: ``embed(texts) -> (n, dim) float32 unit rows``; cosine = dot.

  * ``hash``   - the seed: 128 md5 buckets, +1.0 per token, L2-normalised;
  * ``minilm`` - all-MiniLM-L6-v2 (384-d) on onnxruntime, offline: the int8 graph and
    tokenizer shipped in ``models/minilm/`` (built by ``training/build_embedder.py``;
    ``MICRORAG_MINILM_ONNX`` / ``MICRORAG_MINILM_TOKENIZER`` override them).

Each embedder has a ``digest`` naming the graph that made its vectors, so an index can
tell when its stored vectors came from another model file.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from tokenizers import Tokenizer

from ..chunk import TokenCounter
from ..config import minilm_files
from ..errors import ConfigError, ModelMissingError
from ..runtime.onnx import cpu_count, ort_session, shipped_dir
from ..text import approx_tokens, seed_tokens


class Embedder(TokenCounter, Protocol):
    """What indexing and retrieval need of an embedding leg; it counts tokens for the chunker
    too (``chunk.TokenCounter``: BERT WordPiece's counts add up, the hash embedder's estimate,
    rounded per call, does not)."""

    name: str
    dim: int
    digest: str  # which model made the vectors: a graph's sha256 prefix, or e.g. "hash-128"

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    def vocabulary(self) -> frozenset[str]:
        """Whole words the model knows as single tokens (general English), lower-cased;
        empty when it has no vocabulary."""
        ...


class HashEmbedder:
    """Seed 'hashed features': token -> md5 bucket, +1.0 each, L2-normalised."""

    name = "hash"

    def __init__(self, dim: int = 128) -> None:
        self.dim = dim
        self.digest = f"hash-{dim}"

    def vocabulary(self) -> frozenset[str]:
        return frozenset()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float64)
        for r, text in enumerate(texts):
            for tok in seed_tokens(text):
                out[r, int(hashlib.md5(tok.encode("utf-8")).hexdigest(), 16) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)

    def count_tokens(self, text: str) -> int:
        return approx_tokens(text)

    @property
    def additive_counts(self) -> bool:
        return False


MINILM_INSTALL = "the minilm embedder needs onnxruntime and tokenizers: pip install 'microrag-engine[models]' (or use --preset seed)"


def _minilm_files(onnx: str | Path | None = None) -> tuple[Path, Path, str, dict]:
    """(onnx graph, tokenizer.json, digest, config): the shipped ``models/minilm`` files unless
    ``onnx`` or the env overrides name others. The digest is the first 16 hex of the
    graph's sha256 (read from the shipped ``config.json``; hashed for any other file);
    config is the shipped ``config.json`` when the graph is the shipped one, else {}."""
    env_onnx, env_tok = minilm_files()
    shipped = shipped_dir("minilm")
    graph = Path(onnx or env_onnx or shipped / "model.onnx")
    tok = Path(env_tok or shipped / "tokenizer.json")
    for p in (graph, tok):
        if not p.is_file():
            raise ModelMissingError(f"model file {p} is missing; reinstall microrag-engine or fix the path")
    config_path = shipped / "config.json"
    config = json.loads(config_path.read_text()) if graph == shipped / "model.onnx" and config_path.is_file() else {}
    digest = str(config.get("sha256", ""))[:16]
    if not digest:
        h = hashlib.sha256()
        with graph.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        digest = h.hexdigest()[:16]
    return graph, tok, digest, config


# Tokens per onnxruntime run (texts are sorted by length, so a batch holds texts of
# similar length), for graphs that allow batching (fp32 overrides; the shipped graph runs
# one text per run, see ``one_text_per_run``). Measured with int8 graphs on 2 cores
# (SciFact abstracts, ~240 tokens): 256 ran fastest, 512-4096 were 10-25% slower.
BATCH_TOKENS = 256
BULK_TEXTS = 32  # texts from which one embed call is bulk work (``_embed_side_by_side``, ``_session``)
# Bulk work on a one-text-per-run graph: at most this many sessions side by side, the cores
# shared out among them (each session holds its own ~27 MiB copy of the graph).
MAX_SOLO_SESSIONS = 4
# onnxruntime's session-time fusion of Add + LayerNormalization into SkipLayerNormalization
# made the shipped graph ~20% slower here (its CPU kernel is slower than the two ops).
ORT_DISABLED = ("SkipLayerNormFusion",)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2: WordPiece -> ONNX encoder -> masked mean pool -> L2 norm.

    ``onnx`` / ``tokenizer`` name other files than the shipped ones (as the env overrides do)."""

    name = "minilm"
    dim = 384

    def __init__(self, max_length: int = 256, batch_tokens: int = BATCH_TOKENS, onnx: str | Path | None = None,
                 tokenizer: str | Path | None = None) -> None:
        try:
            import onnxruntime  # noqa: F401  (the 'models' extra: fail here, with the install line)
            from tokenizers import Tokenizer
        except ImportError:
            raise ModelMissingError(MINILM_INSTALL) from None
        graph, tok, self.digest, config = _minilm_files(onnx)
        # The shipped graph is dynamic int8: one activation scale per run, so texts batched
        # together would move each other's vectors. It runs one text per run instead (a
        # text's vector never depends on its neighbours; ~240-token passages ran alone at
        # 256 batch tokens anyway).
        self.one_text_per_run = bool(config.get("one_text_per_run"))
        if tokenizer is not None:
            tok = Path(tokenizer)
        self.path = graph
        self.max_length, self.batch_tokens = max_length, batch_tokens
        self.tokenizer = Tokenizer.from_file(str(tok))
        # tokenizer.json ships fixed 128-token padding and truncation; we batch-pad ourselves.
        self.tokenizer.no_padding()
        self._vocabulary: frozenset[str] | None = None
        self.tokenizer.enable_truncation(max_length)
        self._tokenizer_file = tok
        self._counter: Tokenizer | None = None  # see counter
        self.session = ort_session(graph, disabled_optimizers=ORT_DISABLED)
        self._bulk_session: Any = None  # see _session
        self._solo: list[Any] | None = None  # see _solo_sessions
        self._solo_lock = threading.Lock()
        self.inputs = {i.name for i in self.session.get_inputs()}

    def vocabulary(self) -> frozenset[str]:
        if self._vocabulary is None:  # WordPiece: whole words are the entries without "##"
            self._vocabulary = frozenset(w for w in self.tokenizer.get_vocab() if w.isalpha() and not w.startswith("##"))
        return self._vocabulary

    @property
    def counter(self) -> Tokenizer:
        """The tokenizer without truncation, for chunk budgets: loaded on first use (~20 ms),
        so a process that only queries never loads it."""
        if self._counter is None:
            from tokenizers import Tokenizer

            counter = Tokenizer.from_file(str(self._tokenizer_file))
            counter.no_truncation()
            counter.no_padding()
            self._counter = counter
        return self._counter

    def count_tokens(self, text: str) -> int:
        return len(self.counter.encode(text).ids)

    @property
    def additive_counts(self) -> bool:
        """True for the tokenizer actually loaded when it is BERT's (its normalizer turns ASCII
        whitespace into spaces, its pre-tokenizer splits there, WordPiece reads each word
        alone); a tokenizer override of another kind (byte-level BPE keeps the space in the
        token) is counted whole."""
        from tokenizers import models, normalizers, pre_tokenizers

        tok = self.counter
        return (isinstance(tok.normalizer, normalizers.BertNormalizer)
                and isinstance(tok.pre_tokenizer, pre_tokenizers.BertPreTokenizer) and isinstance(tok.model, models.WordPiece))

    def _session(self, n_texts: int) -> Any:
        """The session for an ``embed`` call of ``n_texts`` on a graph that batches (fp32
        overrides; the shipped graph runs ``_embed_side_by_side``). A bulk call runs on a second
        session whose pool threads spin between runs instead of sleeping: runs in a row then
        skip a thread wake-up each (the same vectors: only the waiting differs). A query runs
        on the first one, which never spins, so idle threads do not steal a server's cores."""
        if n_texts < BULK_TEXTS:
            return self.session
        if self._bulk_session is None:
            self._bulk_session = ort_session(self.path, disabled_optimizers=ORT_DISABLED, spin=True)
        return self._bulk_session

    def _solo_sessions(self) -> list[Any]:
        """Sessions for bulk work on a one-text-per-run graph, texts run side by side instead
        of each run split over the cores: one single-threaded session per CPU (up to
        MAX_SOLO_SESSIONS, the CPUs shared out beyond). A ~240-token run is too small to split
        well (the threads meet at every op): on 2 cores, side by side measured 16% more
        abstracts/s and 25-30% more ingest chunks/s, the same vectors (a run is a run)."""
        if self._solo is None:
            with self._solo_lock:
                if self._solo is None:
                    n = min(cpu_count(), MAX_SOLO_SESSIONS)
                    self._solo = [ort_session(self.path, threads=max(1, cpu_count() // n), disabled_optimizers=ORT_DISABLED)
                                  for _ in range(n)]
        return self._solo

    def _embed_side_by_side(self, texts: Sequence[str], out: np.ndarray) -> np.ndarray:
        sessions = self._solo_sessions()
        # Longest first, each worker taking the next text when it is free: the cores end together.
        order = iter(sorted(range(len(texts)), key=lambda i: -len(texts[i])))
        lock, stop = threading.Lock(), threading.Event()

        def work(session: Any) -> None:
            while not stop.is_set():  # another worker failed, or the caller was interrupted
                with lock:
                    i = next(order, None)
                if i is None:
                    return
                try:
                    out[i] = self._embed_batch([texts[i]], session)[0]
                except BaseException:
                    stop.set()
                    raise

        pool = ThreadPoolExecutor(len(sessions), thread_name_prefix="microrag-embed")
        try:
            list(pool.map(work, sessions))  # re-raises a worker's error here
        except BaseException:  # Ctrl-C or a worker's error: the others stop after their current text
            stop.set()
            raise
        finally:
            pool.shutdown(wait=True)
        return out

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        if self.one_text_per_run:
            if len(texts) >= BULK_TEXTS and cpu_count() > 1:
                return self._embed_side_by_side(texts, out)
            for i, text in enumerate(texts):
                out[i] = self._embed_batch([text], self.session)[0]
            return out
        session = self._session(len(texts))
        # Sort by length and cap tokens per batch, so little is padding; long passages
        # run one or two per batch, short texts (queries) many.
        lengths = [len(e.ids) for e in self.tokenizer.encode_batch(list(texts))]  # truncated: what a batch holds
        order = sorted(range(len(texts)), key=lambda i: lengths[i])
        batch: list[int] = []
        for i in order:
            if batch and (len(batch) + 1) * lengths[i] > self.batch_tokens:
                out[batch] = self._embed_batch([texts[j] for j in batch], session)
                batch = []
            batch.append(i)
        out[batch] = self._embed_batch([texts[j] for j in batch], session)
        return out

    def _embed_batch(self, texts: list[str], session: Any) -> np.ndarray:
        encs = self.tokenizer.encode_batch(texts)
        width = max(len(e.ids) for e in encs)
        ids = np.zeros((len(encs), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for r, e in enumerate(encs):
            ids[r, : len(e.ids)] = e.ids
            mask[r, : len(e.ids)] = e.attention_mask
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = session.run(None, {k: v for k, v in feeds.items() if k in self.inputs})[0]
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


def cosines(vectors: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``vectors @ q`` for unit rows, written as a 1-row GEMM: OpenBLAS's GEMV path ran
    8x slower here (5183 x 384: 1.9 ms vs 0.23 ms, one thread)."""
    return (q[None, :].astype(vectors.dtype, copy=False) @ vectors.T)[0]
