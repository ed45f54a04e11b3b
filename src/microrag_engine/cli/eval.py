"""``microrag eval`` - retrieval quality on a BEIR-format dataset or HotpotQA-100.

Prints nDCG/MAP/recall per configuration (the configured one and, unless
``--no-ablation``, each leg alone and the other fusion); ``--out`` saves the JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..config import override
from ..eval.retrieval import METRICS, evaluate, load_dataset
from .options import add_fusion, add_output, add_preset, diag, settings_for


def register(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser("eval", help="measure retrieval on a BEIR dataset or HotpotQA-100")
    ev.add_argument("--dataset", required=True, metavar="DIR",
                    help="BEIR folder (corpus.jsonl[.gz], queries.jsonl, qrels/) or the hotpotqa-100 folder")
    ev.add_argument("--split", default="test", help="qrels split (default: %(default)s)")
    ev.add_argument("--dynamic", action="store_true", help="configured row uses dynamic w_kw (exact-looking tokens)")
    ev.add_argument("--cache", metavar="FILE", help="document-vector cache (.npz; default ~/.cache/microrag/)")
    ev.add_argument("--out", metavar="FILE", help="also save the results as JSON")
    ev.add_argument("--no-ablation", action="store_true", help="only the configured setting")
    add_preset(ev, chunker=False, index=False)  # whole passages are the documents: no chunking
    add_fusion(ev.add_argument_group("ranking (no gate, no cap: evaluation ranks every document)"))
    add_output(ev)
    ev.set_defaults(run=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    ds = load_dataset(args.dataset, args.split)
    settings = settings_for(args, args.preset or "default")
    if args.dynamic:
        settings = override(settings, dynamic_w_kw=True)
    cache = (Path(args.cache) if args.cache
             else Path.home() / ".cache" / "microrag" / f"{Path(args.dataset).name}.{settings.embedder}.npz")
    if not args.quiet:
        diag(f"evaluating {ds.name}: {len(ds.texts)} documents, {len(ds.queries)} judged queries "
             f"(document vectors cached in {cache})")
    rows = evaluate(ds, settings, cache=cache, ablation=not args.no_ablation)
    result = {"dataset": ds.name, "documents": len(ds.texts), "queries": len(ds.queries),
              "settings": settings.as_dict(), "rows": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
        return 0
    cols = list(METRICS) + ["recall@2", "recall@5"]
    print(f"{'config':<26}" + "".join(f"{c:>11}" for c in cols))
    for r in rows:
        print(f"{r['config']:<26}" + "".join(f"{r[c]:>11.4f}" for c in cols))
    return 0
