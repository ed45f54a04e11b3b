"""Rebuild a shipped cross-encoder's int8 graph so it gives the same numbers on every x86-64 CPU.

    .venv/bin/python training/requantize.py src/microrag_engine/models/nli build/nli-fp32.onnx
    .venv/bin/python training/requantize.py src/microrag_engine/models/rerank build/rerank-fp32.onnx

Why: onnxruntime's dynamic int8 MatMul multiplies u8 activations by s8 weights. On
CPUs without AVX-512 VNNI the AVX2 kernel adds pairs of u8*s8 products into 16-bit
lanes (``vpmaddubsw``), which saturate when both operands are large (255*127*2 >
32767); VNNI and AMX kernels accumulate in 32 bits and never saturate. So one graph
gave different verdicts on different CPUs. With 7-bit weights (``reduce_range=True``,
|w| <= 63) a pair sums to at most 255*64*2 = 32640: no saturation on any path, and the
integer products are exact everywhere.

What it does: the shipped graph is the only copy of the trained weights, so it is first
turned back into an fp32 graph (each ``DynamicQuantizeLinear -> MatMulInteger -> Cast ->
Mul`` chain becomes one ``MatMul`` with the dequantized weights; each quantized
embedding ``Gather -> DequantizeLinear`` becomes a ``Gather`` over fp32 rows). That fp32
graph is the reference the model card compares against (written to the second path, not
shipped). It is then quantized again with onnxruntime's ``quantize_dynamic`` (per-channel
QInt8 weights, ``reduce_range=True``) and the result replaces ``model.onnx`` in place.
It does not retrain and does not change the tokenizer or the config.
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


def main(folder: str, fp32_out: str) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model_path = Path(folder) / "model.onnx"
    ref = dequantize(onnx.load(model_path))
    Path(fp32_out).parent.mkdir(parents=True, exist_ok=True)
    onnx.save(ref, fp32_out)
    quantize_dynamic(fp32_out, str(model_path), weight_type=QuantType.QInt8, per_channel=True,
                     reduce_range=True, op_types_to_quantize=["MatMul", "Gather"])
    print(f"fp32 reference -> {fp32_out}; 7-bit per-channel int8 -> {model_path} "
          f"({model_path.stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
