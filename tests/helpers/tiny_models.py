"""Tiny randomly initialised Hugging Face cross-encoders, built by the tests themselves.

They check our loading code (safetensors numpy path, ONNX path, label order
from config.json) against transformers' own forward pass; they are not useful
models. Needs torch + transformers (installed by ``make test`` for this only).
"""

from __future__ import annotations

import json
from pathlib import Path

# A label order unlike ours (E, N, C), so a loader that ignores config.json fails.
ID2LABEL = {0: "contradiction", 1: "entailment", 2: "neutral"}
WORDS = "[PAD] [UNK] [CLS] [SEP] [MASK] the a cat dog sat on mat is not red blue man runs park".split()


def build(folder: Path, onnx: bool = False, seed: int = 0, id2label: dict[int, str] | None = None):
    """Write a tiny BERT classifier to ``folder``; return the torch model for reference outputs."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    labels = id2label or ID2LABEL
    cfg = BertConfig(vocab_size=len(WORDS), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64, id2label=labels,
                     label2id={v: k for k, v in labels.items()})
    model = BertForSequenceClassification(cfg).eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    if onnx:
        ids = torch.ones((1, 8), dtype=torch.long)
        torch.onnx.export(model, (ids, ids, ids), str(folder / "model.onnx"),
                          input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["logits"],
                          dynamic_axes={k: {0: "b", 1: "s"} for k in ("input_ids", "attention_mask", "token_type_ids")},
                          opset_version=17, dynamo=False)
        (folder / "model.safetensors").unlink()
    return model


def reference_logits(model, encoder, pairs):
    """transformers' logits for ``pairs``, tokenised by our encoder's tokenizer."""
    import torch

    out = []
    for a, b in pairs:
        e = encoder.tokenizer.encode(a, b)
        t = lambda x: torch.tensor([x])  # noqa: E731
        with torch.no_grad():
            out.append(model(input_ids=t(e.ids), token_type_ids=t(e.type_ids),
                             attention_mask=t([1] * len(e.ids))).logits[0].numpy())
    return out
