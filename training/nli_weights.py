"""Recover the shipped NLI model's torch weights from its ONNX graph, to start another cross-encoder from.

    .venv/bin/python training/nli_weights.py        # a few seconds; writes build/nli-torch/

The NLI checkpoint itself is not kept (training/train_nli.py rebuilds it in ~70 min); its
graph holds every weight. Named initializers map to their parameters by name; the
exporter's anonymous MatMul weights (``onnx::MatMul_N``, stored transposed, fp16) take the
name of the bias their product is added to. Checked: the recovered model's logits equal
the graph's (to fp16 storage precision) on the pairs below, or the script fails.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from onnx import load, numpy_helper
from transformers import AutoModelForSequenceClassification

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from train_nli import base_dir  # noqa: E402

from microrag_engine.runtime.crossencoder import CrossEncoder  # noqa: E402
from microrag_engine.runtime.onnx import shipped_dir  # noqa: E402

OUT = HERE.parent / "build" / "nli-torch"
PAIRS = [("The cat sat on the mat all day.", "A cat was on a mat."),
         ("Passwords expire after 90 days.", "Passwords never expire.")]


def recovered_state(graph_path: Path) -> dict[str, np.ndarray]:
    graph = load(str(graph_path)).graph
    init = {i.name: numpy_helper.to_array(i).astype(np.float32) for i in graph.initializer}
    cast = {n.output[0]: n.input[0] for n in graph.node if n.op_type == "Cast"}
    consumers: dict[str, list] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    state: dict[str, np.ndarray] = {}
    for name, arr in init.items():
        if name.startswith("onnx::MatMul"):
            continue
        clean = name.replace("_fp32_fp16", "").replace("_fp16", "").replace("_fp32", "")
        if "_Transposed" in clean:
            state[clean.split("_Transposed")[0]] = arr.T
        else:
            state[clean] = arr
    for n in graph.node:
        if n.op_type != "MatMul" or cast.get(n.input[1], n.input[1]) not in init:
            continue
        adds = [c for c in consumers.get(n.output[0], []) if c.op_type == "Add"]
        bias = next((i for a in adds for i in a.input if i.endswith(".bias")), None)
        if bias is not None and not bias.startswith("classifier"):
            state[bias[: -len(".bias")] + ".weight"] = init[cast.get(n.input[1], n.input[1])].T
    return state


def main() -> None:
    folder = shipped_dir("nli")
    state = recovered_state(folder / "model.onnx")
    model = AutoModelForSequenceClassification.from_pretrained(base_dir(), num_labels=3)
    missing, unexpected = model.load_state_dict({k: torch.tensor(v) for k, v in state.items()}, strict=False)
    if missing or unexpected:
        raise SystemExit(f"weights not recovered: missing {missing}, unexpected {unexpected}")
    model.eval()
    graph = CrossEncoder(folder)
    want = graph.logits(PAIRS)
    with torch.no_grad():
        for (a, b), row in zip(PAIRS, want):
            e = graph.tokenizer.encode(a, b)
            got = model(input_ids=torch.tensor([e.ids]), token_type_ids=torch.tensor([e.type_ids]),
                        attention_mask=torch.ones(1, len(e.ids), dtype=torch.long)).logits[0].numpy()
            if not np.allclose(got, row, atol=1e-2):
                raise SystemExit(f"recovered logits {got} differ from the graph's {row}")
    model.save_pretrained(OUT)
    print(f"wrote {OUT}: logits match the shipped graph's")


if __name__ == "__main__":
    main()
