"""A cross-encoder runtime: (text, text) pairs -> logits, offline.

A Hugging Face-format folder with ``model.onnx`` (onnxruntime) or
``model.safetensors`` (BERT family, run by a small numpy forward pass so torch is
never needed) and ``tokenizer.json``. Used by verification (NLI) and reranking;
it knows nothing of either. A missing or broken file is a ``ModelMissingError``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import ConfigError, ModelMissingError
from .bert_numpy import NumpyBert
from .onnx import ort_session


def _tokenizer(folder: Path, cfg: dict, max_length: int):
    from tokenizers import BertWordPieceTokenizer, Tokenizer

    if (folder / "tokenizer.json").is_file():
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    elif (folder / "vocab.txt").is_file():
        tcfg = folder / "tokenizer_config.json"
        lower = json.loads(tcfg.read_text()).get("do_lower_case", True) if tcfg.is_file() else True
        tok = BertWordPieceTokenizer(str(folder / "vocab.txt"), lowercase=lower)
    else:
        raise ModelMissingError(f"{folder} has no tokenizer.json or vocab.txt")
    tok.no_padding()
    # Cut the longer side first: the evidence, except for the odd long claim.
    tok.enable_truncation(max_length=max_length, strategy="longest_first")
    return tok


class CrossEncoder:
    """Tokenizer + forward pass -> logits for (text_a, text_b) pairs."""

    def __init__(self, folder: str | Path, max_length: int | None = None, batch_tokens: int = 2048) -> None:
        folder = Path(folder)
        if not (folder / "config.json").is_file():
            raise ModelMissingError(f"{folder} is not a model folder (no config.json)")
        self.folder = folder
        self.config = json.loads((folder / "config.json").read_text())
        limit = self.config.get("max_position_embeddings", 512)
        self.max_length = min(max_length or self.config.get("max_length", 256), limit)
        self.batch_tokens = batch_tokens
        self.tokenizer = _tokenizer(folder, self.config, self.max_length)
        if (folder / "model.onnx").is_file():
            session = ort_session(folder / "model.onnx")
            names = {i.name for i in session.get_inputs()}
            self._forward = lambda feed: session.run(None, {k: v for k, v in feed.items() if k in names})[0]
        elif (folder / "model.safetensors").is_file():
            self._forward = NumpyBert(self.config, folder / "model.safetensors")
        else:
            raise ModelMissingError(f"{folder} has neither model.onnx nor model.safetensors")

    def logits(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Logits for each pair, batched by length so padding stays small."""
        encs = self.tokenizer.encode_batch(list(pairs)) if pairs else []
        out: np.ndarray | None = None
        order = sorted(range(len(encs)), key=lambda i: len(encs[i].ids))
        start = 0
        while start < len(order):
            end = start + 1
            while end < len(order) and (end - start + 1) * len(encs[order[end]].ids) <= self.batch_tokens:
                end += 1
            batch = [encs[i] for i in order[start:end]]
            width = max(len(e.ids) for e in batch)
            feed = {k: np.zeros((len(batch), width), dtype=np.int64)
                    for k in ("input_ids", "token_type_ids", "attention_mask")}
            for r, e in enumerate(batch):
                feed["input_ids"][r, : len(e.ids)] = e.ids
                feed["token_type_ids"][r, : len(e.ids)] = e.type_ids
                feed["attention_mask"][r, : len(e.ids)] = 1
            logits = np.asarray(self._forward(feed), dtype=np.float32)
            if out is None:
                out = np.zeros((len(encs), logits.shape[1]), dtype=np.float32)
            out[order[start:end]] = logits
            start = end
        return out if out is not None else np.zeros((0, 0), dtype=np.float32)


def softmax(x: np.ndarray) -> np.ndarray:
    """Row-wise softmax of logits, stable for large values."""
    x = x - x.max(axis=1, keepdims=True)
    ex = np.exp(x)
    return ex / ex.sum(axis=1, keepdims=True)


def load_encoder(folder: Path) -> CrossEncoder:
    """A ``CrossEncoder``, with every way a folder can be broken turned into one clear error."""
    try:
        return CrossEncoder(folder)
    except ImportError as exc:  # onnxruntime / tokenizers are the 'models' extra
        raise ModelMissingError(f"the cross-encoder needs {exc.name}: pip install 'microrag-engine[models]'") from None
    except (ModelMissingError, ConfigError):
        raise
    except Exception as exc:  # bad JSON, a tokenizer or graph that will not load
        raise ModelMissingError(f"cannot load the model in {folder}: {type(exc).__name__}: {str(exc)[:200]}") from None
