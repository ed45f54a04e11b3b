"""A BERT sequence classifier in numpy, for ``model.safetensors`` folders without torch.

Reads the safetensors format directly (an 8-byte header length, a JSON header,
raw little-endian tensors) and runs the Hugging Face
``BertForSequenceClassification`` forward pass: embeddings, post-norm encoder
layers with exact GELU, the tanh pooler over [CLS], the classifier. It is a
reference path for users' own BERT-family cross-encoders (parity with
transformers is tested); the shipped models run on onnxruntime instead.
It does not train and does not support other architectures.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..errors import ConfigError

_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """All tensors in a .safetensors file as float32 arrays."""
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = raw[base + a : base + b]
        if info["dtype"] == "BF16":  # bf16 is the top half of a float32
            arr = (np.frombuffer(buf, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] in _DTYPES:
            arr = np.frombuffer(buf, dtype=_DTYPES[info["dtype"]])
        else:
            continue  # integer buffers such as position_ids are not weights
        out[name] = arr.reshape(info["shape"]).astype(np.float32)
    return out


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): numpy has no erf, and scipy
    # would be a heavy dependency for one function.
    s = np.sign(x)
    x = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * x)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * np.exp(-x * x)
    return s * y


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


class NumpyBert:
    """Callable: feed dict (input_ids, token_type_ids, attention_mask) -> logits."""

    def __init__(self, config: dict, weights_path: Path | dict[str, np.ndarray]) -> None:
        if config.get("model_type", "bert") != "bert":
            raise ConfigError(
                f"model_type {config.get('model_type')!r} is not supported from safetensors; "
                "export the model to ONNX (model.onnx) and point at that folder"
            )
        # A dict is the same tensors already in memory (Hugging Face names), e.g. read
        # back out of an ONNX graph to check it against this reference.
        w = weights_path if isinstance(weights_path, dict) else read_safetensors(weights_path)
        self.w = {k.removeprefix("bert."): v for k, v in w.items()}
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        if config.get("hidden_act", "gelu") != "gelu":
            raise ConfigError(f"hidden_act {config.get('hidden_act')!r} is not supported; only gelu")

    def _dense(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def __call__(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        w, ids = self.w, feed["input_ids"]
        mask = feed["attention_mask"].astype(np.float32)
        n = ids.shape[1]
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][np.arange(n)][None]
             + w["embeddings.token_type_embeddings.weight"][feed["token_type_ids"]])
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        bias = (1.0 - mask)[:, None, None, :] * np.finfo(np.float32).min  # padded keys get no weight
        b, h = x.shape[0], self.heads
        d = x.shape[2] // h
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q, k, v = (self._dense(x, p + f"attention.self.{m}").reshape(b, n, h, d).transpose(0, 2, 1, 3)
                       for m in ("query", "key", "value"))
            att = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + bias
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            ctx = (att @ v).transpose(0, 2, 1, 3).reshape(b, n, h * d)
            x = _layer_norm(x + self._dense(ctx, p + "attention.output.dense"),
                            w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], self.eps)
            ff = self._dense(_gelu(self._dense(x, p + "intermediate.dense")), p + "output.dense")
            x = _layer_norm(x + ff, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self.eps)
        pooled = np.tanh(self._dense(x[:, 0], "pooler.dense"))
        return self._dense(pooled, "classifier")
