"""Copy a trained model's ONNX folder into the package, and calibrate the NLI thresholds.

    .venv/bin/python training/ship.py nli build/nli/onnx
    .venv/bin/python training/ship.py rerank build/rerank/onnx

For NLI, ``min_entail`` / ``min_contra`` are chosen by ``evaluate_nli.calibrate``
(SciFact *train* claims + RAG-shaped items from SciFact train abstracts) and
recorded in the shipped ``config.json`` under ``"microrag"``.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "datasets"


def main(kind: str, src: str) -> None:
    dest = REPO / "src" / "microrag_engine" / "models" / kind
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("model.onnx", "config.json", "tokenizer.json"):
        shutil.copy2(Path(src) / name, dest / name)
    if kind == "nli":
        import evaluate_nli

        from microrag_engine.runtime.crossencoder import CrossEncoder
        from microrag_engine.verify.nli import NLIModel

        best = evaluate_nli.calibrate(NLIModel(CrossEncoder(dest)), SHARED)
        cfg = json.loads((dest / "config.json").read_text())
        cfg["microrag"] = {"min_entail": best["min_entail"], "min_contra": best["min_contra"],
                           "calibrated_on": f"{best['n']} SciFact-train items (claims + RAG-shaped)",
                           "balanced_accuracy": round(best["score"], 4)}
        (dest / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        print(json.dumps(cfg["microrag"], indent=1))
    print(f"shipped {kind} -> {dest} ({(dest / 'model.onnx').stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
