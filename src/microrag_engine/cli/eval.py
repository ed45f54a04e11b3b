"""``microrag eval`` - retrieval quality on a BEIR-format dataset or HotpotQA-100,
or answer quality on a QA set.

``--dataset``: nDCG/MAP/recall per configuration (the configured one and, unless
``--no-ablation``, each leg alone and the other fusion). ``--qa FILE``: every question
asked as ``microrag ask`` would (extractive, or the LLM at ``LLM_BASE_URL`` with
``--llm``) over ``--index``/``--corpus``, and hit@4, fact recall, refusals and answer
latency printed as a table. ``--out`` saves the JSON either way.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..config import LLMConfig, override
from ..errors import MicroRAGError
from ..eval.qa import load_qa, run_qa, summarise, table
from ..eval.retrieval import METRICS, evaluate, load_dataset
from .options import add_corpus, add_fusion, add_index, add_output, add_preset, diag, engine_for, settings_for


def register(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser("eval", help="measure retrieval on a BEIR dataset or HotpotQA-100, or answers on a QA set")
    what = ev.add_mutually_exclusive_group(required=True)
    what.add_argument("--dataset", metavar="DIR",
                      help="BEIR folder (corpus.jsonl[.gz], queries.jsonl, qrels/) or the hotpotqa-100 folder")
    what.add_argument("--qa", metavar="FILE", help="QA set (JSON lines: id, question, kind, docs, facts) to answer "
                                                  "over --index/--corpus (see benchmarks/qa/)")
    qa = ev.add_argument_group("QA sets (--qa)")
    add_index(qa)
    add_corpus(qa)
    qa.add_argument("--llm", action="store_true", help="answer with the LLM at LLM_BASE_URL (default: extractive)")
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
    if args.qa:
        return _qa(args)
    if args.index or args.corpus or args.llm:
        raise MicroRAGError("--index, --corpus and --llm belong to --qa; --dataset brings its own corpus")
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


def _qa(args: argparse.Namespace) -> int:
    if args.dynamic or args.cache or args.no_ablation or args.split != "test":
        raise MicroRAGError("--split, --dynamic, --cache and --no-ablation belong to --dataset, not --qa")
    items = load_qa(args.qa)
    llm = LLMConfig.from_env() if args.llm else None
    if args.llm and llm is None:
        raise MicroRAGError("--llm needs LLM_BASE_URL (an OpenAI-compatible endpoint)")
    engine = engine_for(args)
    if not args.quiet:
        diag(f"answering {len(items)} questions from {args.qa} "
             + (f"with the LLM at {llm.base_url}" if llm else "extractively"))
    results = run_qa(engine, items, llm)
    summary = summarise(results)
    name = Path(args.qa).stem
    out = {"qa": name, "mode": "llm" if llm else "extractive", "settings": engine.settings.as_dict(),
           "summary": summary, "results": [r.as_dict() for r in results]}
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    if args.json:
        json.dump(out, sys.stdout, indent=1)
        print()
    else:
        print(table([(name, summary)]))
    return 0
