"""Rebuild a shipped cross-encoder's graph so it gives the same verdicts on every x86-64 CPU.

    .venv/bin/python training/requantize.py src/microrag_engine/models/nli build/nli-fp32.onnx
    .venv/bin/python training/requantize.py src/microrag_engine/models/rerank build/rerank-fp32.onnx

Run once, on the int8 graphs the first release shipped (git history holds them).

Why: those graphs were dynamic int8: onnxruntime quantises activations to u8 at run
time and multiplies them by s8 weights. Their verdicts depended on the CPU, for two
reasons. (1) Without AVX-512 VNNI the AVX2 kernel adds pairs of u8*s8 products into
16-bit lanes (``vpmaddubsw``), which saturate when both are large (255*127*2 > 32767);
VNNI and AMX kernels accumulate in 32 bits. 7-bit weights (``reduce_range``) remove that,
but (2) fp32 kernels (LayerNorm, Softmax, GELU, the attention MatMuls) round differently
on AVX2 and AVX-512 paths, and a few ULP is enough to move an activation across a u8
step: measured, 0.9% of verdicts flipped between fused and unfused kernels on one CPU,
7-bit weights or not (benchmarks/portability.py; model card). In fp32 the same ULP
differences stay ULP-sized (2.5e-6 in probability), far below any decision margin.

What it does: the int8 graph is the only copy of the trained weights, so it is turned
back into an fp32 graph (each ``DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul``
chain becomes one ``MatMul`` with the dequantized weights; each quantized embedding
``Gather -> DequantizeLinear`` a ``Gather`` over fp32 rows). That graph is the fp32
reference (written to the second path, not shipped). The shipped ``model.onnx`` stores
the same weights as fp16 behind ``Cast`` nodes, which onnxruntime folds back to fp32
constants at load: half the file, fp32 arithmetic. It does not retrain and does not
change the tokenizer or the config (``training/ship.py`` recalibrates the thresholds).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper


def _index(graph) -> tuple[dict, dict, dict]:
    inits = {i.name: i for i in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    return inits, producer, consumers


def dequantize(model: onnx.ModelProto) -> onnx.ModelProto:
    """An fp32 graph computing what ``model`` computes, without int8 activations."""
    g = model.graph
    inits, producer, consumers = _index(g)
    arr = {name: numpy_helper.to_array(t) for name, t in inits.items()}
    drop: set[int] = set()  # id() of nodes replaced
    new_nodes, new_inits = [], []

    for n in g.node:
        if n.op_type == "MatMulInteger":
            xq, wq, _, wzp = n.input
            dql = producer[xq]
            (cast,) = consumers[n.output[0]]
            (mul,) = consumers[cast.output[0]]
            scale_mul = producer[next(i for i in mul.input if i != cast.output[0])]
            w_scale = next(i for i in scale_mul.input if i in arr)
            w = (arr[wq].astype(np.float32) - arr[wzp].astype(np.float32)) * arr[w_scale].astype(np.float32)
            name = wq.removesuffix("_quantized") + "_fp32"
            new_inits.append(numpy_helper.from_array(w.astype(np.float32), name))
            new_nodes.append(helper.make_node("MatMul", [dql.input[0], name], [mul.output[0]], name=n.name + "_fp32"))
            drop |= {id(n), id(cast), id(mul), id(scale_mul)}
        elif n.op_type == "DequantizeLinear" and producer.get(n.input[0]) is not None and producer[n.input[0]].op_type == "Gather":
            gather = producer[n.input[0]]
            wq, scale, zp = gather.input[0], n.input[1], n.input[2]
            w = (arr[wq].astype(np.float32) - arr[zp].astype(np.float32)) * arr[scale].astype(np.float32)
            name = wq.removesuffix("_quantized") + "_fp32"
            new_inits.append(numpy_helper.from_array(w.astype(np.float32), name))
            new_nodes.append(helper.make_node("Gather", [name, gather.input[1]], [n.output[0]], name=gather.name + "_fp32",
                                              **{a.name: helper.get_attribute_value(a) for a in gather.attribute}))
            drop |= {id(n), id(gather)}
    kept = [n for n in g.node if id(n) not in drop] + new_nodes
    # Drop what nothing reads any more (DynamicQuantizeLinear nodes, int8 initializers).
    outputs = {o.name for o in g.output}
    while True:
        used = {i for n in kept for i in n.input} | outputs
        still = [n for n in kept if any(o in used for o in n.output)]
        if len(still) == len(kept):
            break
        kept = still
    used = {i for n in kept for i in n.input}
    out = helper.make_model(
        helper.make_graph(_toposort(kept, g), g.name, g.input, g.output,
                          [t for t in list(g.initializer) + new_inits if t.name in used]),
        opset_imports=model.opset_import, ir_version=model.ir_version)
    onnx.checker.check_model(out)
    return out


def _toposort(nodes: list, g) -> list:
    ready = {i.name for i in g.input} | {t.name for t in g.initializer} | {""}
    for n in nodes:  # initializers added by dequantize()
        ready |= {i for i in n.input if i.endswith("_fp32")}
    order, pending = [], list(nodes)
    while pending:
        rest = []
        for n in pending:
            if all(i in ready for i in n.input):
                order.append(n)
                ready |= set(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise ValueError(f"graph has a cycle or a missing input near {rest[0].name}")
        pending = rest
    return order


def fp16_storage(model: onnx.ModelProto, min_size: int = 4096) -> onnx.ModelProto:
    """Store each large fp32 weight as fp16 behind a ``Cast`` back to fp32.

    onnxruntime folds a ``Cast`` of an initializer into a constant when the session
    loads, so inference runs entirely in fp32 (half the file size, the same speed);
    the stored values are the fp32 weights rounded to fp16 (relative error <= 2**-11).
    """
    g = model.graph
    keep, casts = [], []
    for t in g.initializer:
        a = numpy_helper.to_array(t)
        if a.dtype == np.float32 and a.size >= min_size:
            keep.append(numpy_helper.from_array(a.astype(np.float16), t.name + "_fp16"))
            casts.append(helper.make_node("Cast", [t.name + "_fp16"], [t.name], to=onnx.TensorProto.FLOAT,
                                          name=t.name + "_cast"))
        else:
            keep.append(t)
    out = helper.make_model(helper.make_graph(casts + list(g.node), g.name, g.input, g.output, keep),
                            opset_imports=model.opset_import, ir_version=model.ir_version)
    onnx.checker.check_model(out)
    return out


def hf_weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The fp32 weights of a graph this script wrote, under Hugging Face BERT names.

    For checking the graph against ``bert_numpy.NumpyBert`` (an independent forward
    pass): MatMul weights are found by their node's name and transposed back to
    ``Linear``'s (out, in) layout; fp16-stored weights are upcast as the graph does.
    """
    g = model.graph
    arr = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    for n in g.node:  # fp16 storage: name_fp16 -> Cast -> name
        if n.op_type == "Cast" and n.input[0] in arr:
            arr[n.output[0]] = arr[n.input[0]].astype(np.float32)
    out = {k: v for k, v in arr.items() if k.startswith("bert.") or k.startswith("classifier.")}
    for n in g.node:
        if n.op_type == "MatMul" and n.input[1] in arr:
            # "/bert/encoder/layer.0/attention/self/query/MatMul..." -> "bert.encoder.layer.0.attention.self.query"
            out[".".join(n.name.strip("/").split("/")[:-1]) + ".weight"] = arr[n.input[1]].T
        elif n.op_type == "Gather" and n.input[0] in arr:
            out[n.input[0].removesuffix("_fp32")] = arr[n.input[0]]
    return out


def main(folder: str, fp32_out: str) -> None:
    model_path = Path(folder) / "model.onnx"
    ref = dequantize(onnx.load(model_path))
    Path(fp32_out).parent.mkdir(parents=True, exist_ok=True)
    onnx.save(ref, fp32_out)
    onnx.save(fp16_storage(ref), model_path)
    print(f"fp32 reference -> {fp32_out}; fp16-stored, fp32-computed graph -> {model_path} "
          f"({model_path.stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
