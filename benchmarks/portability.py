"""Do the shipped int8 cross-encoders give the same numbers on every CPU? Measure it.

    # 1. probabilities of one model over fixed pairs (run once per model and per CPU path)
    python benchmarks/portability.py dump src/microrag_engine/models/nli out/nli-int8.npz
    python benchmarks/portability.py dump src/microrag_engine/models/nli out/nli-fp32.npz --onnx build/nli-fp32.onnx
    # the AVX2 kernels on an AVX-512 machine: valgrind's CPU has AVX2 and no AVX-512
    valgrind -q --tool=none python benchmarks/portability.py dump ... --limit 40
    # 2. agreement of argmax and the probability gap between two dumps
    python benchmarks/portability.py compare out/nli-fp32.npz out/nli-int8.npz
    # 3. retrieval figures with the (int8) embedder's graph fused, then unfused
    python benchmarks/portability.py eval && python benchmarks/portability.py eval --no-fusion

Pairs: fixed 200-row samples of the NLI sets the regression test reads (MNLI-m gold,
SNLI test, HealthVer test, SciTail test) and SciFact test (cited abstract, claim)
items, which are long (up to the 128-token limit) and so stress int8 accumulation.
The fp32 reference is the graph ``training/requantize.py`` rebuilds from the shipped
weights. Figures go to the model card.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))  # dev-only tools: evaluate_nli

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "datasets"
SETS = ("mnli_m_gold", "snli_test", "healthver_test", "scitail_test")


def pairs(limit: int) -> list[tuple[str, str]]:
    import evaluate_nli as ev

    out = []
    for name in SETS:
        out += [(r["premise"], r["hypothesis"]) for r in ev.sample(ev.read_jsonl(SHARED / "nli" / f"{name}.jsonl"), limit)]
    out += [(" ".join(chunks), claim) for chunks, claim, _ in ev.scifact_items(SHARED, "test", limit)]
    return out


def cpu_flags() -> list[str]:
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return []
    return sorted(f for f in flags if f.startswith(("avx512_vnni", "avx_vnni", "amx", "avx2", "avx512f")))


def dump(folder: Path, out: Path, limit: int, onnx: Path | None, no_fusion: bool = False, numpy_ref: bool = False) -> None:
    from microrag_engine.runtime.crossencoder import CrossEncoder, softmax

    if no_fusion:  # same weights, unfused kernels: another fp32 rounding path on this CPU
        _unfused_sessions()

    with tempfile.TemporaryDirectory() as tmp:
        if onnx is not None:  # same tokenizer and config, another graph
            for name in ("config.json", "tokenizer.json"):
                shutil.copy2(folder / name, Path(tmp) / name)
            os.symlink(onnx.resolve(), Path(tmp) / "model.onnx")
            folder = Path(tmp)
        enc = CrossEncoder(folder)
        if numpy_ref:  # the same weights through bert_numpy's independent forward pass
            import onnx as onnx_lib

            sys.path.insert(0, str(ROOT / "training"))
            from requantize import hf_weights

            from microrag_engine.runtime.bert_numpy import NumpyBert

            graph = onnx_lib.load(str(folder / "model.onnx"))
            enc._forward = NumpyBert({"num_attention_heads": 12, "num_hidden_layers": 6}, hf_weights(graph))
        probs = softmax(enc.logits(pairs(limit)))
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, probs=probs, meta=json.dumps({"model": str(onnx or folder), "limit": limit, "no_fusion": no_fusion,
                                               "numpy": numpy_ref, "cpu_flags": cpu_flags(),
                                                "machine": platform.machine()}))
    print(f"{out}: {len(probs)} pairs")


def _unfused_sessions() -> None:
    """Every onnxruntime session from here on runs the graph unfused (another kernel path)."""
    import onnxruntime as ort

    from microrag_engine import index

    def unfused(path: Path):
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])

    index.ort_session = unfused


def eval_figures(no_fusion: bool) -> dict:
    """The default preset's SciFact and HotpotQA figures (as tests/eval/test_eval.py computes them)."""
    from microrag_engine.config import preset
    from microrag_engine.eval.retrieval import evaluate, load_dataset

    if no_fusion:
        _unfused_sessions()
    out = {}
    for name, cache in [("scifact", "scifact-corpus.minilm.npz"), ("hotpotqa-100", "hotpotqa-100.minilm.npz")]:
        row = evaluate(load_dataset(SHARED / name, "test"), preset("default"), cache=ROOT / "benchmarks" / "data" / cache)[0]
        out[name] = {k: round(v, 4) for k, v in row.items() if isinstance(v, float)}
    return out


def compare(a: Path, b: Path) -> dict:
    pa, pb = np.load(a)["probs"], np.load(b)["probs"]
    n = min(len(pa), len(pb))  # a valgrind run may cover a prefix of the pairs
    pa, pb = pa[:n], pb[:n]
    gap = np.abs(pa - pb).max(axis=1)
    return {"n": int(n), "argmax_agreement": float((pa.argmax(1) == pb.argmax(1)).mean()),
            "max_prob_gap": float(gap.max()), "p99_prob_gap": float(np.quantile(gap, 0.99)),
            "identical": bool(np.array_equal(pa, pb))}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("folder", type=Path)
    d.add_argument("out", type=Path)
    d.add_argument("--onnx", type=Path, help="another graph for the same folder (e.g. the fp32 reference)")
    d.add_argument("--limit", type=int, default=200, help="rows per set")
    d.add_argument("--no-fusion", action="store_true", help="disable graph optimisations (a proxy for another CPU's kernels)")
    d.add_argument("--numpy", action="store_true", help="run the graph's weights through bert_numpy instead of onnxruntime")
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    e = sub.add_parser("eval")
    e.add_argument("--no-fusion", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "eval":
        print(json.dumps(eval_figures(args.no_fusion)))
    elif args.cmd == "dump":
        dump(args.folder, args.out, args.limit, args.onnx, args.no_fusion, args.numpy)
    else:
        print(json.dumps(compare(args.a, args.b)))


if __name__ == "__main__":
    sys.exit(main())
